"""The public API is documented: numpydoc sections, every parameter described, a runnable example, and the
API reference page lists exactly what ``__all__`` exports."""

import enum
import importlib
import inspect
import re
from pathlib import Path

import pytest

MODULES = ["tuckerkit", "tuckerkit.engine", "tuckerkit.decomposition", "tuckerkit.sparse", "tuckerkit.io",
           "tuckerkit.estimators", "tuckerkit.datasets", "tuckerkit.backend", "tuckerkit.compat.tensorly",
           "tuckerkit.compat.pyttb"]
DOCS = Path(__file__).resolve().parents[1] / "docs"


def _public():
    seen = {}
    for m in MODULES:
        mod = importlib.import_module(m)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                seen.setdefault(id(obj), (f"{m}.{name}", obj))
    return sorted(seen.values())


def _section(doc: str, title: str) -> str | None:
    m = re.search(rf"^{title}\n-{{{len(title)}}}\n(.*?)(?=^\w[\w ]*\n-{{3,}}\n|\Z)", doc, re.S | re.M)
    return m.group(1) if m else None


def _documented_names(params: str) -> set[str]:
    names = set()
    for line in params.splitlines():
        if line and not line[0].isspace():
            head = line.split(" : ")[0]
            names.update(n.strip().lstrip("*") for n in head.split(","))
    return names


@pytest.mark.parametrize(("qualname", "obj"), _public(), ids=lambda v: v if isinstance(v, str) else "")
def test_numpydoc_docstring(qualname, obj):
    doc = inspect.getdoc(obj)
    assert doc, f"{qualname} has no docstring"
    examples = _section(doc, "Examples")
    assert examples is not None and ">>>" in examples, f"{qualname}: no Examples section with a doctest"
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return  # members are listed in the text; the Enum constructor is not the API
    target = obj.__init__ if inspect.isclass(obj) and not issubclass(obj, BaseException) else obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return
    wanted = [p for p in sig.parameters if p not in ("self", "args", "kwargs", "cls") and not p.startswith("_")]
    if inspect.isclass(obj) and (issubclass(obj, BaseException) or hasattr(obj, "__dataclass_fields__")):
        section = _section(doc, "Attributes") or _section(doc, "Parameters")
    else:
        section = _section(doc, "Parameters")
    if wanted:
        assert section is not None, f"{qualname}: no Parameters (or Attributes) section"
        missing = set(wanted) - _documented_names(section)
        assert not missing, f"{qualname}: parameters not described: {sorted(missing)}"
    if inspect.isfunction(obj) and sig.return_annotation not in (None, "None", inspect.Signature.empty):
        assert _section(doc, "Returns") is not None or _section(doc, "Yields") is not None, \
            f"{qualname}: no Returns section"


def test_api_page_lists_every_export():
    listed = set(re.findall(r"^   (\w+)$", (DOCS / "api.rst").read_text(), re.M))
    exported = {name for name, obj in ((n, o) for n, o in ((q.rsplit(".", 1)[1], o) for q, o in _public()))}
    assert exported <= listed, f"missing from docs/api.rst: {sorted(exported - listed)}"
    assert listed <= exported | {"__version__"}, f"not exported: {sorted(listed - exported)}"
