"""Execute the example notebooks (``make examples`` rewrites them with fresh outputs; the tests run copies).

Usage: python examples/run_notebooks.py [--check] [NOTEBOOK ...]
  default      execute each notebook and save it in place with its outputs
  --check      execute into memory only and print each notebook's RESULTS
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOTEBOOKS = ("faces.ipynb", "topic_model.ipynb", "sparse_cp.ipynb", "nonnegative.ipynb")


def execute(path: Path, *, timeout: int = 600):
    """Run every cell of the notebook at ``path`` in a fresh kernel (cwd: its folder); raises on any error."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def results(nb) -> dict:
    """The JSON the notebook's last code cell prints (its measured numbers)."""
    cell = [c for c in nb.cells if c.cell_type == "code"][-1]
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
    return json.loads(text.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    import nbformat

    check = "--check" in argv
    names = [a for a in argv if not a.startswith("--")] or list(NOTEBOOKS)
    for name in names:
        path = (HERE / name) if not Path(name).exists() else Path(name)
        t0 = time.perf_counter()
        nb = execute(path)
        if not check:
            tmp = path.with_suffix(".ipynb.tmp")
            nbformat.write(nb, tmp)
            tmp.replace(path)
        print(f"{path.name}: ran in {time.perf_counter() - t0:.1f} s", json.dumps(results(nb))[:300])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
