"""The hostile-input corpus's machinery: :class:`Case`, file helpers and :func:`check`, the one verdict every
case must meet (exit 2, one ``dlbench: error:`` sentence naming the problem, no traceback, nothing on stdout,
the results store byte for byte as it was).

Each ``tests/hostile/test_hostile_*.py`` holds a ``CASES`` list for one area and one parametrized test that
calls :func:`check`; the ``seeded_store`` fixture (conftest.py) is a store holding one real tiny run.
``{tmp}`` in ``argv`` and ``env`` values is the case's own folder, where ``files`` are written first (bytes, or a
callable taking the folder for things like links). ``in_process=False`` runs ``python -m dlbench`` in a
subprocess instead of ``dlbench.cli.app.main`` (for environment that must be seen at import time, or inputs
that could hurt the test process).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dlbench.cli.app import main


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    fragment: str
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes | Callable[[Path], None]] = field(default_factory=dict)
    in_process: bool = True


def yaml_file(text: str) -> dict[str, bytes]:
    return {"c.yaml": text.encode()}


def nersc(data: str, model: str = "{model_type: lstm}", train: str = "{}") -> dict[str, bytes]:
    return yaml_file(f"data_config: {data}\nmodel_config: {model}\ntrain_config: {train}\n")


def laughs(levels: int = 9) -> str:
    text = 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n"
    return text


def merge_bomb() -> str:
    text = "m0: &m0 {k0: 1, k1: 2, k2: 3, k3: 4}\n"
    for i in range(1, 9):
        text += f"m{i}: &m{i} [" + ", ".join([f"*m{i - 1}"] * 8) + "]\n"
    return text + "workload: lstm\nparams: {x: 1}\n"


def link_to(target: str) -> Callable[[Path], None]:
    return lambda folder: (folder / "link").symlink_to(target)


def foreign_metrics_dir(folder: Path) -> None:
    """The predictable default metrics directory, planted by another user (uid 54321)."""
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root (CI runs as root)")
    planted = folder / "tmp" / f"dlbench-metrics-{os.getuid()}"
    planted.mkdir(parents=True)
    os.chown(planted, 54321, 54321)


def read_only_dir(folder: Path) -> None:
    """A directory this user may not write to (root may write anywhere: skipped as root)."""
    if os.geteuid() == 0:
        pytest.skip("root writes to read-only directories; the file cases cover root")
    (folder / "ro").mkdir()
    (folder / "ro").chmod(0o500)


def no_tensorboard(folder: Path) -> None:
    """A tensorboard package that cannot be imported, first on the path: as if it were not installed."""
    (folder / "shadow" / "tensorboard").mkdir(parents=True)
    (folder / "shadow" / "tensorboard" / "__init__.py").write_text("raise ImportError(\"No module named 'tensorboard'\")\n")


SHADOWED = {"PYTHONPATH": os.pathsep.join(filter(None, ["{tmp}/shadow", os.environ.get("PYTHONPATH")]))}

RUN = ["run", "--config", "{tmp}/c.yaml"]
TINY = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "2", "--warmup", "1"]
NO_TELEMETRY = ["--no-telemetry"]

#: ``python -m dlbench``, for the cases that need a new interpreter. A constant, not written out in :func:`check`:
#: the tiers' hook (tests/conftest.py) would mark every case slow; :func:`params` marks just those cases.
DLBENCH = (sys.executable, "-m", "dlbench")


def params(cases: list[Case]) -> list:
    """``cases`` for ``pytest.mark.parametrize("case", …)``: each named by its id; those that start a new
    interpreter (``in_process=False``) marked ``slow`` (the test tiers, tests/conftest.py)."""
    return [pytest.param(c, id=c.id, marks=[] if c.in_process else [pytest.mark.slow]) for c in cases]


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def expand(text: str, tmp: Path, run_id: str) -> str:
    return text.replace("{tmp}", str(tmp)).replace("{run_id}", run_id)


def check(case: Case, seeded_store: tuple[Path, str], tmp_path: Path, monkeypatch, capsys) -> None:
    """Run ``case`` against a copy of the seeded store and assert the verdict."""
    seed, run_id = seeded_store
    store = tmp_path / "runs.db"
    shutil.copy(seed, store)
    for name, content in case.files.items():
        content(tmp_path) if callable(content) else (tmp_path / name).write_bytes(content)
    before = {p: digest(p) for p in (store, seed)}
    argv = [expand(a, tmp_path, run_id) for a in case.argv]
    env = {"DLBENCH_DB": str(store), "DLBENCH_METRICS_DIR": str(tmp_path / "metrics")}
    env |= {k: expand(v, tmp_path, run_id) for k, v in case.env.items()}
    if case.in_process:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(tmp_path)
        code = main(argv)
        out, err = capsys.readouterr()
    else:
        done = subprocess.run([*DLBENCH, *argv], env=os.environ | env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        code, out, err = done.returncode, done.stdout, done.stderr
    assert code == 2, f"exit {code}; stderr: {err[-2000:]}"
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlbench: error: "), err[-2000:]
    assert expand(case.fragment, tmp_path, run_id) in lines[0]
    assert len(lines[0]) < 600  # one sentence, not a dump of the input
    assert out == ""
    assert {p: digest(p) for p in (store, seed)} == before
