"""Hostile input corpus: every case runs dlbench's real CLI and must end the same way.

Whatever the input (a config file of random bytes, a YAML alias bomb, a variable pointing at
``os:system``, a parameter of ``nan``, an output path inside a file), dlbench answers with exit code
2, one line on stderr that starts ``dlbench: error:`` and names the problem (``fragment``), no
traceback, nothing on stdout, and the results store byte for byte as it was.

Adding a case is one line in :data:`CASES`: ``Case(id, argv, fragment, env=..., files=...)``. ``{tmp}``
in ``argv`` and ``env`` values is the case's own folder, where ``files`` are written first (bytes, or a
callable taking the folder for things like links). ``in_process=False`` runs
``python -m dlbench`` in a subprocess instead of ``dlbench.cli.app.main`` (for environment that must
be seen at import time, or inputs that could hurt the test process). The store at ``{tmp}/runs.db`` is
a copy of one made by a real tiny run (with its telemetry series).
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
from dlbench.store import RunFilter, open_store


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

CASES: list[Case] = [
    # -- config files: bytes that are not YAML text -------------------------------------------------
    Case("config-random-bytes", RUN, "is not UTF-8 text", files={"c.yaml": bytes(range(128, 256)) * 3}),
    Case("config-utf16", RUN, "is not UTF-8 text", files={"c.yaml": "workload: lstm\n".encode("utf-16")}),
    Case("config-bad-utf8-midway", RUN, "is not UTF-8 text (byte 0xc3 at offset 10)",
         files={"c.yaml": b"workload: \xc3\x28lstm\n"}),
    Case("config-nul-bytes", RUN, "is not valid YAML", files={"c.yaml": b"workload: ls\x00tm\n"}),
    Case("config-dev-zero", ["run", "--config", "/dev/zero"], "is larger than 4 MiB"),
    Case("config-oversized", RUN, "is larger than 4 MiB", files={"c.yaml": b"# padding\n" * 500_000}),
    Case("config-directory", ["run", "--config", "{tmp}"], "Is a directory"),
    Case("config-missing", ["run", "--config", "{tmp}/none.yaml"], "No such file or directory"),
    Case("config-dangling-link", ["run", "--config", "{tmp}/link"], "cannot read config file",
         files={"link": link_to("/nonexistent/target.yaml")}),
    Case("config-empty", RUN, "got NoneType", files=yaml_file("")),
    # -- config files: YAML built to hurt -----------------------------------------------------------
    Case("config-deep-flow-lists", RUN, "nests more than 64 levels", files=yaml_file("[" * 50_000 + "]" * 50_000)),
    Case("config-deep-flow-maps", RUN, "nests more than 64 levels", files=yaml_file("{a: " * 20_000 + "1" + "}" * 20_000)),
    Case("config-deep-block", RUN, "nests more than 64 levels",
         files=yaml_file("".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v\n")),
    Case("config-billion-laughs", RUN, "aliases expand to more than 100,000", files=yaml_file(laughs())),
    Case("config-alias-bomb-of-maps", RUN, "aliases expand to more than 100,000", files=yaml_file(merge_bomb())),
    Case("config-python-tag", RUN, "is not valid YAML",
         files=yaml_file('workload: !!python/object/apply:os.system ["echo owned"]\n')),
    Case("config-unclosed-quote", RUN, "is not valid YAML at line 2", files=yaml_file('workload: "lstm\n')),
    Case("config-tabs", RUN, "is not valid YAML", files=yaml_file("workload: lstm\n\tsteps: 2\n")),
    # -- config files: the wrong shapes and types ---------------------------------------------------
    Case("config-top-level-list", RUN, "got list", files=yaml_file("- workload: lstm\n")),
    Case("config-top-level-scalar", RUN, "got str", files=yaml_file("lstm\n")),
    Case("config-int-key", RUN, "key 1 is not a name", files=yaml_file("1: 2\nworkload: lstm\n")),
    Case("config-unknown-key", RUN, "unknown key 'colour'", files=yaml_file("workload: lstm\ncolour: red\n")),
    Case("config-steps-word", RUN, "steps='abc'", files=yaml_file("workload: lstm\nsteps: abc\n")),
    Case("config-steps-negative", RUN, "steps=-1", files=yaml_file("workload: lstm\nsteps: -1\n")),
    Case("config-steps-infinite", RUN, "steps=inf", files=yaml_file("workload: lstm\nsteps: .inf\n")),
    Case("config-batch-list", RUN, "batch_size=[1, 2]", files=yaml_file("workload: lstm\nbatch_size: [1, 2]\n")),
    Case("config-params-list", RUN, "params=[1, 2]", files=yaml_file("workload: lstm\nparams: [1, 2]\n")),
    Case("config-param-nested", RUN, "must be a number, string or boolean",
         files=yaml_file("workload: lstm\nparams: {seq_len: [1]}\n")),
    Case("config-param-word", RUN, "must be an integer", files=yaml_file("workload: lstm\nparams: {seq_len: abc}\n")),
    Case("config-workload-number", RUN, "workload=123", files=yaml_file("workload: 123\n")),
    Case("config-workload-megabyte", RUN, "1,000,000 characters", files=yaml_file("workload: " + "x" * 1_000_000 + "\n")),
    Case("config-device-word", RUN, "device='tpu'", files=yaml_file("workload: lstm\ndevice: tpu\n")),
    Case("suite-runs-not-list", RUN, "'runs' must be a non-empty list", files=yaml_file("runs: lstm\n")),
    Case("suite-runs-empty", RUN, "'runs' must be a non-empty list", files=yaml_file("runs: []\n")),
    Case("suite-defaults-list", RUN, "'defaults' must be a mapping", files=yaml_file("defaults: [1]\nruns: [{workload: lstm}]\n")),
    Case("suite-unknown-key", RUN, "unknown suite key 'colour'", files=yaml_file("colour: red\nruns: [{workload: lstm}]\n")),
    Case("suite-run-int-key", RUN, "key 7 is not a name", files=yaml_file("runs: [{workload: lstm, 7: x}]\n")),
    # -- NERSC pytorch-benchmarks configs with wrongly typed fields ---------------------------------
    Case("nersc-batch-size-word", RUN, "data_config.batch_size='abc' must be an integer",
         files=nersc("{batch_size: abc, n_train: 10}")),
    Case("nersc-data-config-list", RUN, "data_config must be a mapping", files=nersc("[1, 2]")),
    Case("nersc-model-config-scalar", RUN, "model_config must be a mapping", files=nersc("{}", model="lstm")),
    Case("nersc-learning-rate-word", RUN, "model_config.learning_rate='fast' must be a number",
         files=nersc("{batch_size: 4}", model="{model_type: lstm, learning_rate: fast}")),
    Case("nersc-epochs-fraction", RUN, "train_config.n_epochs=2.5 must be an integer",
         files=nersc("{batch_size: 4, n_train: 8}", train="{n_epochs: 2.5}")),
    Case("nersc-n-train-bool", RUN, "data_config.n_train=True must be an integer",
         files=nersc("{batch_size: 4, n_train: yes}")),
    Case("nersc-unknown-model", RUN, "has no dlbench workload", files=nersc("{}", model="{model_type: gpt5}")),
    Case("nersc-shape-word", RUN, "input_shape must be a list of positive integers", files=nersc("{input_shape: abc}")),
    Case("nersc-shape-empty", RUN, "input_shape must be a list of positive integers",
         files=nersc("{input_shape: []}", model="{model_type: transformer}")),
    Case("nersc-shape-not-square", RUN, "must be [channels, size, size]",
         files=nersc("{input_shape: [3, 10, 20]}", model="{model_type: resnet50}")),
    # -- DLBENCH_WORKLOADS that is not a workload class ---------------------------------------------
    Case("workloads-os-system", ["list"], "not a subclass of dlbench.catalog._base.Workload",
         env={"DLBENCH_WORKLOADS": "x=os:system"}),
    Case("workloads-three-parts", ["list"], "must look like name=module:Class", env={"DLBENCH_WORKLOADS": "x=a:b:c"}),
    Case("workloads-no-module", ["list"], "must look like name=module:Class", env={"DLBENCH_WORKLOADS": "x=:Cls"}),
    Case("workloads-no-target", ["list"], "must look like name=module:Class", env={"DLBENCH_WORKLOADS": "x="}),
    Case("workloads-no-name", ["list"], "must look like name=module:Class", env={"DLBENCH_WORKLOADS": "=json:JSONDecoder"}),
    Case("workloads-shell-text", ["list"], "must look like name=module:Class",
         env={"DLBENCH_WORKLOADS": "x=os;rm -rf /:system"}),
    Case("workloads-other-class", ["list"], "not a subclass", env={"DLBENCH_WORKLOADS": "x=json:JSONDecoder"}),
    Case("workloads-missing-module", ["list"], "cannot be imported (ModuleNotFoundError",
         env={"DLBENCH_WORKLOADS": "x=no_such_module_14:Cls"}),
    Case("workloads-missing-class", ["list"], "cannot be imported (AttributeError",
         env={"DLBENCH_WORKLOADS": "x=dlbench.catalog.vision:Nope"}),
    Case("workloads-on-run", ["run", "x", "--steps", "1"], "not a subclass", env={"DLBENCH_WORKLOADS": "x=os:system"}),
    # -- --param junk -------------------------------------------------------------------------------
    Case("param-word", ["run", "lstm", "-p", "seq_len=abc"], "must be an integer"),
    Case("param-huge-exponent", ["run", "lstm", "-p", "seq_len=1e400"], "must be an integer"),
    Case("param-nan", ["run", "lstm", "-p", "seq_len=nan"], "must be an integer"),
    Case("param-empty-value", ["run", "lstm", "-p", "seq_len="], "must be an integer"),
    Case("param-no-name", ["run", "lstm", "-p", "=5"], "must look like NAME=VALUE"),
    Case("param-no-equals", ["run", "lstm", "-p", "seq_len"], "must look like NAME=VALUE"),
    Case("param-unknown", ["run", "lstm", "-p", "colour=red"], "has no parameter 'colour'"),
    Case("param-negative", ["run", "lstm", "-p", "seq_len=-5"], "must be at least 1"),
    Case("param-fraction", ["run", "lstm", "-p", "seq_len=2.5"], "must be an integer"),
    Case("param-bool-word", ["run", "inception_v3", "-p", "aux_logits=maybe"], "must be true or false"),
    Case("param-choice", ["run", "dcgan", "-p", "image_size=48"], "must be one of 32, 64, 128"),
    # -- bad values of dlbench's own options ----------------------------------------------------------
    Case("monitor-port-range", ["monitor", "--port", "99999"], "is not a TCP port"),
    Case("monitor-interval-zero", ["monitor", "--interval", "0"], "must be more than 0 seconds"),
    Case("run-device-word", ["run", "lstm", "--device", "tpu"], "device='tpu'"),
    Case("run-precision-word", ["run", "lstm", "--precision", "fp4"], "precision='fp4'"),
    Case("suite-unknown", ["suite", "enormous"], "unknown suite 'enormous'"),
    Case("workload-unknown", ["run", "resnet5"], "did you mean 'resnet50'"),
    # -- the metrics directory in the temporary directory, planted by another user -------------------
    Case("metrics-dir-foreign", ["monitor", "--port", "0"], "belongs to another user (uid 54321)",
         env={"TMPDIR": "{tmp}/tmp", "DLBENCH_METRICS_DIR": ""}, files={"planted": foreign_metrics_dir},
         in_process=False),
    Case("metrics-dir-link", ["monitor", "--port", "0"], "is not a directory",
         env={"TMPDIR": "{tmp}", "DLBENCH_METRICS_DIR": ""},
         files={"planted": lambda folder: (folder / f"dlbench-metrics-{os.getuid()}").symlink_to("/etc")},
         in_process=False),
    # -- plots written where they cannot be ---------------------------------------------------------
    Case("plot-telemetry-out-is-dir", ["plot", "telemetry", "{run_id}", "--out", "{tmp}"], "is a directory"),
    Case("plot-telemetry-out-under-file", ["plot", "telemetry", "{run_id}", "--out", "{tmp}/runs.db/x.png"],
         "is a file, not a folder"),
    Case("plot-telemetry-out-dev-null", ["plot", "telemetry", "{run_id}", "--out", "/dev/null/x.png"],
         "is a file, not a folder"),
    Case("plot-telemetry-out-proc", ["plot", "telemetry", "{run_id}", "--out", "/proc/dlbench/x.png"],
         "cannot write the plot"),
    Case("plot-telemetry-format", ["plot", "telemetry", "{run_id}", "--out", "{tmp}/x.xyz"], "cannot write '.xyz'"),
    Case("plot-scaling-out-under-file", ["plot", "scaling", "workload=lstm", "--out", "{tmp}/runs.db/s.png"],
         "is a file, not a folder"),
    Case("plot-scaling-format", ["plot", "scaling", "workload=lstm", "--out", "{tmp}/s.docx"], "cannot write '.docx'"),
    Case("plot-telemetry-unknown-run", ["plot", "telemetry", "ffffffffff"], "no run"),
    # -- read commands pointed at stores of the wrong kind --------------------------------------------
    Case("store-is-directory", ["results", "--db", "{tmp}"], "{tmp}"),
    Case("store-is-text", ["results", "--db", "{tmp}/c.yaml"], "c.yaml", files=yaml_file("workload: lstm\n")),
    Case("store-is-random", ["show", "abc", "--db", "{tmp}/junk.db"], "junk.db", files={"junk.db": os.urandom(4096)}),
    Case("store-missing", ["results", "--db", "{tmp}/none/runs.db"], "none/runs.db"),
    Case("store-compare-directory", ["compare", "a=1", "b=2", "--db", "{tmp}"], "{tmp}"),
    Case("store-plot-random", ["plot", "telemetry", "abc", "--db", "{tmp}/junk.db"], "junk.db",
         files={"junk.db": os.urandom(4096)}),
    Case("store-plot-scaling-text", ["plot", "scaling", "workload=lstm", "--db", "{tmp}/c.yaml"], "c.yaml",
         files=yaml_file("workload: lstm\n")),
    # -- MLPerf commands on things that are not MLPerf logs ------------------------------------------
    Case("mlperf-compare-random", ["mlperf", "compare", "{tmp}/r.txt", "--reference", "dgx1-v0.6"],
         "holds no MLPerf result log", files={"r.txt": os.urandom(2048)}),
    Case("mlperf-compare-yaml", ["mlperf", "compare", "{tmp}/c.yaml", "--reference", "dgx1-v0.6"],
         "holds no MLPerf result log", files=yaml_file("workload: lstm\n")),
    Case("mlperf-compare-dev-zero", ["mlperf", "compare", "/dev/zero", "--reference", "dgx1-v0.6"],
         "neither a results folder nor a result file"),
    Case("mlperf-compare-bomb-references", ["mlperf", "compare", "{tmp}", "--reference", "x", "--references",
                                            "{tmp}/c.yaml"], "aliases expand", files=yaml_file(laughs())),
    Case("mlperf-score-missing", ["mlperf", "score", "{tmp}/nothing"], "neither a results folder nor a result file"),
    Case("mlperf-score-empty-dir", ["mlperf", "score", "{tmp}/empty"], "no result_*.txt files",
         files={"empty": lambda folder: (folder / "empty").mkdir()}),
    # -- the run pipeline: launcher variables and rendezvous endpoints
    Case("rank-not-a-number", ["run", *TINY], "RANK='abc'", env={"RANK": "abc", "WORLD_SIZE": "2"}, in_process=False),
    Case("world-size-zero", ["run", *TINY], "WORLD_SIZE='0'", env={"RANK": "0", "WORLD_SIZE": "0"}, in_process=False),
    Case("rank-beyond-world", ["run", *TINY], "RANK='5'", env={"RANK": "5", "WORLD_SIZE": "2"}, in_process=False),
    Case("master-port-out-of-range", ["run", *TINY], "MASTER_PORT='70000'",
         env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "70000"}, in_process=False),
    Case("slurm-procid-garbage", ["run", *TINY], "SLURM_PROCID='x'",
         env={"SLURM_PROCID": "x", "SLURM_STEP_NUM_TASKS": "2"}, in_process=False),
    Case("rdzv-port-out-of-range", ["run", *TINY, "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "node0:99999"],
         "port from 1 to 65535"),
    Case("rdzv-no-port", ["run", *TINY, "--nnodes", "2", "--rdzv-endpoint", "node0"], "HOST:PORT"),
    Case("comm-port-out-of-range", ["comm", "--nproc", "1", "--nnodes", "2", "--node-rank", "1",
                                    "--rdzv-endpoint", "n0:0"], "port from 1 to 65535"),
    # -- Kubernetes: settings the API would reject, and no cluster to talk to (nothing submitted)
    Case("k8s-malformed-toleration", ["run", *TINY, "--launcher", "k8s", "--image", "x", "--toleration",
                                      "nvidia.com/gpu:Sometimes", "--dry-run"], "must look like KEY[=VALUE][:EFFECT]"),
    Case("k8s-toleration-bad-key", ["run", *TINY, "--launcher", "k8s", "--image", "x", "--toleration", "a b=c"],
         "--toleration 'a b=c' must look like"),
    Case("k8s-bad-node-selector", ["run", *TINY, "--launcher", "k8s", "--image", "x", "--node-selector",
                                   "nvidia.com/gpu.product=H100 80GB", "--dry-run"], "is not a valid Kubernetes label"),
    Case("k8s-node-selector-no-equals", ["run", *TINY, "--launcher", "k8s", "--image", "x", "--node-selector",
                                         "nvidia.com/gpu.product"], "must look like NAME=VALUE"),
    Case("k8s-no-kubeconfig", ["run", *TINY, "--launcher", "k8s", "--image", "x"], "no usable kubeconfig at {tmp}/none",
         env={"KUBECONFIG": "{tmp}/none", "HOME": "{tmp}", "DLBENCH_JOBS_DIR": "{tmp}/jobs"}),
    Case("k8s-garbage-kubeconfig", ["run", *TINY, "--launcher", "k8s", "--image", "x"], "no usable kubeconfig",
         env={"KUBECONFIG": "{tmp}/kc", "HOME": "{tmp}", "DLBENCH_JOBS_DIR": "{tmp}/jobs"},
         files={"kc": b"clusters: [[[\n\x00"}),
    Case("steps-not-a-number", ["run", *TINY, "--steps", "abc"], "Invalid value for '--steps'"),
    Case("unknown-option", ["run", *TINY, "--nosuch"], "No such option"),
    Case("unknown-command", ["benchmark"], "No such command"),
    Case("store-import-garbage", ["store", "import", "{tmp}/junk.json"], "not a dlbench run file",
         files={"junk.json": b"[1, 2"}),
    Case("store-import-missing", ["store", "import", "{tmp}/nothing.json"], "not a dlbench run file"),
    # batch launchers: refused before anything is submitted (the unknown partition needs a real Slurm:
    # tests/launch/test_slurm.py)
    Case("slurm-without-sbatch", ["run", *TINY, "--launcher", "slurm", "--workdir", "{tmp}/jobs"],
         "sbatch is not on PATH", env={"PATH": "{tmp}", "DLBENCH_JOBS_DIR": "{tmp}/registry"}),
    Case("slurm-nodes-0", ["run", *TINY, "--launcher", "slurm", "--nodes", "0"], "--nodes 0: input should be greater than 0"),
    Case("slurm-bad-time", ["run", *TINY, "--launcher", "slurm", "--time", "ten minutes"], "--time 'ten minutes': must be a wall-clock limit"),
    Case("slurm-image-without-runtime", ["run", *TINY, "--launcher", "slurm", "--container-image", "x.sif"],
         "--container-image on Slurm needs --container-runtime"),
    Case("launcher-unknown", ["run", *TINY, "--launcher", "lsf"], "unknown launcher 'lsf'"),
    # dlbench advise: refused before the first run
    Case("advise-unknown-workload", ["advise", "resnet5", "--device", "cpu", "--db", "{tmp}/runs.db"], "unknown workload 'resnet5'"),
    Case("advise-zero-budget", ["advise", "lstm", "--budget", "0", "--db", "{tmp}/runs.db"], "--budget 0 must be a positive number"),
    Case("advise-negative-budget", ["advise", "lstm", "--budget", "-5", "--db", "{tmp}/runs.db"], "must be a positive number of seconds"),
    Case("advise-nan-budget", ["advise", "lstm", "--budget", "nan", "--db", "{tmp}/runs.db"], "must be a positive number of seconds"),
    Case("advise-unknown-knob", ["advise", "lstm", "--knobs", "batch_size,thread", "--db", "{tmp}/runs.db"], "unknown knob 'thread'"),
    Case("advise-bad-param", ["advise", "lstm", "--param", "hidden_size=big", "--db", "{tmp}/runs.db"], "hidden_size"),
    Case("advise-bad-sampler", ["advise", "lstm", "--sampler", "annealing", "--db", "{tmp}/runs.db"], "unknown sampler"),
    Case("profile-dir-is-a-file", ["run", *TINY, "--profile", "{tmp}/f"], "is a file", files={"f": b"x"}),
    Case("profile-dir-inside-a-file", ["run", *TINY, "--profile", "{tmp}/f/traces"], "cannot be created",
         files={"f": b"x"}),
    Case("profile-dir-read-only", ["run", *TINY, "--profile", "{tmp}/ro/traces"], "is not writable",
         files={"ro": read_only_dir}),
    Case("tensorboard-not-installed", ["run", *TINY, "--tensorboard", "{tmp}/tb"], "needs the tensorboard package",
         env=SHADOWED, files={"shadow": no_tensorboard}, in_process=False),
    Case("tensorboard-export-not-installed", ["tensorboard", "export", "workload=lstm", "--out", "{tmp}/tb"],
         "needs the tensorboard package", env=SHADOWED, files={"shadow": no_tensorboard}, in_process=False),
    Case("tensorboard-dir-is-a-file", ["run", *TINY, "--tensorboard", "{tmp}/f"], "--tensorboard", files={"f": b"x"}),
    Case("tensorboard-export-out-in-a-file", ["tensorboard", "export", "{run_id}", "--out", "{tmp}/f/tb"],
         "cannot be created", files={"f": b"x"}),
    Case("tensorboard-export-no-match", ["tensorboard", "export", "workload=nosuch", "--out", "{tmp}/tb"],
         "matches no stored run"),
    Case("scale-tensorboard-dir-is-a-file", ["scale", *TINY, "--nproc", "1", "--tensorboard", "{tmp}/f"], "is a file",
         files={"f": b"x"}),
    Case("profile-steps-zero", ["run", *TINY, "--profile", "{tmp}/p", "--profile-steps", "0"], "profile_steps=0"),
]


@pytest.fixture(scope="session")
def seeded_store(tmp_path_factory) -> tuple[Path, str]:
    """A store holding one real tiny run with its telemetry series (copied for every case); run in this
    process (torch is loaded once for the session, not in a new interpreter)."""
    folder = tmp_path_factory.mktemp("seed")
    db = folder / "runs.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DLBENCH_METRICS_DIR", str(folder / "metrics"))
        assert main(["run", *TINY, "--telemetry-interval", "0.05", "--db", str(db)]) == 0
    store = open_store(str(db))
    try:
        (record,) = store.records(RunFilter())
    finally:
        store.close()
    return db, record["id"]


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def expand(text: str, tmp: Path, run_id: str) -> str:
    return text.replace("{tmp}", str(tmp)).replace("{run_id}", run_id)


def prepare(case: Case, seeded_store: tuple[Path, str], tmp_path: Path) -> tuple[list[str], dict[str, str], dict]:
    """The case's folder with its files and a copy of the seeded store: (argv, environment, digests before)."""
    seed, run_id = seeded_store
    store = tmp_path / "runs.db"
    shutil.copy(seed, store)
    for name, content in case.files.items():
        content(tmp_path) if callable(content) else (tmp_path / name).write_bytes(content)
    argv = [expand(a, tmp_path, run_id) for a in case.argv]
    env = {"DLBENCH_DB": str(store), "DLBENCH_METRICS_DIR": str(tmp_path / "metrics")}
    env |= {k: expand(v, tmp_path, run_id) for k, v in case.env.items()}
    return argv, env, {p: digest(p) for p in (store, seed)}


def check_refused(case: Case, code: int, out: str, err: str, seeded_store, tmp_path: Path, before: dict) -> None:
    """Exit 2, one sentence naming the problem, nothing on stdout, both stores byte for byte as they were."""
    assert code == 2, f"exit {code}; stderr: {err[-2000:]}"
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlbench: error: "), err[-2000:]
    assert expand(case.fragment, tmp_path, seeded_store[1]) in lines[0]
    assert len(lines[0]) < 600  # one sentence, not a dump of the input
    assert out == ""
    assert {p: digest(p) for p in before} == before


IN_PROCESS = [c for c in CASES if c.in_process]
IN_SUBPROCESS = [c for c in CASES if not c.in_process]


@pytest.mark.parametrize("case", IN_PROCESS, ids=[c.id for c in IN_PROCESS])
def test_hostile_input_is_one_sentence_exit_2_and_changes_nothing(case, seeded_store, tmp_path, monkeypatch, capsys):
    argv, env, before = prepare(case, seeded_store, tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    check_refused(case, code, out, err, seeded_store, tmp_path, before)


@pytest.mark.parametrize("case", IN_SUBPROCESS, ids=[c.id for c in IN_SUBPROCESS])
def test_hostile_input_seen_at_start_up_is_one_sentence_exit_2(case, seeded_store, tmp_path):
    argv, env, before = prepare(case, seeded_store, tmp_path)
    done = subprocess.run([sys.executable, "-m", "dlbench", *argv], env=os.environ | env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    check_refused(case, done.returncode, done.stdout, done.stderr, seeded_store, tmp_path, before)
