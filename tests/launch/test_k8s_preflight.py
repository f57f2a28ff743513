"""``--preflight`` on Kubernetes, through the API-server double (its pods are local processes; it runs a pod's init
containers in order before its container, as the kubelet does): the init container checks the node and writes its
verdict in the pod's emptyDir; the rank container prints it on the pod's log, and the ``dlbench`` that collects the
job writes it into the job's directory, where a Slurm job's nodes write theirs, and reads it from there into
``env.preflight`` the same way.

The double's pods share this machine's host name unless ``own_hostnames`` gives each its pod's name in a UTS
namespace of its own (as a cluster's pods have; root only): the test of two pods judged against each other does.
Floors any working CPU passes, and none meets, make a node healthy or degraded without judging this machine's
speed; between two pods, a core a spinner holds, where one pod's probe runs at the lowest priority (about 20x)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dlbench.cli.app import main
from dlbench.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kube")]

TINY = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "2",
        "--warmup", "1", "--threads", "1", "--no-telemetry"]


def test_the_init_containers_verdict_is_read_back_into_the_record(kube, tmp_path, capsys, left_running):
    any_cpu = tmp_path / "any.yaml"
    any_cpu.write_text("default: {cpu: 1.0, host_memory_bandwidth: 1.0}\n")
    db = str(tmp_path / "runs.db")
    code = main(["run", *TINY, "--launcher", "k8s", "--image", "dlbench:test", "--preflight", "gate",
                 "--preflight-expect", str(any_cpu), "--db", db, "--json"])
    out, err = capsys.readouterr()
    assert code in (0, None), err[-3000:]
    record = json.loads(out)
    assert record["status"] == "ok" and record["spec"]["launcher"] == "k8s"
    pre = record["env"]["preflight"]
    assert pre["mode"] == "gate" and pre["verdict"] == "healthy", pre
    (node,) = pre["nodes"].values()
    assert node["verdict"] == "healthy" and node["probes"]["cpu"]["value"] > 1.0 == node["probes"]["cpu"]["low"]
    assert node["probes"]["host_memory_bandwidth"]["unit"] == "bytes/s"
    assert record["spec"]["tags"]["preflight"] == "healthy"
    assert open_store(db).get(record["id"])["env"]["preflight"] == pre  # stored as shown
    (pod,) = kube.pods.values()
    assert (pod.root / "scratch" / "preflight" / f"{node['host']}.json").is_file()  # the emptyDir the init container wrote
    assert left_running() == []


def test_a_degraded_node_fails_its_pod_before_the_ranks_and_the_record_names_the_probe(kube, tmp_path, capsys,
                                                                                   left_running):
    """``gate``: the init container's exit 1 fails the pod before its rank container starts (nothing prints the
    verdict from the emptyDir then): the verdict comes from the init container's own log."""
    unmeetable = tmp_path / "unmeetable.yaml"
    unmeetable.write_text("default: {cpu: 1.0e+15}\n")
    db = str(tmp_path / "runs.db")
    code = main(["run", *TINY, "--launcher", "k8s", "--image", "dlbench:test", "--preflight", "gate",
                 "--preflight-expect", str(unmeetable), "--db", db, "--json"])
    out, err = capsys.readouterr()
    assert code == 1, err[-3000:]
    record = json.loads(out)
    assert record["status"] == "failed" and record["result"] is None
    (host,) = record["env"]["preflight"]["nodes"]
    assert record["error"].startswith(f"preflight refused the job before its workload started: {host}: DEGRADED: cpu: ")
    assert "below 1.000e+15" in record["error"]
    assert record["env"]["preflight"]["verdict"] == "degraded" and record["spec"]["tags"]["preflight"] == "degraded"
    (pod,) = kube.pods.values()
    assert pod.phase() == "Failed" and (pod.root / "log").read_text() == ""  # the rank container never ran
    assert left_running() == []


#: Pod 1's Pythons: on one core (its node has one, a cpuset), and the node check's core loop at the lowest
#: priority there, beside the spinner the test pins to that core: a core a noisy neighbour takes. (In a session of
#: its own, whose autogroup is at nice 19: with the kernel's autogroups, nice counts only within a session.)
CROWDED = """\
import os
os.sched_setaffinity(0, {{{core}}})
with open("/proc/self/cmdline", "rb") as cmdline:
    if b"sched_setaffinity(0, {{int(sys.argv[1])}})" in cmdline.read():  # the node check's core loop
        os.setsid()
        if os.path.exists("/proc/self/autogroup"):
            with open("/proc/self/autogroup", "w") as group:
                group.write("19")
        os.nice(19)
"""


def crowded_run(kube, tmp_path, capsys, mode: str) -> tuple[int | None, str, str, list]:
    """A 2-pod run (a PyTorchJob: Master, then Worker) with ``--preflight MODE``, no history and no expectations
    file, the Worker's node check measuring a crowded core (:data:`CROWDED`): (exit code, stdout, stderr, the pods
    in node order)."""
    core = max(os.sched_getaffinity(0))
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    (crowded / "sitecustomize.py").write_text(CROWDED.format(core=core))
    kube.own_hostnames = True
    kube.pod_env[1] = {"PYTHONPATH": os.pathsep.join([str(crowded), os.environ["PYTHONPATH"]])}
    spinner = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        code = main(["run", *TINY, "--launcher", "k8s", "--image", "dlbench:test", "--nodes", "2",
                     "--preflight", mode, "--db", str(tmp_path / "runs.db"), "--json"])
    finally:
        spinner.kill()
        spinner.wait()
    out, err = capsys.readouterr()
    return code, out, err, sorted(kube.pods.values(), key=lambda p: p.name)


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="pods with host names of their own need a UTS namespace (root)")


@root_only
def test_two_pods_judge_each_other_and_gate_refuses_the_crowded_node(kube, tmp_path, capsys, left_running):
    """No history, no expectations file: each pod alone is 'no reference'. Before the ranks start, the pods exchange
    their verdicts through the rendezvous and judge them all against each other; pod 1's core, crowded by a spinner
    that takes all but a sliver of it from its probe, is degraded against pod 0 (below half of its figure, measured
    in the same minute on the same CPU model), so gate stops both pods before torchrun and the record says why."""
    code, out, err, pods = crowded_run(kube, tmp_path, capsys, "gate")
    assert code == 1, err[-3000:]
    record = json.loads(out)
    pre = record["env"]["preflight"]
    fine, slow = (p.name for p in pods)
    assert sorted(pre["nodes"]) == [fine, slow], pre  # each pod its own node
    assert pre["verdict"] == "degraded" and record["status"] == "failed" and record["result"] is None
    cpu = pre["nodes"][slow]["probes"]["cpu"]
    assert cpu["verdict"] == "degraded" and cpu["value"] < cpu["low"] == 0.5 * pre["nodes"][fine]["probes"]["cpu"]["value"]
    assert pre["nodes"][fine]["probes"]["cpu"]["verdict"] == "healthy"  # judged by its peer, not 'no reference'
    assert record["error"].startswith(f"preflight refused the job before its workload started: {slow}: DEGRADED: cpu: ")
    assert f"the job's peers: 0.5 x {fine}'s" in record["error"]
    for pod in pods:  # the ranks never started: no report on either log
        assert pod.phase() == "Failed" and "DLBENCH-RANK-REPORT" not in (pod.root / "log").read_text()
    assert left_running() == []


@root_only
def test_under_warn_the_crowded_node_is_recorded_and_torchrun_takes_the_rendezvous_port_after_the_exchange(
        kube, tmp_path, capsys, left_running):
    """The exchange's store (node rank 0, on the rendezvous port) is gone before torchrun needs that port: the two
    ranks form one process group and the run is recorded ok, with the crowded node degraded against its peer."""
    code, out, err, pods = crowded_run(kube, tmp_path, capsys, "warn")
    assert code in (0, None), err[-3000:]
    record = json.loads(out)
    assert record["status"] == "ok" and record["result"]["world_size"] == 2
    pre = record["env"]["preflight"]
    fine, slow = (p.name for p in pods)
    assert pre["mode"] == "warn" and pre["verdict"] == "degraded" and record["spec"]["tags"]["preflight"] == "degraded"
    assert pre["nodes"][slow]["probes"]["cpu"]["verdict"] == "degraded"
    assert pre["nodes"][fine]["probes"]["cpu"]["verdict"] == "healthy"
    assert left_running() == []
