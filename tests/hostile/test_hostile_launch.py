"""Hostile input, round two — launch settings: nothing a user types reaches an sbatch script as code.

Every way a value gets to an ``#SBATCH`` line or the job script (flags of ``run``, ``scale``, ``comm``, ``suite``
and ``mlperf run``; a config file's ``launcher:`` key; the site config file; the HPO slurm engine) is tried with
the injections found in the field: a newline and a command, extra options after a space, a ``#`` that ends
sbatch's reading of the line, shell expansions. Each is refused before anything is written or submitted:
exit 2, one sentence naming the flag (see ``hostile_corpus.check``).
"""

from __future__ import annotations

import sys

import pytest
import yaml
from hostile_corpus import TINY, Case, check, params

SLURM = ["--launcher", "slurm", "--dry-run"]
RUN_SLURM = ["run", *TINY, *SLURM]
INJECTIONS = {
    "newline-command": "gpu\ntouch /tmp/dlbench-pwned",
    "extra-options": "gpu --output=/x --uid=0",
    "hash-ends-line": "gpu#--uid=0",
    "command-substitution": "$(touch /tmp/dlbench-pwned)",
    "backticks": "`id`",
    "semicolon": "gpu;id",
    "quote": "gpu\"--uid=0",
    "carriage-return": "gpu\r#SBATCH --uid=0",
    "tab": "gpu\t--uid=0",
}


def launcher_config(**section) -> dict[str, bytes]:
    doc = {"workload": "lstm", "params": {"seq_len": 4, "input_size": 8, "hidden_size": 8}, "batch_size": 4,
           "steps": 2, "warmup": 1, "launcher": {"name": "slurm", **section}}
    return {"c.yaml": yaml.safe_dump(doc).encode()}


def site_config(**section) -> dict[str, bytes]:
    return {"site.yaml": yaml.safe_dump({"launcher": section}).encode()}


def hpo_study() -> dict[str, bytes]:
    doc = {"name": "inj", "objective": {"command": [sys.executable, "-c", "print('FoM: 1')"]}, "trials": 1,
           "engine": "slurm", "workers": 1, "storage": "journal:study.log",
           "space": {"x": {"type": "float", "low": 0, "high": 1}}}
    return {"study.yaml": yaml.safe_dump(doc).encode()}


SITE = {"DLBENCH_SITE_CONFIG": "{tmp}/site.yaml"}

CASES: list[Case] = [
    *(Case(f"partition-{name}", [*RUN_SLURM, "--partition", value], "--partition") for name, value in INJECTIONS.items()),
    *(Case(f"{flag}-newline-command", [*RUN_SLURM, f"--{flag}", "x\ntouch /tmp/dlbench-pwned"], f"--{flag}")
      for flag in ("account", "qos", "constraint", "reservation")),
    *(Case(f"{flag}-extra-options", [*RUN_SLURM, f"--{flag}", "x --uid=0"], f"--{flag}")
      for flag in ("account", "qos", "constraint", "reservation")),
    *(Case(f"{flag}-hash", [*RUN_SLURM, f"--{flag}", "x#y"], f"--{flag}") for flag in ("account", "qos", "reservation")),
    Case("constraint-command-substitution", [*RUN_SLURM, "--constraint", "a100&$(id)"], "--constraint"),
    Case("shifter-image-newline", [*RUN_SLURM, "--container-runtime", "shifter", "--container-image",
                                   "docker:ubuntu\ntouch /tmp/dlbench-pwned"], "container_image"),
    Case("shifter-image-extra-option", [*RUN_SLURM, "--container-runtime", "shifter", "--container-image",
                                        "docker:ubuntu --uid=0"], "container_image"),
    Case("shifter-image-hash", [*RUN_SLURM, "--container-runtime", "shifter", "--container-image", "docker:u#x"],
         "container_image"),
    Case("workdir-newline", [*RUN_SLURM, "--workdir", "/tmp/jobs\ntouch /tmp/dlbench-pwned"], "workdir"),
    Case("workdir-space-option", [*RUN_SLURM, "--workdir", "/tmp/jobs --uid=0"], "workdir"),
    Case("workdir-hash", [*RUN_SLURM, "--workdir", "/tmp/jobs#x"], "workdir"),
    Case("workdir-percent-pattern", [*RUN_SLURM, "--workdir", "/tmp/%u/jobs"], "workdir"),
    Case("workdir-quote", [*RUN_SLURM, "--workdir", "/tmp/jo\"bs"], "workdir"),
    Case("config-launcher-partition", ["run", "--config", "{tmp}/c.yaml", "--dry-run"], "launcher: partition",
         files=launcher_config(partition="gpu\ntouch /tmp/dlbench-pwned")),
    Case("config-launcher-account", ["run", "--config", "{tmp}/c.yaml", "--dry-run"], "launcher: account",
         files=launcher_config(account="m1 --uid=0")),
    Case("config-launcher-workdir", ["run", "--config", "{tmp}/c.yaml", "--dry-run"], "workdir",
         files=launcher_config(workdir="/tmp/x\n#SBATCH --uid=0")),
    Case("site-config-partition", [*RUN_SLURM], "launcher: partition", env=SITE,
         files=site_config(partition="gpu\ntouch /tmp/dlbench-pwned")),
    Case("site-config-qos", [*RUN_SLURM], "launcher: qos", env=SITE, files=site_config(qos="normal --uid=0")),
    Case("site-config-constraint", [*RUN_SLURM], "launcher: constraint", env=SITE,
         files=site_config(constraint="a100\n#SBATCH --uid=0")),
    Case("scale-partition", ["scale", *TINY, "--nproc", "1", *SLURM, "--partition", "gpu\nid"], "--partition"),
    Case("comm-partition", ["comm", "--iters", "1", *SLURM, "--partition", "gpu --uid=0"], "--partition"),
    Case("suite-partition", ["suite", "quick", *SLURM, "--partition", "gpu\nid"], "--partition"),
    Case("mlperf-run-partition", ["mlperf", "run", "gnmt", "--out", "{tmp}/res", *SLURM,
                                  "--partition", "gpu\nid"], "--partition"),
    Case("hpo-slurm-engine-site-partition", ["hpo", "run", "--config", "{tmp}/study.yaml", "--db", "{tmp}/runs.db"],
         "launcher: partition", env=SITE, files=site_config(partition="gpu\ntouch /tmp/dlbench-pwned") | hpo_study()),
    Case("hpo-slurm-engine-site-account", ["hpo", "run", "--config", "{tmp}/study.yaml", "--db", "{tmp}/runs.db"],
         "launcher: account", env=SITE, files=site_config(account="a --uid=0") | hpo_study()),
]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_launch_setting_is_refused_before_anything_is_written(case, seeded_store, tmp_path, monkeypatch, capsys):
    check(case, seeded_store, tmp_path, monkeypatch, capsys)
    assert not list(tmp_path.rglob("*.sbatch"))  # nothing rendered to disk
