"""The rendezvous contract of the k8s manifests, run for real: the pods of a 2-node manifest (each
shape) start as local processes with the command and environment Kubernetes and its controllers would
give them — the training operator's MASTER_ADDR/PET_* for a PyTorchJob, the Job controller's
JOB_COMPLETION_INDEX for an Indexed Job — their cluster DNS names pointed at 127.0.0.1 (see
``kube_pods``). They must form one 2-rank process group (CPU, gloo, one rank per pod) and print
rank reports that ``parse_reports`` reads as an ok run of 2 ranks.
"""

from __future__ import annotations

import pytest
import yaml
from kube_pods import cluster_names, free_port, k8s_run, pods_of, start_pod

from dlbench.launch.batch import parse_reports
from dlbench.launch.k8s import KubeScheduler
from dlbench.launch.k8s.manifests import INDEXED_JOB, PORT, PYTORCHJOB
from dlbench.telemetry.session import combine_nodes

WAIT_S = 300  # a bound, not a speed target: four Pythons importing torch on a busy 2-core machine


@pytest.mark.slow
@pytest.mark.parametrize("shape", [PYTORCHJOB, INDEXED_JOB])
def test_two_pods_form_one_run_and_report_it_in_their_logs(shape, tmp_path, left_running):
    run = k8s_run({"steps": 3, "telemetry": True, "telemetry_interval_s": 0.2}, nodes=2, operator=shape)
    plan = KubeScheduler().render(run, tmp_path / "job")
    config_map, *_, job = [d for d in yaml.safe_load_all(plan.files["manifests.yaml"]) if d]
    maps = {config_map["metadata"]["name"]: config_map["data"]}
    ports = {str(PORT): str(free_port())}
    procs = [start_pod(template, tmp_path / pod, maps, env, hosts=cluster_names(job), ports=ports)
             for pod, template, env in pods_of(job)]
    try:
        codes = [proc.wait(timeout=WAIT_S) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    logs = [(tmp_path / pod / "log").read_text() for pod, _, _ in pods_of(job)]
    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    reports = parse_reports("\n".join(logs))
    assert sorted(reports) == [0, 1]
    assert all(r["status"] == "ok" for r in reports.values())
    result = reports[0]["result"]
    assert result["steps"] == 3 and result["samples_per_s"] > 0
    assert result["world_size"] == 2 and len(result["per_rank"]) == 2  # one process group, not two runs
    # each pod is a node: its local rank 0 sampled it, and the record combines both nodes
    nodes = [reports[rank]["telemetry"] for rank in (0, 1)]
    assert all(n["summary"]["samples"] >= 2 and n["series"][-1]["mark"] == "end" for n in nodes)
    combined = combine_nodes(nodes)
    assert combined["nodes_sampled"] == 2 and [n["node"] for n in combined["per_node"]] == [n["node"] for n in nodes]
    assert combined["samples"] == max(n["summary"]["samples"] for n in nodes)
    assert left_running() == []


def test_a_pod_without_a_rank_environment_reports_nothing(tmp_path):
    """A rank started without a launcher's environment refuses, and its log holds no report."""
    run = k8s_run(nodes=1, operator=INDEXED_JOB)
    plan = KubeScheduler().render(run, tmp_path / "job")
    config_map, _, job = [d for d in yaml.safe_load_all(plan.files["manifests.yaml"]) if d]
    (pod, template, env) = pods_of(job)[0]
    template["spec"]["containers"][0]["command"] = ["python", "-m", "dlbench.api.worker", "/etc/dlbench/job.json",
                                                    "/tmp/dlbench-ranks"]
    proc = start_pod(template, tmp_path / pod, {config_map["metadata"]["name"]: config_map["data"]}, env)
    assert proc.wait(timeout=120) == 2
    log = (tmp_path / pod / "log").read_text()
    assert "not started by a launcher" in log and parse_reports(log) == {}
