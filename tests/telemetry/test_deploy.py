"""The deployment examples in deploy/: they parse, the DaemonSet is non-root and unprivileged on GPU
nodes only, and every metric the Grafana dashboard queries is one the exporter exposes."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dlbench.telemetry.exporter import exported_metric_names

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC = re.compile(r"\b(DCGM_FI_[A-Z0-9_]+|dlbench_[a-z0-9_]+)\b")


def manifests():
    return list(yaml.safe_load_all((DEPLOY / "kubernetes" / "dlbench-monitor-daemonset.yaml").read_text()))


def test_daemonset_is_unprivileged_non_root_and_on_gpu_nodes_only():
    kinds = {doc["kind"]: doc for doc in manifests()}
    assert set(kinds) == {"Namespace", "DaemonSet", "Service"}
    pod = kinds["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod.get("hostNetwork") is not True and pod.get("hostPID") is not True
    assert not any("hostPath" in v for v in pod.get("volumes", []))
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
    assert "add" not in sc["capabilities"]
    assert container["resources"]["limits"]["memory"] and container["resources"]["requests"]["cpu"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])  # watches GPUs without taking one
    args = container["args"]
    assert args[:2] == ["dlbench", "monitor"] and args[args.index("--host") + 1] == "0.0.0.0"
    port = int(args[args.index("--port") + 1])
    assert container["ports"][0]["containerPort"] == port
    annotations = kinds["DaemonSet"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and int(annotations["prometheus.io/port"]) == port
    assert kinds["Service"]["spec"]["ports"][0]["port"] == port
    assert kinds["Service"]["spec"]["selector"] == kinds["DaemonSet"]["spec"]["selector"]["matchLabels"]


def test_dashboard_queries_only_exported_metrics():
    dashboard = json.loads((DEPLOY / "grafana" / "dlbench-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    used = {name for expr in exprs for name in METRIC.findall(expr)}
    assert used <= exported_metric_names(), used - exported_metric_names()
    # the panels the issue asks for: per-GPU utilisation, memory, temperature, power; throughput, step time
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
            "dlbench_training_samples_per_second", "dlbench_training_step_time_seconds"} <= used
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_prometheus_config_parses_and_scrapes_the_exporter_port():
    path = DEPLOY / "prometheus" / "prometheus.yml"
    config = yaml.safe_load(path.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["dlbench-monitor"]["static_configs"][0]["targets"] == ["localhost:9400"]
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian's prometheus package) not installed; YAML checked only")
    check = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
