"""Every example notebook runs from top to bottom, and the numbers it claims hold."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
_spec = importlib.util.spec_from_file_location("run_notebooks", EXAMPLES / "run_notebooks.py")
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Each notebook executed once, from a copy (the committed notebook is never rewritten by the tests)."""
    import nbformat

    out = {}
    tmp = tmp_path_factory.mktemp("notebooks")
    for name in runner.NOTEBOOKS:
        nb = nbformat.read(EXAMPLES / name, as_version=4)
        copy = tmp / name
        nbformat.write(nb, copy)
        out[name] = runner.execute(copy)
    return out


def test_committed_notebooks_carry_their_outputs():
    import nbformat

    for name in runner.NOTEBOOKS:
        nb = nbformat.read(EXAMPLES / name, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(c.execution_count is not None for c in code), f"{name} is committed without outputs"
        assert runner.results(nb), name
    for name in ("faces.ipynb", "topic_model.ipynb"):
        nb = nbformat.read(EXAMPLES / name, as_version=4)
        pngs = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
        assert pngs >= 2, f"{name} should show its figures"


def test_faces_notebook(executed):
    res = runner.results(executed["faces.ipynb"])
    for row in res["compression"]:
        assert row["hooi"] <= row["tol"] + 1e-12 and row["hooi"] <= row["st_hosvd"] + 1e-12
    assert max(res["accuracy_tucker"].values()) >= 0.85  # faces vs non-faces: chance is 0.5
    assert res["hooi_seconds"]["tuckerkit"] > 0 and res["hooi_seconds"]["tensorly"] > 0


def test_topic_model_notebook(executed):
    res = runner.results(executed["topic_model.ipynb"])
    err = res["recovery_error"]
    assert err[-1] < 0.1 and err[-1] < err[0]
    assert len(res["lee_top_words"]) == 8 and all(len(w) == 10 for w in res["lee_top_words"])


def test_sparse_cp_notebook(executed):
    res = runner.results(executed["sparse_cp.ipynb"])
    assert abs(res["fit"]["tuckerkit"] - res["fit"]["pyttb"]) < 1e-12  # (the same start: 4.4e-16 apart)
    assert res["csf_bytes"] > 0 and res["nnz"] == 200_000


def test_nonnegative_notebook(executed):
    res = runner.results(executed["nonnegative.ipynb"])
    assert res["ranks"] == list(range(1, 9)) and res["nonnegative"]
    assert res["fit"][-1] > res["fit"][0] > 0.8  # eight components fit better than one
    assert res["corcondia"][0] > 99 and res["suggested_rank"] == 1 and 2 <= res["chosen_rank"] <= 8
    assert abs(res["error"]["tuckerkit"] - res["error"]["tensorly"]) < 1e-9  # same start, same HALS iterations
