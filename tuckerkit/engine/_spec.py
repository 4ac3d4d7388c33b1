"""Parse einsum-style subscripts for a pairwise contraction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Spec:
    """A parsed pairwise contraction ``a,b->c`` (each a string of distinct index letters)."""

    a: str
    b: str
    c: str

    def __str__(self) -> str:
        return f"{self.a},{self.b}->{self.c}"


def parse_spec(spec: str, ndim_a: int, ndim_b: int) -> Spec:
    """Parse and validate ``spec`` for operands of the given orders.

    Implicit output (no ``->``) follows numpy.einsum: the indices that appear exactly once, sorted.
    """
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a string such as 'mk,knp->mnp'; received {type(spec).__name__}")
    text = spec.replace(" ", "")
    if "->" in text:
        lhs, _, out = text.partition("->")
        if "->" in out:
            raise ValueError(f"spec {spec!r} has more than one '->'; expected 'a,b->c'")
    else:
        lhs, out = text, None
    ops = lhs.split(",")
    if len(ops) != 2:
        raise ValueError(
            f"spec {spec!r} names {len(ops)} operand(s); contract() takes exactly 2 (expected 'a,b->c')"
        )
    a, b = ops
    for name, sub in (("A", a), ("B", b), ("output", out if out is not None else "")):
        bad = [ch for ch in sub if not ch.isalpha() or not ch.isascii()]
        if bad:
            raise ValueError(
                f"spec {spec!r}: subscripts of {name} contain {bad[0]!r}; expected ASCII letters only"
            )
    for name, sub in (("A", a), ("B", b)):
        dup = sorted({ch for ch in sub if sub.count(ch) > 1})
        if dup:
            raise ValueError(
                f"spec {spec!r}: index {dup[0]!r} is repeated in operand {name}; repeated indices "
                "(diagonals/traces) are not a pairwise contraction"
            )
    if out is None:
        out = "".join(sorted(ch for ch in set(a + b) if (a + b).count(ch) == 1))
    dup = sorted({ch for ch in out if out.count(ch) > 1})
    if dup:
        raise ValueError(f"spec {spec!r}: output index {dup[0]!r} is repeated; each output index appears once")
    missing = [ch for ch in out if ch not in a and ch not in b]
    if missing:
        raise ValueError(f"spec {spec!r}: output index {missing[0]!r} appears in neither operand")
    if len(a) != ndim_a:
        raise ValueError(f"spec {spec!r}: operand A has {len(a)} subscripts but A.ndim is {ndim_a}")
    if len(b) != ndim_b:
        raise ValueError(f"spec {spec!r}: operand B has {len(b)} subscripts but B.ndim is {ndim_b}")
    return Spec(a, b, out)
