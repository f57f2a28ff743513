"""The kubelet's pod-resources API names the pod a GPU is allocated to: a real gRPC server on a Unix socket
answers ``v1.PodResourcesLister/List`` as the kubelet does (its protobuf encoded here by hand), and the exporter
labels the GPU's series with the pod even though none of the pod's processes is visible."""

from concurrent import futures

import grpc
import pytest
from fake_nvml import FakeNVML
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dlbench.telemetry.exporter import NodeCollector, make_registry
from dlbench.telemetry.jobs import JobAttributor
from dlbench.telemetry.nvml import NVMLSource
from dlbench.telemetry.podresources import PodResources, parse_list_response


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (the only kind these messages use)."""
    key, size, out = (number << 3) | 2, len(payload), b""
    for value in (key, size):
        while True:
            out += bytes([(value & 0x7F) | (0x80 if value > 0x7F else 0)])
            value >>= 7
            if not value:
                break
    return out + payload


def _pod(name, namespace, containers):
    """PodResources {name = 1, namespace = 2, containers = 3 {name = 1, devices = 2 {resource_name = 1, device_ids = 2}}}."""
    body = _field(1, name.encode()) + _field(2, namespace.encode())
    for container, resource, ids in containers:
        devices = _field(1, resource.encode()) + b"".join(_field(2, i.encode()) for i in ids)
        body += _field(3, _field(1, container.encode()) + _field(2, devices))
    return _field(1, body)


@pytest.fixture
def kubelet_socket(tmp_path):
    nvml = FakeNVML(3)
    gpu = [g.uuid for g in nvml.gpus]
    response = (_pod("trainer-0", "ml", [("pytorch", "nvidia.com/gpu", [gpu[0]]), ("sidecar", "cpu", ["0", "1"])])
                 + _pod("notebook", "alice", [("jupyter", "nvidia.com/gpu", [f"{gpu[1]}::0", f"{gpu[1]}::1"])])
                 + _pod("batch", "ml", [("worker", "nvidia.com/gpu", [f"{gpu[1]}::2"])]))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {"List": grpc.unary_unary_rpc_method_handler(lambda request, context: response)})
    server.add_generic_rpc_handlers((handler,))
    path = tmp_path / "kubelet.sock"
    server.add_insecure_port(f"unix://{path}")
    server.start()
    yield str(path), nvml, response
    server.stop(None)


def test_the_list_answer_decoded(kubelet_socket):
    _, nvml, response = kubelet_socket
    allocations = parse_list_response(response)
    assert allocations == {nvml.gpus[0].uuid: [("ml", "trainer-0", "pytorch")],
                           nvml.gpus[1].uuid: [("alice", "notebook", "jupyter"), ("ml", "batch", "worker")]}


def test_gpus_named_by_the_pods_they_are_allocated_to(kubelet_socket):
    path, nvml, _ = kubelet_socket
    for gpu in nvml.gpus:
        gpu.processes = []  # the exporter sees no process of the pods (no hostPID)
    pods = PodResources(path)
    collector = NodeCollector(NVMLSource(nvml=nvml), host="n", interval_s=0, jobs=JobAttributor(pod_resources=pods))
    samples = {}
    for family in text_string_to_metric_families(generate_latest(make_registry(collector)).decode()):
        for s in family.samples:
            samples.setdefault(s.name, []).append(s)
    util = {s.labels["gpu"]: s.labels for s in samples["DCGM_FI_DEV_GPU_UTIL"]}
    assert (util["0"]["pod"], util["0"]["namespace"], util["0"]["container"]) == ("trainer-0", "ml", "pytorch")
    assert (util["1"]["pod"], util["1"]["namespace"]) == ("batch,notebook", "alice,ml")  # time-sliced by two pods
    assert util["2"]["pod"] == ""  # allocated to nobody
    assert pods.error is None
    collector.refresh()  # a second reading: an interval to account
    energy = {}
    for family in text_string_to_metric_families(generate_latest(make_registry(collector)).decode()):
        for s in family.samples:
            if s.name == "dlbench_job_gpu_seconds_total":
                energy[s.labels["pod"]] = s.value
    assert set(energy) == {"trainer-0", "notebook", "batch"} and energy["notebook"] == pytest.approx(energy["batch"])
    pods.close()


def test_no_kubelet_no_pods(tmp_path):
    pods = PodResources(str(tmp_path / "absent.sock"), timeout_s=0.5)
    assert pods.allocations() == {} and pods.error
