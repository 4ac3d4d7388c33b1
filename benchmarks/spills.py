"""Vector registers kept on the stack in the hot loops of the compiled kernels, read from the machine code the JIT runs.

A register block that does not fit the vector registers (or one that LLVM's allocator gives up on inside a large
kernel) loads and stores its accumulators at every step: the kernel then runs at a fraction of its block's rate
with nothing wrong in its results. numba's printed assembly (``inspect_asm``) is made by a separate code
generation and need not match what runs (stop 85: it showed a clean loop where the running kernel kept about 20
of 24 accumulators on the stack, 0.44x the rate). So this script runs representative calls (TTM on every mode at
ranks 3-64, HOOI and CP-ALS, float32 and float64), then disassembles each compiled function's bytes in memory
with ``objdump`` and reports, per loop with fused multiply-adds, the vector loads and stores addressed off the
stack pointer.

Each function is read from its entry address up to the next compiled function's entry in the same mapping
(``/proc/self/maps``), at most ``--max-bytes``. Linux x86-64 with GNU ``objdump`` only.

Run:  python benchmarks/spills.py [--quick] [--min-ops 8]
Writes benchmarks/results/spills.{json,md}.
"""

from __future__ import annotations

import argparse
import ctypes
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llvmlite.binding as llvm
from _common import environment, positive_int, write_json, write_text

import tuckerkit as tk
from tuckerkit.engine._roofline import cpu_model


def workload(quick: bool) -> None:
    """The calls whose kernels are inspected (each compiles or loads its kernels)."""
    rng = np.random.default_rng(0)
    shapes = [(40, 40, 40), (16, 16, 16, 16)] if quick else [(200, 200, 200), (64, 64, 64, 64), (30, 40, 50)]
    ranks = [3, 10, 32] if quick else [3, 10, 16, 32, 50, 64]
    for dtype in (np.float64, np.float32):
        for shape in shapes:
            X = rng.standard_normal(shape).astype(dtype)
            for R in ranks:
                for mode in range(len(shape)):
                    tk.ttm(X, rng.standard_normal((R, shape[mode])).astype(dtype), mode)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tk.hooi(X, 5, max_iter=2, tol=0)
                tk.cp_als(X, 10, max_iter=2, tol=0, random_state=0)
                if not quick:
                    tk.cp_als(X, 50, max_iter=2, tol=0, random_state=0)


def compiled_functions() -> list[tuple[str, str, int]]:
    """(dispatcher, signature, entry address) of every compiled signature of tuckerkit's numba functions."""
    from numba.core.registry import CPUDispatcher

    seen: set[int] = set()
    out = []
    for modname, mod in sorted(sys.modules.items()):
        if not modname.startswith("tuckerkit") or mod is None:
            continue
        for name, disp in sorted(vars(mod).items()):
            if not isinstance(disp, CPUDispatcher) or id(disp) in seen:
                continue
            seen.add(id(disp))
            for sig in disp.signatures:
                cres = disp.overloads[sig]
                addr = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
                if addr:
                    out.append((f"{modname}.{name}", str(sig), int(addr)))
    return out


def mappings() -> list[tuple[int, int]]:
    """The process's readable and executable mappings (start, end)."""
    spans = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, perms = line.split()[:2]
        if perms.startswith("r") and "x" in perms:
            lo, hi = (int(v, 16) for v in span.split("-"))
            spans.append((lo, hi))
    return spans


def loops(code: bytes, objdump: str) -> list[dict]:
    """The loops of ``code`` (backward jumps) that hold fused multiply-adds: their length, FMAs and vector
    stack accesses (an ``(x|y|z)mm`` operand beside an ``rsp`` address)."""
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(code)
        f.flush()
        text = subprocess.run([objdump, "-D", "--insn-width=15", "-b", "binary", "-m", "i386:x86-64", f.name],
                              capture_output=True, text=True, check=True).stdout
    ins = []
    for line in text.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\t(?:[0-9a-f]{2} )+\s*\t?(.*)", line)
        if m and m.group(2).strip():
            ins.append((int(m.group(1), 16), m.group(2)))
    index = {a: i for i, (a, _) in enumerate(ins)}
    found: dict[int, dict] = {}
    for i, (a, t) in enumerate(ins):
        m = re.match(r"j\w+\s+0x([0-9a-f]+)", t)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= a or target not in index or i - index[target] > 800:
            continue
        body = [x for _, x in ins[index[target]:i + 1]]
        fma = sum("vfmadd" in b for b in body)
        if fma == 0:
            continue
        stack = sum("rsp" in b and "mm" in b for b in body)
        best = found.get(target)
        if best is None or len(body) > best["instructions"]:
            found[target] = {"offset": target, "instructions": len(body), "fma": fma, "stack_vector_ops": stack}
    return sorted(found.values(), key=lambda d: -d["stack_vector_ops"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--min-ops", type=positive_int, default=8,
                    help="report loops with at least this many vector stack accesses")
    ap.add_argument("--max-bytes", type=positive_int, default=1 << 20)
    args = ap.parse_args()
    objdump = shutil.which("objdump")
    if sys.platform != "linux" or objdump is None:
        sys.exit("spills.py: expected Linux with GNU objdump (binutils); received "
                 f"platform {sys.platform!r}, objdump {'found' if objdump else 'missing'}")
    workload(args.quick)
    funcs = compiled_functions()
    spans = mappings()
    starts = sorted({a for _, _, a in funcs})
    rows = []
    for name, sig, addr in funcs:
        span = next(((lo, hi) for lo, hi in spans if lo <= addr < hi), None)
        if span is None:
            continue
        nxt = next((s for s in starts if s > addr), span[1])
        size = min(span[1], nxt) - addr
        size = min(size, args.max_bytes)
        code = ctypes.string_at(addr, size)
        found = loops(code, objdump)
        worst = found[0] if found else None
        rows.append({"function": name, "signature": sig, "bytes": size, "loops": len(found),
                     "worst_stack_vector_ops": worst["stack_vector_ops"] if worst else 0,
                     "worst_loop": worst})
    flagged = [r for r in rows if r["worst_stack_vector_ops"] >= args.min_ops]
    env = environment()
    write_json("spills.json", {"benchmark": "spills", "environment": env, "min_ops": args.min_ops, "rows": rows})
    lines = ["# Vector registers on the stack in the compiled kernels' loops", "",
             f"{len(rows)} compiled functions read from memory after the workload; loops with fused multiply-adds "
             f"and at least {args.min_ops} vector accesses off the stack pointer: {len(flagged)}.", ""]
    if flagged:
        lines += ["| function | dtype | loop instructions | FMAs | vector stack accesses |",
                  "|---|---|---|---|---|"]
        for r in sorted(flagged, key=lambda r: -r["worst_stack_vector_ops"]):
            w = r["worst_loop"]
            dtype = "float32" if "float32" in r["signature"] else "float64" if "float64" in r["signature"] else "-"
            lines.append(f"| `{r['function']}` | {dtype} | {w['instructions']} | "
                         f"{w['fma']} | {w['stack_vector_ops']} |")
    lines += ["", f"Reproduce: `python benchmarks/spills.py`. CPU: {cpu_model()} (LLVM target "
              f"`{llvm.get_host_cpu_name()}`)."]
    write_text("spills.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
