"""The example notebooks run, cell by cell, in a real Jupyter kernel of this Python (nbclient), as written
(the sizes a reader runs) against a store in a temp dir (``DLBENCH_DB``); the tests read their outputs.

The kernel is this interpreter's own: a kernelspec written to a temp ``JUPYTER_PATH`` runs
``sys.executable -m ipykernel_launcher``, so a fresh venv (as ``.ci/run`` makes) needs no registered kernel.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from dlbench.spec import RunSpec
from dlbench.store import RunFilter, open_store

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
KERNEL = "dlbench-test-venv"


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """This Python as a Jupyter kernel, the worktree's source first on its path, the store in tmp. (Jupyter's
    packages are imported when a test here runs, not when the suite is collected: nbformat's JSON schema checker
    costs each pytest worker 1.5 s of CPU.)"""
    pytest.importorskip("ipykernel")
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec_dir.joinpath("kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "dlbench tests", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("DLBENCH_DB", str(tmp_path / "runs.db"))
    monkeypatch.setenv("DLBENCH_TB_DIR", str(tmp_path / "tb"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    return tmp_path


def execute(name: str, workdir: Path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    book = nbformat.read(EXAMPLES / name, as_version=4)
    assert all(not cell.get("outputs") for cell in book.cells if cell.cell_type == "code"), \
        f"{name} is committed with outputs; clear them (jupyter nbconvert --clear-output)"
    client = nbclient.NotebookClient(book, kernel_name=KERNEL, timeout=600, resources={"metadata": {"path": str(workdir)}})
    client.execute()
    return book


def outputs(cell) -> tuple[str, dict]:
    """The cell's printed text and its rich data (by MIME type) joined."""
    text, data = "", {}
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            text += out.text
        elif out.output_type in ("execute_result", "display_data"):
            for mime, value in out.data.items():
                data[mime] = data.get(mime, "") + (value if isinstance(value, str) else json.dumps(value))
    return text, data


def find(book, fragment: str):
    return next(cell for cell in book.cells if cell.cell_type == "code" and fragment in cell.source)


def stored(db: Path, **tags) -> list[dict]:
    store = open_store(str(db), create=False)
    try:
        return store.records(RunFilter(tags=tags))
    finally:
        store.close()


def check_first_benchmark(book, db: Path, steps: int) -> None:
    runs = {r["spec"]["precision"]: r for r in stored(db, example="first")}
    assert sorted(runs) == ["bf16", "fp32"] and runs["fp32"]["status"] == "ok"
    text, _ = outputs(find(book, "fp32 = dn.run"))
    assert f"lstm measure: {steps}/{steps}" in text  # the live progress, as plain lines (no ipywidgets here)
    assert f"ok: {runs['fp32']['result']['samples_per_s']:,.1f} samples/s" in text
    # bf16 runs where the CPU (or GPU) has it; elsewhere it is recorded failed with a reason a person
    # understands, and the notebook goes on (it raised TypeError on the failed record before)
    bf16 = runs["bf16"]
    text, _ = outputs(find(book, "bf16 = dn.run"))
    if bf16["status"] != "ok":
        assert "use --precision fp32 on this CPU" in bf16["error"] and "use --precision fp32" in text
    _, frame = outputs(find(book, "df = dn.results"))
    assert all(r["id"] in frame["text/html"] for r in runs.values())  # the DataFrame lists both stored runs
    _, compare = outputs(find(book, "dn.compare("))
    assert "only in A" in compare["text/plain"] and ("only in B" in compare["text/plain"]) == (bf16["status"] == "ok")
    _, figure = outputs(find(book, "dn.plot_runs"))
    assert "image/png" in figure


def test_first_benchmark(kernel_env):
    """What a reader runs (hidden size 256, 20 steps, device auto): on a CPU without native bf16 the bf16
    run fails there (oneDNN has no bf16 LSTM) and the notebook must cope."""
    book = execute("01_first_benchmark.ipynb", kernel_env)
    check_first_benchmark(book, kernel_env / "runs.db", steps=20)


def test_scaling_study(kernel_env):
    """What a reader runs: hidden size 256, 20 steps, device auto, 1 and 2 processes."""
    book = execute("02_scaling_study.ipynb", kernel_env)
    check_scaling_study(book, kernel_env / "runs.db")
    assert {r["spec"]["params"]["hidden_size"] for r in stored(kernel_env / "runs.db")} == {256}


def check_scaling_study(book, db: Path) -> None:
    runs = stored(db)
    assert sorted(r["spec"]["world_size"] for r in runs) == [1, 2] and all(r["status"] == "ok" for r in runs)
    _, frame = outputs(find(book, "efficiency"))
    assert "efficiency" in frame["text/html"]
    _, figure = outputs(find(book, "dn.plot_scaling"))
    assert "image/png" in figure


def test_advice_and_telemetry(kernel_env):
    """What a reader runs: every knob, hidden size 128, the notebook's own 45 s budget (the search stops there
    and says what it did not try)."""
    book = execute("03_advice_and_telemetry.ipynb", kernel_env)
    check_advice_and_telemetry(book, kernel_env / "runs.db")


def check_advice_and_telemetry(book, db: Path) -> None:
    runs = stored(db)
    session = {r["spec"]["tags"].get("advise") for r in runs} - {None}
    assert len(session) == 1
    advised = [r for r in runs if r["spec"]["tags"].get("advise")]
    _, frame = outputs(find(book, "dn.advice_frame"))
    assert all(r["id"] in frame["text/html"] for r in advised)  # the table has every run of the session
    text, _ = outputs(find(book, "summary_lines"))
    assert text.startswith("defaults: batch_size=64")
    for fragment in ("dn.plot_advice", "dn.plot_telemetry"):
        assert "image/png" in outputs(find(book, fragment))[1], fragment
    text, _ = outputs(find(book, "profile=PROFILE_DIR"))
    if "profile" in RunSpec.model_fields:  # run --profile (issue 12, part 1) is in this dlbench
        profiled = [r for r in runs if (r.get("result") or {}).get("profile")]
        assert len(profiled) == 1 and str(profiled[0]["result"]["profile"]["breakdown"]) in text
    else:
        assert "not in this dlbench yet" in text
    text, data = outputs(find(book, "dn.tensorboard"))
    if importlib.util.find_spec("tensorboard"):  # the kernel is this Python: it has TensorBoard too
        assert "http://127.0.0.1:" in data["text/html"] and "stopped: True" in text
    else:
        assert "not installed" in text
