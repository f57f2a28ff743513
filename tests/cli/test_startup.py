"""``dlbench --help`` and ``dlbench list`` must not import torch (2-6 s): the catalogue's metadata is
readable without it. Checked in a fresh interpreter with ``-X importtime``, which names every module
imported; nothing here is timed."""

import functools
import json
import os
import subprocess
import sys

import pytest


@functools.cache  # one fresh interpreter per command for the whole session (several tests read the same one)
def imported_modules(*args: str, code: str | None = None) -> tuple[frozenset[str], str]:
    """The modules ``python -m dlbench ARGS`` (or ``python -c CODE``) imports, and what it printed."""
    command = ["-c", code] if code else ["-m", "dlbench", *args]
    out = subprocess.run([sys.executable, "-X", "importtime", *command], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "100"})
    assert out.returncode == 0, out.stderr[-2000:]
    modules = frozenset(line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:"))
    return modules, out.stdout


@pytest.mark.parametrize("args", [["--help"], ["list"], ["list", "--json"], ["run", "--help"], ["mlperf", "--help"],
                                  ["mlperf", "list"], ["mlperf", "list", "--json"]])
def test_no_torch_imported(args):
    modules, _ = imported_modules(*args)
    assert "dlbench.cli.entry" in modules  # the probe sees dlbench's own imports
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


#: Builds the whole command tree, as every command but the root's help does before it runs.
COMMAND_TREE = "import typer.main, dlbench.cli.app; typer.main.get_command(dlbench.cli.app.app)"


def test_the_command_tree_does_not_import_pydantic_or_sqlalchemy():
    """pydantic (the run specs) and SQLAlchemy (the store's engine) cost ~0.2 s and ~0.3 s against a ~0.3 s
    start-up: only commands that build runs or open a store import them."""
    _, printed = imported_modules(code=COMMAND_TREE + "; import sys; print(*sys.modules)")
    modules = set(printed.split())  # sys.modules: importtime does not see importlib.import_module's own module
    assert "dlbench.cli.io" in modules  # the probe sees the command modules
    assert "pydantic" not in modules and "dlbench.spec" not in modules
    assert "sqlalchemy" not in modules and "dlbench.store._engine" not in modules


def test_the_root_help_answers_from_its_table_and_says_what_typer_would():
    """``dlbench --help`` imports neither typer nor a command module (~0.05 s), yet prints what typer prints
    for the same command tree: the same commands in the same order, with the same summaries and layout."""
    modules, fast = imported_modules("--help")
    assert not any(m.split(".")[0] in ("typer", "click", "rich") for m in modules)
    assert not any(m.startswith("dlbench.cli.") and m not in ("dlbench.cli.entry", "dlbench.cli._commands")
                   for m in modules)
    _, rendered = imported_modules(code="import sys; from dlbench.cli.app import main; main(['--help'])")
    assert fast.splitlines() == [line.rstrip() for line in rendered.splitlines()]
    listed = [line.split()[1] for line in fast.splitlines() if line.startswith("│ ") and line[2].isalpha()]
    _, tree = imported_modules(code=COMMAND_TREE + "; print(*typer.main.get_command(dlbench.cli.app.app).commands)")
    assert listed == tree.split()


def test_dlbench_alone_prints_the_help_and_exits_2():
    out = subprocess.run([sys.executable, "-m", "dlbench"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert "Usage: dlbench [OPTIONS] COMMAND [ARGS]..." in out.stderr and "│ hpo " in out.stderr


@pytest.mark.parametrize("args, said", [
    (["run", "lstmm"], "unknown workload 'lstmm'"),
    (["run", "lstm", "--param", "hidden=8"], "has no parameter 'hidden'"),
    (["run", "lstm", "--parallel", "tp", "--tp", "2"], "--tp 2"),
    (["run", "lstm", "--data", "files:/nonexistent/dlbench-data"], "does not exist"),
    (["scale", "lstmm", "--nproc", "1,2"], "unknown workload 'lstmm'"),
])
def test_a_mistake_is_refused_before_torch_is_imported(args, said, tmp_path):
    """Workload names, parameters, layouts and data sets are checked before torch's import (2-10 s on a
    busy host): the refusal is exit 2 with its sentence, and torch never loaded."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "dlbench", *args, "--db", str(tmp_path / "r.db")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert said in out.stderr and "Traceback" not in out.stderr
    modules = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "dlbench.catalog.registry" in modules  # the probe sees the check's own imports
    assert "torch" not in modules, f"dlbench {' '.join(args)} imported torch before refusing"


def test_cuda_on_a_host_without_a_gpu_driver_is_refused_before_torch(tmp_path):
    from dlbench.api.checks import gpu_driver_present

    if gpu_driver_present():
        pytest.skip("this host has a GPU driver: torch decides whether --device cuda works")
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "dlbench", "run", "lstm", "--device", "cuda",
                          "--db", str(tmp_path / "r.db")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--device cuda was asked" in out.stderr
    assert not any(line.split("|")[-1].strip() == "torch" for line in out.stderr.splitlines()
                   if line.startswith("import time:"))
