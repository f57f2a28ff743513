"""Which pod a GPU is allocated to, from the kubelet's pod-resources API (the gRPC socket dcgm-exporter reads).

``/var/lib/kubelet/pod-resources/kubelet.sock`` answers ``v1.PodResourcesLister/List`` with every pod's
containers and the devices each was allocated (``nvidia.com/gpu``: GPU UUIDs; with time-slicing the device
plugin names replicas ``<uuid>::<n>``; MIG devices under ``nvidia.com/mig-…``). It needs no process to be
visible, so it names the pod on a GPU even when the exporter cannot see the pod's processes (no
``hostPID``) — the case behind most of dcgm-exporter's missing pod labels. The answer is decoded by hand
(:func:`parse_list_response`: the three messages dlbench needs, protobuf's wire format) so no generated
stubs are needed; ``grpcio`` (a dependency of tensorboard) carries the call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-")

Allocation = tuple[str, str, str]  # (namespace, pod, container)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, Any]]:
    """``(field number, value)`` of one protobuf message: ints for varints and fixed fields, bytes otherwise."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at:at + size], at + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, at = int.from_bytes(data[at:at + width], "little"), at + width
        else:
            raise ValueError(f"protobuf wire type {wire} is not one pod-resources uses")
        yield number, value


def parse_list_response(data: bytes) -> dict[str, list[Allocation]]:
    """GPU UUID (or MIG UUID) → the containers allocated it, from a ``ListPodResourcesResponse``:
    pod_resources = 1 {name = 1, namespace = 2, containers = 3 {name = 1, devices = 2 {resource_name = 1,
    device_ids = 2}}}."""
    out: dict[str, list[Allocation]] = {}
    for number, pod in fields(data):
        if number != 1:
            continue
        pod_fields = list(fields(pod))
        name = next((v.decode() for n, v in pod_fields if n == 1), "")
        namespace = next((v.decode() for n, v in pod_fields if n == 2), "")
        for container in (v for n, v in pod_fields if n == 3):
            container_fields = list(fields(container))
            container_name = next((v.decode() for n, v in container_fields if n == 1), "")
            for devices in (v for n, v in container_fields if n == 2):
                device_fields = list(fields(devices))
                resource = next((v.decode() for n, v in device_fields if n == 1), "")
                if not resource.startswith(GPU_RESOURCES):
                    continue
                for device_id in (v.decode() for n, v in device_fields if n == 2):
                    entry = (namespace, name, container_name)
                    allocated = out.setdefault(device_id.split("::")[0], [])  # a time-slicing replica: its GPU
                    if entry not in allocated:
                        allocated.append(entry)
    return out


class PodResources:
    """The GPU → pod allocations of this node's kubelet, asked at most every ``ttl_s``; ``{}`` (and ``error``
    set) when the socket does not answer."""

    def __init__(self, socket_path: str = SOCKET, ttl_s: float = 10.0, timeout_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.socket_path, self.ttl_s, self.timeout_s, self._clock = socket_path, ttl_s, timeout_s, clock
        self._asked_at = float("-inf")
        self._allocations: dict[str, list[Allocation]] = {}
        self._channel = None
        self.error: str | None = None

    def allocations(self) -> dict[str, list[Allocation]]:
        if self._clock() - self._asked_at >= self.ttl_s:
            self._asked_at = self._clock()
            try:
                self._allocations = parse_list_response(self._list())
                self.error = None
            except Exception as exc:  # noqa: BLE001 - kubelet down, no socket, an answer we cannot read: no pods
                self.error = f"{type(exc).__name__}: {exc}"
                self._allocations = {}
        return self._allocations

    def _list(self) -> bytes:
        import grpc  # grpcio: only where a kubelet's socket is there to ask

        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{os.path.abspath(self.socket_path)}")
        call = self._channel.unary_unary(LIST_METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        return call(b"", timeout=self.timeout_s)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


__all__ = ["GPU_RESOURCES", "LIST_METHOD", "PodResources", "SOCKET", "fields", "parse_list_response"]
