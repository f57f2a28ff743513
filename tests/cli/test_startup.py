"""``dlbench --help`` and ``dlbench list`` must not import torch (2-6 s): the catalogue's metadata is
readable without it. Checked in a fresh interpreter with ``-X importtime``, which names every module
imported; nothing here is timed."""

import functools
import json
import subprocess
import sys

import pytest


@functools.cache  # one fresh interpreter per command for the whole session (several tests read the same one)
def imported_modules(*args: str) -> tuple[frozenset[str], str]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "dlbench", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    modules = frozenset(line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:"))
    return modules, out.stdout


@pytest.mark.parametrize("args", [["--help"], ["list"], ["list", "--json"], ["run", "--help"], ["mlperf", "--help"],
                                  ["mlperf", "list"], ["mlperf", "list", "--json"]])
def test_no_torch_imported(args):
    modules, _ = imported_modules(*args)
    assert "dlbench.cli.app" in modules  # the probe sees dlbench's own imports
    heavy = sorted(m for m in modules if m.split(".")[0] in ("torch", "torchvision", "matplotlib"))
    assert heavy == [], f"dlbench {' '.join(args)} imported {heavy[:5]}"


def test_list_still_describes_every_parameter_without_torch():
    _, stdout = imported_modules("list", "--json")
    described = {d["name"]: d for d in json.loads(stdout)}
    assert described["resnet50"]["params"]["image_size"] == {
        "default": 224, "type": "int", "help": "height and width of the square input images (at least 32)",
        "minimum": 32}
    assert described["dcgan"]["params"]["image_size"]["choices"] == [32, 64, 128]


def test_mlperf_list_without_torch_says_what_the_task_classes_say():
    from dlbench.mlperf import tasks
    from dlbench.mlperf.tasks.metadata import describe

    _, stdout = imported_modules("mlperf", "list", "--json")
    listed = {d["name"]: d for d in json.loads(stdout)}
    assert set(listed) == set(tasks.names())
    for name in tasks.names():
        facts = {k: v for k, v in listed[name].items() if k not in ("baselines", "convergence")}  # measured, not class facts
        assert facts == tasks.get_class(name).describe()  # imports torch here, in the test only
        assert describe(tasks.TASKS[name]) == facts


#: Code a plain ``dlbench run`` has no use for: other job kinds, batch launchers, HPO (and their libraries).
NOT_FOR_A_PLAIN_RUN = ("dlbench.mlperf", "dlbench.api.mlperf", "dlbench.launch.k8s", "dlbench.launch.slurm",
                       "dlbench.launch.batch", "dlbench.hpo", "dlbench.api.hpo", "kubernetes", "optuna", "ray")


def test_a_plain_run_loads_only_what_it_runs(tmp_path):
    """Job kinds and launchers are "module:Class" strings imported on use: a tiny real run here imports
    none of the MLPerf, Slurm, Kubernetes or HPO modules."""
    modules, stdout = imported_modules("run", "lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8",
                                       "-b", "4", "--steps", "2", "--warmup", "1", "--db", str(tmp_path / "runs.db"),
                                       "--json")
    assert json.loads(stdout)["status"] == "ok"
    assert "dlbench.api.jobs" in modules and "dlbench.launch" in modules  # the probe sees the run's own modules
    loaded = sorted(m for m in modules if m.startswith(NOT_FOR_A_PLAIN_RUN))
    assert loaded == [], f"dlbench run imported {loaded[:8]}"


def test_help_does_not_import_pydantic_or_sqlalchemy():
    """pydantic (the run specs) and SQLAlchemy (the store's engine) cost ~0.2 s and ~0.3 s against a ~0.3 s
    start-up: only commands that build runs or open a store import them."""
    modules, _ = imported_modules("--help")
    assert "pydantic" not in modules and "dlbench.spec" not in modules
    assert "sqlalchemy" not in modules and "dlbench.store._engine" not in modules
