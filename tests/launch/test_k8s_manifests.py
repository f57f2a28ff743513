"""The k8s launcher's manifests, checked offline: no cluster can run here.

* every object against the Kubernetes OpenAPI schemas of kubernetes-validate (v1.30, strict: an
  unknown field fails, as ``kubectl apply --validate=strict`` would), the PyTorchJob's pod templates
  too (as a ``PodTemplate``);
* the PyTorchJob against the Kubeflow training operator's own CRD schema (bundled in
  ``dlbench/data/kubeflow``), with unknown fields refused the way the API server prunes them;
* every pod template against the Pod Security Standards' "restricted" profile and OpenShift's
  ``restricted-v2`` SCC (the rules are written out below, with their sources).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kube_double import crd
from kube_pods import k8s_run

from dlbench.errors import UsageError
from dlbench.launch.k8s import KubeScheduler
from dlbench.launch.k8s.manifests import INDEXED_JOB, PYTORCHJOB, manifests, parse_toleration

K8S_VERSION = "1.30.0"
GPU_SETTINGS = {"gpus_per_node": 4, "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
VARIANTS = {
    "cpu-1node": ({"nproc": 2}, {}),
    "cpu-2nodes": ({}, {"nodes": 2}),
    "gpu-1node": ({"device": "auto"}, GPU_SETTINGS),
    "gpu-4nodes-all-settings": ({"device": "auto"}, GPU_SETTINGS | {
        "nodes": 4, "tolerations": ("dedicated=ml:NoExecute", "example.com/spot", "nvidia.com/gpu:NoSchedule"),
        "priority_class": "batch-high", "store_secret": "dlbench-store", "time": "1-02:00:00", "namespace": "ml-bench"}),
}


def render(shape: str, variant: str, tmp_path: Path) -> list[dict[str, Any]]:
    spec, settings = VARIANTS[variant]
    run = k8s_run(spec, operator=shape, **settings)
    plan = KubeScheduler().render(run, tmp_path)
    return [doc for doc in yaml.safe_load_all(plan.files["manifests.yaml"]) if doc]


def pod_templates(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    templates = []
    for obj in objects:
        if obj["kind"] == "Job":
            templates.append(obj["spec"]["template"])
        elif obj["kind"] == "PyTorchJob":
            templates += [r["template"] for r in obj["spec"]["pytorchReplicaSpecs"].values()]
    return templates


def crd_schema() -> dict[str, Any]:
    (version,) = [v for v in crd()["spec"]["versions"] if v["name"] == "v1"]  # parsed once (kube_double.crd)
    return version["schema"]["openAPIV3Schema"]


def unknown_fields(doc: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the CRD's structural schema does not declare (the API server would drop them silently)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(doc, dict):
        if "properties" in schema:
            found = [f"{path}.{k}" for k in doc if k not in schema["properties"]]
            for key, value in doc.items():
                if key in schema["properties"]:
                    found += unknown_fields(value, schema["properties"][key], f"{path}.{key}")
            return found
        if isinstance(schema.get("additionalProperties"), dict):
            return [f for k, v in doc.items() for f in unknown_fields(v, schema["additionalProperties"], f"{path}.{k}")]
    if isinstance(doc, list) and "items" in schema:
        return [f for i, v in enumerate(doc) for f in unknown_fields(v, schema["items"], f"{path}[{i}]")]
    return []


def validate_crd(obj: dict[str, Any]) -> None:
    schema = crd_schema()
    jsonschema.Draft7Validator(schema).validate(obj)  # OpenAPI v3 schemas of CRDs are JSON Schema draft-7-like
    assert unknown_fields(obj, schema) == []


def validate_kubernetes(obj: dict[str, Any]) -> None:
    if obj["kind"] == "PyTorchJob":
        for template in pod_templates([obj]):
            wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
            kubernetes_validate.validate(wrapped, K8S_VERSION, strict=True)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("shape", [PYTORCHJOB, INDEXED_JOB])
def test_every_manifest_passes_the_kubernetes_schemas(shape, variant, tmp_path):
    objects = render(shape, variant, tmp_path)
    assert [o["kind"] for o in objects] == (["ConfigMap", "PyTorchJob"] if shape == PYTORCHJOB
                                            else ["ConfigMap", "Service", "Job"])
    for obj in objects:
        validate_kubernetes(obj)
        if obj["kind"] == "PyTorchJob":
            validate_crd(obj)


def test_the_validators_catch_a_broken_manifest(tmp_path):
    job = render(INDEXED_JOB, "cpu-2nodes", tmp_path)[-1]
    broken = copy.deepcopy(job)
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_kubernetes(broken)
    pytorchjob = render(PYTORCHJOB, "cpu-2nodes", tmp_path)[-1]
    bad_type = copy.deepcopy(pytorchjob)
    bad_type["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(bad_type)
    unknown = copy.deepcopy(pytorchjob)
    unknown["spec"]["runPolicy"]["deadlineSeconds"] = 5
    assert unknown_fields(unknown, crd_schema()) == [".spec.runPolicy.deadlineSeconds"]


# -- Pod Security "restricted" and OpenShift restricted-v2 -----------------------------------------
# Rules of the "restricted" profile (and the "baseline" rules it includes), from
# https://kubernetes.io/docs/concepts/security/pod-security-standards/ : volumes only of the listed
# types; allowPrivilegeEscalation false; runAsNonRoot true (pod or every container), runAsUser not 0;
# seccompProfile RuntimeDefault or Localhost; capabilities drop ALL and add nothing but NET_BIND_SERVICE;
# no hostNetwork/hostPID/hostIPC, no privileged container, no hostPort. OpenShift's restricted-v2 SCC
# (https://docs.openshift.com/container-platform/4.16/authentication/managing-security-context-constraints.html)
# further assigns the UID from the namespace's range (MustRunAsRange): a pod must not fix runAsUser,
# runAsGroup or fsGroup to values outside it, so dlbench fixes none.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def restricted_violations(template: dict[str, Any]) -> list[str]:
    spec, problems = template["spec"], []
    pod_sc = spec.get("securityContext", {})
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problems.append(f"volume {volume['name']} of type {kinds - RESTRICTED_VOLUMES}")
    problems += [f"{key} set" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    problems += [f"pod fixes {key}" for key in ("runAsUser", "runAsGroup", "fsGroup") if key in pod_sc]
    for ctr in spec.get("containers", []) + spec.get("initContainers", []):
        sc = ctr.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{ctr['name']}: allowPrivilegeEscalation is not false")
        if sc.get("privileged"):
            problems.append(f"{ctr['name']}: privileged")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            problems.append(f"{ctr['name']}: runAsNonRoot is not true")
        if "runAsUser" in sc or "runAsGroup" in sc:
            problems.append(f"{ctr['name']}: fixes its UID/GID")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{ctr['name']}: seccompProfile {seccomp}")
        caps = sc.get("capabilities", {})
        if caps.get("drop") != ["ALL"] or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{ctr['name']}: capabilities {caps}")
        if any("hostPort" in port for port in ctr.get("ports", [])):
            problems.append(f"{ctr['name']}: hostPort")
    return problems


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("shape", [PYTORCHJOB, INDEXED_JOB])
def test_every_pod_passes_pod_security_restricted(shape, variant, tmp_path):
    templates = pod_templates(render(shape, variant, tmp_path))
    assert templates
    for template in templates:
        assert restricted_violations(template) == []
        env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
        scratch = {m["mountPath"] for m in template["spec"]["containers"][0]["volumeMounts"]}
        assert env["HOME"] in scratch  # an arbitrary UID has no home; the image's root may be read-only


def test_the_restricted_check_catches_a_root_pod(tmp_path):
    (template,) = pod_templates(render(INDEXED_JOB, "cpu-1node", tmp_path))
    bad = copy.deepcopy(template)
    bad["spec"]["containers"][0]["securityContext"] = {"privileged": True, "runAsUser": 0}
    bad["spec"]["securityContext"] = {}
    bad["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    problems = restricted_violations(bad)
    assert len(problems) >= 5 and any("hostPath" in p for p in problems)


# -- what the manifests say ------------------------------------------------------------------------


def test_gpu_pods_ask_for_gpus_tolerate_the_gpu_taint_and_select_the_product(tmp_path):
    objects = render(PYTORCHJOB, "gpu-4nodes-all-settings", tmp_path)
    job = objects[-1]
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert job["spec"]["nprocPerNode"] == "4"
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == 26 * 3600
    for template in pod_templates(objects):
        spec = template["spec"]
        (ctr,) = spec["containers"]
        assert ctr["name"] == "pytorch" and ctr["ports"][0]["name"] == "pytorchjob-port"  # what the operator reads
        assert ctr["resources"]["limits"] == {"nvidia.com/gpu": "4"}
        assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        assert spec["priorityClassName"] == "batch-high"
        assert spec["tolerations"] == [  # the user's nvidia.com/gpu toleration replaces the default one
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
            {"key": "example.com/spot", "operator": "Exists"},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        shm = {v["name"]: v for v in spec["volumes"]}["dshm"]
        assert shm["emptyDir"]["medium"] == "Memory"
        assert {"name": "dshm", "mountPath": "/dev/shm"} in ctr["volumeMounts"]
        assert ctr["command"][ctr["command"].index("--nproc-per-node") + 1] == "4"


def test_cpu_pods_ask_for_no_gpu(tmp_path):
    for template in pod_templates(render(INDEXED_JOB, "cpu-2nodes", tmp_path)):
        assert "resources" not in template["spec"]["containers"][0]
        assert "tolerations" not in template["spec"]


def test_the_indexed_job_meets_at_pod_zero_of_its_headless_service(tmp_path):
    config_map, service, job = render(INDEXED_JOB, "gpu-4nodes-all-settings", tmp_path)
    name = job["metadata"]["name"]
    assert service["metadata"]["name"] == name and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    assert job["spec"]["activeDeadlineSeconds"] == 26 * 3600
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == name
    (ctr,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["PET_MASTER_ADDR"] == f"{name}-0.{name}"
    assert ctr["command"][ctr["command"].index("--node-rank") + 1] == "$(JOB_COMPLETION_INDEX)"
    assert pod["volumes"][0]["configMap"]["name"] == config_map["metadata"]["name"]


def test_the_store_url_comes_only_from_the_secret(tmp_path):
    for shape in (PYTORCHJOB, INDEXED_JOB):
        for template in pod_templates(render(shape, "gpu-4nodes-all-settings", tmp_path)):
            (db,) = [e for e in template["spec"]["containers"][0]["env"] if e["name"] == "DLBENCH_DB"]
            assert db == {"name": "DLBENCH_DB", "valueFrom": {"secretKeyRef": {"name": "dlbench-store", "key": "url"}}}
        for template in pod_templates(render(shape, "cpu-1node", tmp_path)):
            assert "DLBENCH_DB" not in {e["name"] for e in template["spec"]["containers"][0]["env"]}


def test_objects_carry_the_dlbench_labels_and_namespace(tmp_path):
    objects = render(INDEXED_JOB, "gpu-4nodes-all-settings", tmp_path)
    name = objects[-1]["metadata"]["name"]
    for obj in objects + pod_templates(objects):
        assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "dlbench", "dlbench.io/run": name}
    assert {o["metadata"]["namespace"] for o in objects} == {"ml-bench"}


def test_render_is_pure_and_the_dry_run_command_applies_the_file(tmp_path):
    run = k8s_run(nodes=2)
    first, second = KubeScheduler().render(run, tmp_path), KubeScheduler().render(run, tmp_path)
    assert first == second and list(tmp_path.iterdir()) == []
    assert first.argv == ("kubectl", "apply", "-n", "default", "-f", str(tmp_path / "manifests.yaml"))
    assert first.ranks_here == (0, 1)
    assert KubeScheduler().render(run, tmp_path / "other").files != first.files  # another job, another name


@pytest.mark.parametrize(("text", "toleration"), [
    ("nvidia.com/gpu", {"key": "nvidia.com/gpu", "operator": "Exists"}),
    ("nvidia.com/gpu:NoSchedule", {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
    ("team=ml", {"key": "team", "operator": "Equal", "value": "ml"}),
    ("team=:PreferNoSchedule", {"key": "team", "operator": "Equal", "value": "", "effect": "PreferNoSchedule"}),
])
def test_tolerations_parse(text, toleration):
    assert parse_toleration(text) == toleration


@pytest.mark.parametrize("text", ["", "=ml", "team=ml:Sometimes", "bad key", "a=b=c", "-x:NoSchedule", "k=v" + "x" * 70])
def test_a_malformed_toleration_is_one_sentence(text):
    with pytest.raises(UsageError, match=r"must look like KEY\[=VALUE\]\[:EFFECT\]"):
        parse_toleration(text)


@pytest.mark.parametrize(("settings", "fragment"), [
    ({"node_selector": {"nvidia.com/gpu product": "H100"}}, "is not a valid Kubernetes label"),
    ({"node_selector": {"gpu": "H100 80GB"}}, "is not a valid Kubernetes label"),
    ({"tolerations": ("gpu:Never",)}, "--toleration 'gpu:Never' must look like"),
    ({"namespace": "ML_Bench"}, "--namespace 'ML_Bench' is not a valid Kubernetes name"),
    ({"image": None}, "needs the pod image"),
])
def test_bad_settings_are_one_sentence(settings, fragment, tmp_path):
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(").replace("[", r"\[")):
        run = k8s_run(**settings)
        KubeScheduler().render(run, tmp_path)


def test_every_shape_lists_the_same_objects_in_creation_order(tmp_path):
    run = k8s_run(nodes=2)
    for shape in (PYTORCHJOB, INDEXED_JOB):
        objects = manifests(run, run.settings, shape, "dlbench-x")
        assert objects[0]["kind"] == "ConfigMap"  # the pods mount it: it exists before them


def test_the_operators_init_container_may_run_as_its_image_says(tmp_path):
    """The training operator (v1.9, initcontainer.go) adds ``init-pytorch`` (alpine, root, no
    securityContext) to Worker pods; a pod-wide runAsNonRoot would make the kubelet refuse it wherever
    UIDs are not assigned (everywhere but OpenShift), so only dlbench's own container carries it."""
    job = render(PYTORCHJOB, "cpu-2nodes", tmp_path)[-1]
    worker = copy.deepcopy(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
    worker["spec"]["initContainers"] = [{"name": "init-pytorch", "image": "alpine:3.10",
                                         "command": ["sh", "-c", "nslookup master"]}]
    assert "runAsNonRoot" not in worker["spec"]["securityContext"]
    assert worker["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("shape", [PYTORCHJOB, INDEXED_JOB])
def test_an_mlperf_run_renders_valid_restricted_manifests(shape, tmp_path):
    """``dlbench mlperf run --launcher k8s``: the same objects, the ranks reading an MLPerf job document."""
    from dlbench.api.mlperf import resolve_launched
    from dlbench.mlperf.runner import RunOptions
    from dlbench.spec import LaunchSettings

    settings = LaunchSettings(image="ghcr.io/example/dlbench:0.1", operator=shape, nodes=2, **GPU_SETTINGS)
    (run,) = resolve_launched("gnmt", tmp_path / "out", RunOptions(max_epochs=3), "k8s", settings)
    objects = [d for d in yaml.safe_load_all(KubeScheduler().render(run, tmp_path / "job").files["manifests.yaml"]) if d]
    for obj in objects:
        validate_kubernetes(obj)
        if obj["kind"] == "PyTorchJob":
            validate_crd(obj)
    assert all(restricted_violations(t) == [] for t in pod_templates(objects))
    document = yaml.safe_load(next(iter(objects[0]["data"].values())))
    assert document["kind"] == "mlperf" and document["batch"] is True
    assert (document["spec"]["task"], document["spec"]["max_epochs"], document["spec"]["device"]) == ("gnmt", 3, "cuda")


@pytest.mark.parametrize("shape", [PYTORCHJOB, INDEXED_JOB])
def test_preflight_is_an_init_container_on_every_pod_with_the_ranks_gpus(shape, tmp_path, monkeypatch):
    expect = tmp_path / "expect.yaml"
    expect.write_text("default: {cpu: 2.0e+7}\n")
    monkeypatch.setenv("DLBENCH_PREFLIGHT", "gate")
    monkeypatch.setenv("DLBENCH_PREFLIGHT_EXPECT", str(expect))
    objects = render(shape, "gpu-4nodes-all-settings", tmp_path)
    assert objects[0]["data"]["preflight-expect.yaml"] == expect.read_text()  # in the job's ConfigMap
    for obj in objects:
        validate_kubernetes(obj)
        if obj["kind"] == "PyTorchJob":
            validate_crd(obj)
    for template in pod_templates(objects):  # Master and Worker alike: every node
        (init,) = template["spec"]["initContainers"]
        (rank,) = template["spec"]["containers"]
        assert init["command"] == ["python", "-m", "dlbench", "node", "preflight", "--mode", "gate", "--out",
                                   "/tmp/preflight", "--expect", "/etc/dlbench/preflight-expect.yaml"]
        assert init["image"] == rank["image"] and init["resources"] == rank["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
        assert init["securityContext"] == rank["securityContext"]
        assert not any(e["name"] == "DLBENCH_DB" for e in init["env"])  # the store's secret stays with the ranks
        # the node's name, not the pod's (new with every job): the node's preflights are one history
        assert {"name": "DLBENCH_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in init["env"]
        # the verdict goes from the shared emptyDir to the rank container's log, where the collecting dlbench reads it,
        # once the 4 pods judged each other's (bounded by the run's timeout)
        assert rank["command"][:11] == ["python", "-m", "dlbench.launch.k8s.pod", "--preflight", "/tmp/preflight",
                                        "--nodes", "4", "--peer-wait", "300", "--ranks", "/tmp/dlbench-ranks"]
        assert {"name": "scratch", "mountPath": "/tmp"} in init["volumeMounts"] and \
            {"name": "scratch", "mountPath": "/tmp"} in rank["volumeMounts"]
    one = pod_templates(render(shape, "gpu-1node", tmp_path))  # one pod: no peers to judge it by, nothing exchanged
    assert all(t["spec"]["containers"][0]["command"][3:7] == ["--preflight", "/tmp/preflight", "--ranks",
                                                              "/tmp/dlbench-ranks"] for t in one)
    monkeypatch.delenv("DLBENCH_PREFLIGHT")
    plain = pod_templates(render(shape, "gpu-1node", tmp_path))
    assert not any("initContainers" in t["spec"] for t in plain)
    assert not any("--preflight" in t["spec"]["containers"][0]["command"] for t in plain)


def test_without_an_expectations_file_the_pods_read_the_nodes_history_shipped_in_the_configmap(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_PREFLIGHT", "gate")
    monkeypatch.delenv("DLBENCH_PREFLIGHT_EXPECT", raising=False)
    spec, settings = VARIANTS["gpu-4nodes-all-settings"]
    scheduler = KubeScheduler()
    plan = scheduler.render(k8s_run(spec, operator=INDEXED_JOB, **settings), tmp_path)
    objects = [doc for doc in yaml.safe_load_all(plan.files["manifests.yaml"]) if doc]
    assert objects[0]["data"]["preflight-history.json"] == "{}" and "preflight-expect.yaml" not in objects[0]["data"]
    for template in pod_templates(objects):
        assert template["spec"]["initContainers"][0]["command"][-2:] == ["--history", "/etc/dlbench/preflight-history.json"]
    history = '{"node07": {"cpu": [3100000.0, 3200000.0]}}'
    shipped = [doc for doc in yaml.safe_load_all(scheduler.with_preflight_history(plan, lambda: history).files["manifests.yaml"]) if doc]
    assert shipped[0]["data"]["preflight-history.json"] == history and shipped[1:] == objects[1:]
    too_big = scheduler.with_preflight_history(plan, lambda: "{" + " " * (600 * 1024) + "}")
    assert too_big is plan  # over what a ConfigMap takes: judged without it (a warning says so)
    monkeypatch.delenv("DLBENCH_PREFLIGHT")
    plain = scheduler.render(k8s_run(spec, operator=INDEXED_JOB, **settings), tmp_path)
    assert scheduler.with_preflight_history(plain, lambda: 1 / 0) is plain  # no preflight: the store is not read
