"""The k8s scheduler's client path, through the official ``kubernetes`` client, against the API-server
double of ``kube_double`` (a real HTTP server on 127.0.0.1 whose pods are local processes).

Submit → state → logs → reports of a real 2-rank run (each shape); a crashing rank → ``failed`` with
its cause; cancel → the objects deleted and no process left; a node selector that matches nothing →
``queued`` with the scheduler's ``Unschedulable`` reason; the API refusing (403, 422) or missing (no
kubeconfig, no operator, nothing listening) → one sentence naming the fix.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from kube_double import kubeconfig
from kube_pods import free_port, k8s_run
from paced import PACED

from dlbench.api.pipeline import execute
from dlbench.errors import UsageError
from dlbench.launch import get_launcher
from dlbench.launch.batch import CANCELLED, DONE, FAILED, QUEUED, TIMEOUT, JobState
from dlbench.launch.k8s import KubeScheduler
from dlbench.launch.k8s.manifests import INDEXED_JOB, PYTORCHJOB
from dlbench.launch.k8s.scheduler import MANIFEST_FILE
from dlbench.store import open_store

HERE = Path(__file__).parent
WAIT_S = 300  # a bound, not a speed target


def submit(scheduler: KubeScheduler, run, workdir: Path) -> str:
    """What the batch launcher does before it waits: check, render, write the files, submit."""
    scheduler.check(run)
    plan = scheduler.render(run, workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in plan.files.items():
        (workdir / name).write_text(text)
    return scheduler.submit(plan, workdir)


def wait(scheduler: KubeScheduler, job_id: str, until=lambda s: s.finished) -> JobState:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        state = scheduler.state(job_id)
        if until(state):
            return state
        time.sleep(0.5)
    raise AssertionError(f"{job_id} still {scheduler.state(job_id)} after {WAIT_S} s")


@pytest.mark.slow
@pytest.mark.parametrize(("operator", "shape"), [(True, PYTORCHJOB), (False, INDEXED_JOB)])
def test_submit_state_logs_reports(kube, operator, shape, tmp_path, left_running):
    kube.operator = operator
    scheduler = KubeScheduler()
    job_id = submit(scheduler, k8s_run({"steps": 3}, nodes=2), tmp_path / "job")  # operator: auto
    namespace, kind, name = job_id.split("/")
    assert (namespace, kind) == ("default", shape)
    assert wait(scheduler, job_id) == JobState(DONE)
    logs = scheduler.logs(job_id, tmp_path / "job")
    assert logs.count("==> pod ") == 2
    reports = scheduler.reports(job_id, tmp_path / "job")
    assert sorted(reports) == [0, 1] and {r["status"] for r in reports.values()} == {"ok"}
    assert reports[0]["result"]["steps"] == 3 and reports[0]["result"]["world_size"] == 2
    scheduler.cancel(job_id)  # cleaning up a finished job deletes its objects
    assert not [k for k in kube.objects if k[2].startswith(name)]
    assert left_running() == []


@pytest.mark.slow
def test_a_crashing_rank_fails_the_job_with_its_cause(kube, faulty, tmp_path, left_running):
    run = k8s_run({"workload": "faulty", "params": {"fault": "crash", "rank": 0}, "steps": 5, "timeout_s": 10},
                  operator="job")
    scheduler = KubeScheduler()
    job_id = submit(scheduler, run, tmp_path / "job")
    state = wait(scheduler, job_id)
    assert state.state == FAILED and "BackoffLimitExceeded" in state.reason and "exit code" in state.reason
    (report,) = scheduler.reports(job_id, tmp_path / "job").values()
    assert report["status"] == "failed" and "injected crash" in report["error"]
    assert left_running() == []


@pytest.mark.slow
def test_cancel_deletes_the_job_and_stops_its_processes(kube, tmp_path, left_running, faulty):
    scheduler = KubeScheduler()
    job_id = submit(scheduler, k8s_run(PACED, nodes=2, operator="job"), tmp_path / "job")
    wait(scheduler, job_id, until=lambda s: s.state == "running")
    assert len(left_running()) >= 2  # the pods' processes run
    scheduler.cancel(job_id)
    assert scheduler.state(job_id).state == CANCELLED
    assert kube.objects == {}  # Job, Service and ConfigMap all deleted
    deadline = time.monotonic() + 30
    while left_running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left_running() == []
    scheduler.cancel(job_id)  # again: no error, it is gone


def test_a_node_selector_matching_no_node_keeps_the_job_queued_saying_why(kube, tmp_path):
    scheduler = KubeScheduler()
    run = k8s_run(operator="job", node_selector={"nvidia.com/gpu.product": "NVIDIA-B200"})
    job_id = submit(scheduler, run, tmp_path / "job")
    state = scheduler.state(job_id)
    assert state.state == QUEUED and not state.finished
    assert state.reason.startswith("Unschedulable: 0/1 nodes are available") and "selector" in state.reason
    assert scheduler.logs(job_id, tmp_path / "job") == ""  # no container started: no log, no error
    scheduler.cancel(job_id)


@pytest.mark.slow
def test_the_time_limit_ends_the_job_as_timeout(kube, tmp_path, left_running, faulty):
    scheduler = KubeScheduler()
    job_id = submit(scheduler, k8s_run(PACED, operator="pytorchjob", time="0:01"), tmp_path / "job")
    state = wait(scheduler, job_id)
    assert state.state == TIMEOUT and "active longer than specified deadline" in state.reason
    assert left_running() == []


@pytest.mark.parametrize(("code", "message", "fragment"), [
    (403, 'jobs.batch is forbidden: User "tester" cannot create resource "jobs" in API group "batch" in the '
          'namespace "default"', "HTTP 403: jobs.batch is forbidden"),
    (422, 'Job.batch "x" is invalid: spec.template.spec.priorityClassName: Invalid value', "HTTP 422: Job.batch"),
])
def test_a_refused_submission_is_one_sentence_and_leaves_nothing(kube, tmp_path, code, message, fragment):
    kube.refuse[("create", "Job")] = (code, message)
    with pytest.raises(UsageError, match=fragment) as caught:
        submit(KubeScheduler(), k8s_run(operator="job"), tmp_path / "job")
    text = str(caught.value)
    assert text.startswith("the Kubernetes API refused to create Job dlbench-") and text.count(". ") == 0
    assert kube.objects == {} and kube.pods == {}  # the ConfigMap and Service made before were deleted


def test_auto_asks_the_api_for_the_operator_and_falls_back_to_discovery(kube, tmp_path):
    kube.refuse[("get", "CustomResourceDefinition")] = (403, "customresourcedefinitions is forbidden")
    scheduler = KubeScheduler()
    scheduler.check(k8s_run())
    assert scheduler.operator_found is True
    kube.operator = False
    scheduler.check(k8s_run())
    assert scheduler.operator_found is False
    assert ("get", "/apis/kubeflow.org/v1") in kube.requests


def test_asking_for_pytorchjob_without_the_operator_is_one_sentence(kube):
    kube.operator = False
    with pytest.raises(UsageError, match="no Kubeflow training operator .* use operator 'job'"):
        KubeScheduler().check(k8s_run(operator="pytorchjob"))


def test_no_kubeconfig_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(UsageError, match="no usable kubeconfig at .*missing.*; set KUBECONFIG, write ~/.kube/config"):
        KubeScheduler().check(k8s_run())


def test_a_cluster_not_answering_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(f"http://127.0.0.1:{free_port()}", tmp_path / "kubeconfig")))
    with pytest.raises(UsageError, match="could not reach the Kubernetes API to read the PyTorchJob CRD"):
        KubeScheduler().check(k8s_run())


def test_without_the_kubernetes_package_the_fix_is_named(kube, monkeypatch):
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as if not installed: import raises ImportError
    with pytest.raises(UsageError, match=r"pip install 'dlbench\[k8s\]'"):
        KubeScheduler().check(k8s_run())


def test_a_job_id_that_is_not_dlbench_is_one_sentence():
    with pytest.raises(UsageError, match="is not a Kubernetes job id of dlbench"):
        KubeScheduler().state("12345")


def test_the_manifest_file_is_what_gets_submitted(kube, tmp_path):
    scheduler = KubeScheduler()
    job_id = submit(scheduler, k8s_run(operator="job", node_selector={"absent": "x"}), tmp_path / "job")
    assert (tmp_path / "job" / MANIFEST_FILE).read_text().count("---\n") == 3
    assert {k[0] for k in kube.objects} == {"ConfigMap", "Service", "Job"}
    scheduler.cancel(job_id)


def test_only_hopeless_reasons_end_the_pending_wait():
    scheduler = KubeScheduler()
    selector = JobState(QUEUED, "Unschedulable: 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.")
    taint = JobState(QUEUED, "Unschedulable: 0/2 nodes are available: 2 node(s) had untolerated taint {gpu: true}.")
    busy = JobState(QUEUED, "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    image = JobState(QUEUED, "ImagePullBackOff: Back-off pulling image \"dlbench:nope\"")
    assert "check --node-selector" in scheduler.never_starts(selector)
    assert "check --node-selector and --toleration" in scheduler.never_starts(taint)
    assert scheduler.never_starts(busy) is None  # GPUs busy: a queue, not a mistake
    assert "check --image" in scheduler.never_starts(image)
    root = JobState(QUEUED, "CreateContainerConfigError: container has runAsNonRoot and image will run as root "
                            "(pod: \"dlbench-x-0_default(1)\", container: pytorch)")
    assert "numeric non-root USER" in scheduler.never_starts(root)
    secret = JobState(QUEUED, "CreateContainerConfigError: secret \"dlbench-store\" not found")
    assert "check --store-secret" in scheduler.never_starts(secret)


def test_a_selector_no_node_matches_is_cancelled_after_the_bounded_wait(kube, tmp_path, monkeypatch):
    module = sys.modules["dlbench.launch.batch_launcher"]  # (the package's batch_launcher is a function)
    monkeypatch.setattr(module, "NEVER_STARTS_WAIT_S", 1.0)  # the bound, shortened for the test
    monkeypatch.setattr(module, "POLL_S", 0.2)
    store = open_store(str(tmp_path / "runs.db"))
    run = k8s_run(operator="job", node_selector={"nvidia.com/gpu.product": "NVIDIA-B200"})
    with pytest.raises(UsageError, match="cancelled after 1 s queued: no node can take the pods .*didn't match"):
        execute(run, store, env={}, launcher=get_launcher("k8s"))
    assert kube.objects == {} and kube.pods == {}  # cancelled: nothing left in the cluster
    assert store.records() == []  # nothing ran: nothing recorded


def test_the_job_owns_its_config_map_and_service(kube, tmp_path):
    scheduler = KubeScheduler()
    job_id = submit(scheduler, k8s_run(operator="job", node_selector={"absent": "x"}), tmp_path / "job")
    _, _, name = job_id.split("/")
    job_uid = kube.objects[("Job", "default", name)]["metadata"]["uid"]
    for kind in ("ConfigMap", "Service"):
        (owned,) = [o for k, o in kube.objects.items() if k[0] == kind]
        assert owned["metadata"]["ownerReferences"] == [
            {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid}]
    scheduler._remove("default", "Job", name)  # as the TTL controller or 'kubectl delete job' would
    assert kube.objects == {}  # the garbage collector took what the job owned


def test_without_the_right_to_patch_the_job_still_runs(kube, tmp_path):
    kube.refuse[("patch", "ConfigMap")] = (403, "configmaps is forbidden: cannot patch")
    scheduler = KubeScheduler()
    job_id = submit(scheduler, k8s_run(operator="job", node_selector={"absent": "x"}), tmp_path / "job")
    assert scheduler.state(job_id).state == QUEUED
    scheduler.cancel(job_id)
    assert kube.objects == {}
