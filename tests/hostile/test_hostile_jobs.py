"""Hostile input, round two — jobs and sizes: a jobs registry file of the wrong shape, job sizes no machine has,
limits beyond what a scheduler holds, count lists with holes, and launcher variables that cannot rendezvous.

Each is one sentence and exit 2 before anything is submitted, written or waited for (``hostile_corpus.check``).
"""

from __future__ import annotations

import copy
import json
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from hostile_corpus import TINY, Case, check, params

from dlbench.telemetry.jobs import JOB_LABELS, JobAttributor, gpu_job_values, gpu_jobs, job_labels, parse_cgroup

JOBS = {"DLBENCH_JOBS_DIR": "{tmp}/jobs"}
RECORD = {"schema_version": 1, "id": "abcdef012345", "created_at": "2026-11-30T10:00:00+00:00", "status": "aborted",
          "error": None, "spec": {"workload": "lstm"}, "env": {}, "result": None, "telemetry": None}
ENTRY = {"launcher": "slurm", "job_id": "5", "workdir": "/nonexistent/dlbench-job", "submitted_at": "2026-11-30T10:00:00+00:00",
         "array": None, "state": "queued", "reason": "", "collected": None,
         "run": {"kind": "train", "job": {"workload": "lstm"}, "record_spec": {"workload": "lstm"}, "device_type": "cpu",
                 "world_size": 1, "nproc": 1, "nnodes": 1, "threads": 1, "timeout_s": 60, "launcher": "slurm",
                 "tags": {}, "settings": None},
         "records": [RECORD]}


def entry(**changes) -> dict[str, bytes]:
    """A registry file: ENTRY with top-level ``changes`` (``run_KEY`` changes inside ``run``; ``...`` removes)."""
    doc = copy.deepcopy(ENTRY)
    for key, value in changes.items():
        target, name = (doc["run"], key.removeprefix("run_")) if key.startswith("run_") else (doc, key)
        if value is ...:
            del target[name]
        else:
            target[name] = value
    return raw(json.dumps(doc))


def raw(text: str) -> dict[str, bytes]:
    return {"jobs": lambda folder: (folder / "jobs").mkdir(), "jobs/slurm-5.json": text.encode()}


JOB_COMMANDS = {"list": ["jobs", "--no-live"], "logs": ["jobs", "logs", "5"], "cancel": ["jobs", "cancel", "5"],
                "collect": ["jobs", "collect", "5"]}
#: (case id, registry file, what the sentence names)
REGISTRY_FILES = [
    ("list-document", raw("[1, 2, 3]"), "a JSON object is expected, not list"),
    ("job-id-only", raw('{"job_id": "5"}'), "launcher must be text"),
    ("unknown-kind", entry(run_kind="evil"), "run.kind 'evil' is not one of"),
]

CASES: list[Case] = [
    *(Case(f"registry-{name}-{command}", argv, fragment, env=JOBS, files=files)
      for name, files, fragment in REGISTRY_FILES for command, argv in JOB_COMMANDS.items()),
    Case("registry-records-not-list", JOB_COMMANDS["list"], "records must be a list", env=JOBS, files=entry(records={})),
    Case("registry-records-empty", JOB_COMMANDS["logs"], "records must be a list", env=JOBS, files=entry(records=[])),
    Case("registry-launcher-number", JOB_COMMANDS["logs"], "launcher must be text", env=JOBS, files=entry(launcher=5)),
    Case("registry-job-id-number", JOB_COMMANDS["list"], "job_id must be text", env=JOBS, files=entry(job_id=5)),
    Case("registry-state-number", JOB_COMMANDS["list"], "state must be text", env=JOBS, files=entry(state=3)),
    Case("registry-run-job-list", JOB_COMMANDS["collect"], "run.job, run.record_spec and run.tags", env=JOBS,
         files=entry(run_job=[1])),
    Case("registry-run-not-object", JOB_COMMANDS["collect"], "run.kind None", env=JOBS, files=entry(run="train")),
    Case("registry-unknown-launcher", JOB_COMMANDS["logs"], "unknown launcher 'lsf'", env=JOBS,
         files=entry(launcher="lsf")),
    Case("registry-local-launcher", JOB_COMMANDS["logs"], "does not submit jobs", env=JOBS,
         files=entry(launcher="local")),
    Case("registry-bad-job-spec", JOB_COMMANDS["collect"], "cannot be read back", env=JOBS,
         files=entry(run_job={"workload": "lstm", "steps": "many"})),
    Case("registry-job-spec-missing-field", JOB_COMMANDS["collect"], "cannot be read back", env=JOBS,
         files=entry(run_device_type=...)),
]

SLURM = ["run", *TINY, "--launcher", "slurm", "--dry-run"]
K8S = ["run", *TINY, "--launcher", "k8s", "--image", "x", "--dry-run"]


def launcher_config(**section) -> dict[str, bytes]:
    doc = {"workload": "lstm", "params": {"seq_len": 4, "input_size": 8, "hidden_size": 8}, "batch_size": 4,
           "steps": 2, "warmup": 1, "launcher": {"name": "slurm", **section}}
    return {"c.yaml": yaml.safe_dump(doc).encode()}


CONFIG_DRY = ["run", "--config", "{tmp}/c.yaml", "--dry-run"]
NO_MASTER = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29511"}

CASES += [
    Case("slurm-nodes-huge", [*SLURM, "--nodes", "100000000000"], "--nodes 100000000000"),
    Case("k8s-nodes-huge", [*K8S, "--nodes", "100000000000"], "--nodes 100000000000"),
    Case("slurm-nodes-negative", [*SLURM, "--nodes", "-1"], "--nodes -1"),
    Case("slurm-gpus-per-node-huge", [*SLURM, "--gpus-per-node", "99999999999"], "--gpus-per-node 99999999999"),
    Case("nproc-per-node-zero", [*SLURM, "--nproc-per-node", "0"], "--nproc-per-node"),
    Case("nproc-per-node-negative", [*SLURM, "--nproc-per-node", "-1"], "--nproc-per-node"),
    Case("nproc-per-node-huge", [*SLURM, "--nproc-per-node", "100000"], "--nproc-per-node"),
    Case("signal-lead-exponent", [*SLURM, "--signal-lead", "1e23"], "--signal-lead"),
    Case("signal-lead-huge", [*SLURM, "--signal-lead", "100000000000000000000000"], "--signal-lead"),
    Case("signal-lead-negative", [*SLURM, "--signal-lead", "-1"], "--signal-lead -1"),
    Case("slurm-time-huge", [*SLURM, "--time", "99999999999999999999"], "must be at most 366 days"),
    Case("k8s-time-huge", [*K8S, "--time", "99999999999999999999"], "must be at most 366 days"),
    Case("slurm-time-two-years", [*SLURM, "--time", "730-00:00:00"], "must be at most 366 days"),
    Case("slurm-time-zero", [*SLURM, "--time", "0"], "--time '0'"),
    Case("config-nodes-huge", CONFIG_DRY, "launcher: nodes", files=launcher_config(nodes=100000000000)),
    Case("config-signal-lead-float", CONFIG_DRY, "launcher: signal_lead_s", files=launcher_config(signal_lead_s=1e23)),
    Case("config-time-huge", CONFIG_DRY, "launcher: time", files=launcher_config(time="99999999999999999999")),
    Case("config-gpus-per-node-huge", CONFIG_DRY, "launcher: gpus_per_node", files=launcher_config(gpus_per_node=10**12)),
    Case("scale-nproc-hole", ["scale", *TINY, "--nproc", "1,,2"], "--nproc '1,,2'"),
    Case("scale-nproc-leading-comma", ["scale", *TINY, "--nproc", ",1"], "--nproc ',1'"),
    Case("scale-nproc-trailing-comma", ["scale", *TINY, "--nproc", "1,"], "--nproc '1,'"),
    Case("scale-nproc-zero", ["scale", *TINY, "--nproc", "0,1"], "--nproc '0,1'"),
    Case("scale-nproc-huge", ["scale", *TINY, "--nproc", "1,99999999999"], "from 1 to 1,024"),
    Case("scale-nproc-empty", ["scale", *TINY, "--nproc", ""], "--nproc ''"),
    Case("scale-nodes-hole", ["scale", *TINY, "--launcher", "slurm", "--dry-run", "--nodes", "1,,2"], "--nodes '1,,2'"),
    Case("scale-nodes-huge", ["scale", *TINY, "--launcher", "slurm", "--dry-run", "--nodes", "1,100000000000"],
         "from 1 to 65,536"),
    Case("run-nproc-huge", ["run", *TINY, "--nproc", "99999999999"], "nproc=99999999999"),
    Case("comm-nproc-huge", ["comm", "--iters", "1", "--nproc", "99999999999"], "nproc"),
    Case("rank-without-master-addr", ["run", *TINY], "MASTER_ADDR is not", env=NO_MASTER, in_process=False),
    Case("rank-0-without-master-addr", ["run", *TINY], "MASTER_ADDR is not",
         env=NO_MASTER | {"RANK": "0"}, in_process=False),
]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_job_or_size_is_one_sentence_before_anything_is_submitted(case, seeded_store, tmp_path, monkeypatch,
                                                                          capsys):
    check(case, seeded_store, tmp_path, monkeypatch, capsys)
    assert not list(tmp_path.rglob("*.sbatch"))


# --- Attribution: who ran a job comes from the kernel (cgroup, uid), never from a process's own environment ---

FORGED = {"SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_JOB_USER": "root", "SLURM_JOB_PARTITION": "vip"}
LIAR_UID = 65534 if os.getuid() == 0 else os.getuid()  # nobody where the tests may setuid, else this user


def test_a_process_claiming_a_job_and_root_is_billed_to_its_owner_and_marked_claimed():
    """A real process (as uid 65534 when the tests run as root) whose environment says job 4242 of user root."""
    setuid = (lambda: os.setuid(LIAR_UID)) if os.getuid() == 0 else None
    child = subprocess.Popen([shutil.which("sleep"), "60"], env=FORGED, preexec_fn=setuid, cwd="/")
    try:
        deadline = time.monotonic() + 10
        while b"SLURM_JOB_ID" not in _environ(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # until it has exec'd
        reading = {"index": 0, "uuid": "GPU-0", "processes": [{"pid": child.pid, "used_memory_bytes": 1}]}
        JobAttributor().annotate([reading])
        labels = reading["processes"][0]["job"]
    finally:
        child.kill()
        child.wait()
    assert labels["hpc_user"] == _name(LIAR_UID)  # never SLURM_JOB_USER
    # no Slurm cgroup on this machine: the job is only the process's word, and the series say so
    assert (labels["hpc_job"], labels["hpc_job_source"], labels["hpc_partition"]) == ("4242", "environment", "vip")
    values = dict(zip(JOB_LABELS, gpu_job_values(gpu_jobs(reading))))
    assert (values["hpc_job"], values["hpc_user"], values["hpc_job_source"]) == ("4242", labels["hpc_user"], "environment")


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def test_a_non_dumpable_process_is_its_real_uids_not_roots(tmp_path):
    """A process that makes itself non-dumpable has ``/proc/<pid>`` owned by root; its status still says who
    started it (a /proc copy: the dir here is root's, the status uid 65534's)."""
    proc = tmp_path / "321"
    proc.mkdir()
    (proc / "stat").write_text("321 (python) S " + " ".join(["0"] * 18) + " 12345 0 0\n")
    (proc / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_77/step_0\n")
    (proc / "status").write_text("Name:\tpython\nUid:\t65534\t0\t0\t0\n")  # real uid first: a setuid binary's euid 0
    (proc / "environ").write_bytes(b"SLURM_JOB_USER=root\0SLURM_JOB_ID=4242\0")
    labels = JobAttributor(tmp_path).labels(321)
    assert (labels["hpc_job"], labels["hpc_user"], labels["hpc_job_source"]) == ("77", _name(65534), "cgroup")


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@pytest.mark.parametrize("text, expected", [
    ("12:memory:/slurm/uid_1000/job_4242/step_0/task_0\n", {"slurm_job": "4242", "slurm_uid": 1000}),
    ("4:cpu:/slurm_node7/uid_1001/job_9/step_batch\n", {"slurm_job": "9", "slurm_uid": 1001}),
    ("0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n", {"slurm_job": "77"}),
    ("0::/system.slice/node7_slurmstepd.scope/job_78/step_0\n", {"slurm_job": "78"}),
    # a user's delegated subtree, where `mkdir job_4242` and `uid_0` are the user's to make: no job
    ("0::/user.slice/user-65534.slice/user@65534.service/app.slice/slurm/uid_0/job_4242/x\n", {}),
    ("0::/user.slice/user-65534.slice/user@65534.service/slurmstepd.scope/job_4242\n", {}),
    ("0::/user.slice/user-65534.slice/session-3.scope/job_4242\n", {}),
    ("0::/user.slice/user-65534.slice/user@65534.service/kubepods/pod1f2e3d4c-5b6a-4789-8abc-def012345678/"
     + "a" * 64 + "\n", {}),
    ("0::/job_4242\n", {}),
    ("0::/\n", {}),
], ids=["v1", "v1-multi-slurmd", "v2", "v2-named-scope", "delegated-v1-shape", "delegated-v2-shape", "session",
        "delegated-kubepods", "root-level-job", "root"])
def test_the_cgroup_parser_names_only_jobs_slurm_made(text, expected):
    assert parse_cgroup(text) == expected


def test_the_cgroup_job_and_uid_win_over_the_environment():
    labels = job_labels({"slurm_job": "77", "slurm_uid": 0}, {"SLURM_JOB_ID": "4242", "SLURM_JOB_PARTITION": "vip"}, 65534)
    assert (labels["hpc_job"], labels["hpc_user"], labels["hpc_partition"], labels["hpc_job_source"]) == (
        "77", "root", "", "cgroup")  # the partition went with the claimed job, not job 77
    assert job_labels({"slurm_job": "77"}, {}, None)["hpc_user"] == ""  # no uid known: no user, never a claimed one
