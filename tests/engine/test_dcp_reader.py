"""The in-place DCP reader on real checkpoints written by ``dcp.save`` (tiny, in this process): whole
contiguous tensors are read straight into the state's own tensors, everything else (a transposed tensor, a
cast to another dtype) through the stock path, and every value comes back either way; fio's figures of
several nodes merge as the checkpoint's own (bytes over the slowest node)."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import psutil
import pytest
import torch
import torch.distributed.checkpoint as dcp

from dlbench.engine.dcp_reader import read_into
from dlbench.storage import checkpoint
from dlbench.storage.checkpoint import fio_all_nodes, fio_phase

#: DCP in one process says so on every call: that is what these tests do
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _saved(tmp_path, state):
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp_path), single_file_per_rank=True, sync_files=False))
    return tmp_path


def test_whole_contiguous_tensors_are_read_in_place_into_the_state(tmp_path):
    state = {"params": torch.randn(3000).to(torch.bfloat16), "exp_avg": torch.randn(40, 50), "step": torch.arange(9)}
    restored = {name: torch.zeros_like(t) for name, t in state.items()}
    pointers = {name: t.data_ptr() for name, t in restored.items()}
    figures = read_into(restored, _saved(tmp_path, state))
    assert figures["direct_bytes"] == sum(t.nbytes for t in state.values()) and figures["stock_items"] == 0
    assert figures["read_io_s"] > 0  # the reads themselves, timed apart from DCP's planning
    assert all(torch.equal(restored[n], state[n]) for n in state)
    assert {name: t.data_ptr() for name, t in restored.items()} == pointers  # the same memory, filled


def test_what_cannot_be_read_in_place_goes_the_stock_way_and_still_comes_back(tmp_path):
    state = {"transposed": torch.randn(30, 20).t(), "plain": torch.randn(100), "cast": torch.randn(64)}
    restored = {"transposed": torch.zeros(20, 30), "plain": torch.zeros(100), "cast": torch.zeros(64, dtype=torch.float64)}
    figures = read_into(restored, _saved(tmp_path, state))
    assert (figures["direct_bytes"], figures["stock_items"]) == (400, 2)  # only "plain": 100 fp32 values
    assert torch.equal(restored["transposed"], state["transposed"]) and torch.equal(restored["plain"], state["plain"])
    assert torch.equal(restored["cast"], state["cast"].double())


def test_fio_on_several_nodes_is_all_bytes_over_the_slowest_node():
    node = {"write": {"bytes": 100, "seconds": 1.0, "bytes_per_s": 100.0}, "read": {"bytes": 100, "seconds": 0.5, "bytes_per_s": 200.0}}
    slow = {"write": {"bytes": 100, "seconds": 4.0, "bytes_per_s": 25.0}, "read": {"bytes": 100, "seconds": 1.0, "bytes_per_s": 100.0}}
    merged = fio_all_nodes([node, {}, slow])  # {}: a rank that is not its node's first ran no fio
    assert merged == {"nodes": 2, "write_bytes_per_s": 50.0, "read_bytes_per_s": 200.0}
    failed = fio_all_nodes([node, {"write": {"error": "fio failed: no space"}}])
    assert failed == {"error": "fio failed: no space", "nodes": 2}


def test_a_host_without_fio_gets_the_fix_named_and_nothing_written(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # a PATH with no fio on it (the real lookup, no double)
    out = fio_phase(tmp_path / "fio", 4096, 1, "write")
    assert out == {"error": "fio is not installed, so there is no comparison with it; install it (Debian: apt-get "
                            "install fio) or give --no-fio"}
    assert list(tmp_path.iterdir()) == []



def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # ended since it was listed
        return ""



@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_a_fio_that_makes_no_progress_is_stopped_and_said_so(tmp_path, monkeypatch):
    """A stuck filesystem never answers fio's writes: here the real fio is stopped (SIGSTOP on its process
    group, as soon as it starts), which makes no progress the same way. fio_phase gives up after its bound with
    one sentence and leaves no fio process behind (before: it waited for ever)."""
    # its bound, 1 s + 64 MiB at 64 MB/s = 2 s (the product's: 60 s + 64 MiB at 10 MB/s); the 64 MiB leave fio
    # writing long after the test sees it start, so the stop lands before fio could end by itself
    monkeypatch.setattr(checkpoint, "FIO_FLOOR_S", 1.0)
    monkeypatch.setattr(checkpoint, "FIO_SLOWEST_BYTES_PER_S", 64e6)
    directory = tmp_path / "fio"
    out: list[dict] = []
    caller = threading.Thread(target=lambda: out.append(fio_phase(directory, 64 << 20, 1, "write")), daemon=True)
    caller.start()
    fio = None
    deadline = time.monotonic() + 120
    while fio is None and caller.is_alive() and time.monotonic() < deadline:
        fio = next((c for c in psutil.Process().children() if str(directory) in _cmdline(c)), None)
    assert fio is not None, f"fio was not seen running: {out}"
    assert os.getpgid(fio.pid) == fio.pid, "fio runs in the test's process group: a kill would miss its jobs"
    os.killpg(fio.pid, signal.SIGSTOP)
    caller.join(120)  # did not hang
    assert out and out[0]["error"] == (f"fio's write of {64 << 20:,} bytes in {directory} did not end within 2 s (a stuck "
                                       "filesystem?) and was stopped; check that filesystem, or give --no-fio"), out
    assert not fio.is_running() or fio.status() == psutil.STATUS_ZOMBIE
    assert not [c for c in psutil.Process().children(recursive=True) if "fio" in c.name()]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_state_of_one_dtype_round_trips(tmp_path, dtype):
    state = {"w": torch.randn(257).to(dtype)}
    restored = {"w": torch.zeros(257, dtype=dtype)}
    assert read_into(restored, _saved(tmp_path, state))["direct_bytes"] == state["w"].nbytes
    assert torch.equal(restored["w"], state["w"])
