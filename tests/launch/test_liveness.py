"""Rank liveness (dlbench.launch.liveness): heartbeats through a real TCP store, and the pure reading of them
that names a lost node. The namespace-cluster tests (tests/cluster/test_node_failures.py) pull real links."""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time

import pytest
from torch.distributed import TCPStore

from dlbench.launch.liveness import Heartbeat, lost_after, lost_ranks, read_heartbeats, unreachable


def beat(rank, host, age=0.0, step=10, store_silent=0.0, silent=None, started=100.0, now=130.0):
    return {"rank": rank, "host": host, "step": step, "time": now, "started": started, "store": "node0:29500",
            "store_silent_s": store_silent, "silent": silent or {}, "seen_age_s": age}


def test_all_beating_is_no_loss():
    assert lost_ranks({0: beat(0, "node0"), 1: beat(1, "node1")}, set(), 20) is None


def test_a_rank_rank_0_hears_no_more_is_named_with_its_host_and_step():
    silent = {"1": {"silent_s": 24.0, "host": "node1", "step": "143"}}
    lost = lost_ranks({0: beat(0, "node0", silent=silent), 1: beat(1, "node1", step=143, store_silent=25)}, set(), 20)
    assert lost.hosts == {"node1": [1]}
    assert lost.message.startswith("node1 (rank 1) could not reach the rendezvous store at node0:29500 for 25 s")
    assert "last heard at step 143, 30 s into the run" in lost.message


def test_a_silent_rank_without_a_file_of_its_own_is_named_from_rank_0s_view():
    silent = {"2": {"silent_s": 30.0, "host": "node2", "step": "7"}}
    lost = lost_ranks({0: beat(0, "node0", silent=silent)}, set(), 20)
    assert lost.hosts == {"node2": [2]} and "rank 0 heard nothing from it for 30 s" in lost.message
    assert "last heard at step 7" in lost.message


def test_a_dead_node_stops_its_file_while_the_others_go_on():
    beats = {0: beat(0, "node0"), 1: beat(1, "node1", age=40, step=3), 2: beat(2, "node1", age=41, step=3)}
    lost = lost_ranks(beats, set(), 20)
    assert lost.hosts == {"node1": [1, 2]} and "sent no heartbeat for 40 s" in lost.message


def test_a_rank_that_reported_and_ended_is_not_lost():
    assert lost_ranks({0: beat(0, "node0"), 1: beat(1, "node1", age=60)}, {1}, 20) is None


def test_every_file_stale_is_a_filesystem_pause_not_a_lost_node():
    assert lost_ranks({0: beat(0, "node0", age=50), 1: beat(1, "node1", age=50)}, set(), 20) is None


def test_when_the_submitting_host_cannot_reach_the_rendezvous_host_that_host_is_the_lost_one():
    """Two nodes, node0's link down: node1 is cut off from node0's store and rank 0 hears nothing from node1 —
    each side blames the other; the submitting host's own view settles it."""
    silent = {"1": {"silent_s": 22.0, "host": "node1", "step": "9"}}
    beats = {0: beat(0, "node0", silent=silent), 1: beat(1, "node1", store_silent=22)}
    assert lost_ranks(beats, set(), 20).hosts == {"node1": [1]}  # without a view of its own
    lost = lost_ranks(beats, set(), 20, unreachable=lambda host: host == "node0")
    assert lost.hosts == {"node0": [0]} and "nor could the submitting host" in lost.message
    lost = lost_ranks(beats, set(), 20, unreachable=lambda host: host == "node1")
    assert lost.hosts == {"node1": [1]}


def test_lost_after_is_a_fifth_of_the_timeout_within_bounds():
    assert lost_after(300) == 60 and lost_after(30) == 10 and lost_after(100) == 20 and lost_after(None) == 20


def test_unreachable_tells_a_refusing_host_from_a_silent_one():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: the connection is refused
        assert unreachable("127.0.0.1", port, timeout_s=1) is False
    assert unreachable("127.0.0.1", 9, timeout_s=1) is False  # refused at once: the host answers
    # a host that does not answer at all: tests/cluster/test_node_failures.py (a node whose link is down)


@pytest.fixture
def store():
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=dt.timedelta(seconds=5), wait_for_workers=False)
    yield master


def test_rank_0_hears_a_rank_stop_and_gives_up_naming_it(store, tmp_path):
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port)}
    gave_up: list[str] = []
    zero = Heartbeat(tmp_path, 0, 2, lambda: 5, gave_up.append, lost_after_s=1.5, interval_s=0.2, env=env)
    one = Heartbeat(tmp_path, 1, 2, lambda: 4, lambda m: None, lost_after_s=1.5, interval_s=0.2, env=env)
    with zero:
        one.__enter__()
        time.sleep(1.0)
        assert gave_up == [] and set(read_heartbeats(tmp_path)) == {0, 1}
        one._stop.set()  # rank 1 stops beating without saying it ended: a lost rank
        one._thread.join()
        deadline = time.monotonic() + 10
        while not gave_up and time.monotonic() < deadline:
            time.sleep(0.1)
    assert len(gave_up) == 1 and "(rank 1) stopped answering on the network" in gave_up[0] and "after step 4" in gave_up[0]
    assert read_heartbeats(tmp_path)[0]["silent"]["1"]["silent_s"] >= 1.5


def test_a_rank_that_ended_is_not_counted_lost(store, tmp_path):
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port)}
    gave_up: list[str] = []
    with Heartbeat(tmp_path, 0, 2, lambda: 5, gave_up.append, lost_after_s=1.0, interval_s=0.2, env=env):
        with Heartbeat(tmp_path, 1, 2, lambda: 5, gave_up.append, lost_after_s=1.0, interval_s=0.2, env=env):
            time.sleep(0.6)
        time.sleep(2.0)  # rank 1 ended (its key says done): rank 0 goes on alone
    assert gave_up == []


def test_a_rank_cut_off_from_the_store_gives_up_by_itself(tmp_path):
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=dt.timedelta(seconds=5), wait_for_workers=False)
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master.port)}
    gave_up: list[str] = []
    done = threading.Event()
    heartbeat = Heartbeat(tmp_path, 1, 2, lambda: 12, lambda m: (gave_up.append(m), done.set()), lost_after_s=1.5,
                          interval_s=0.2, env=env)
    with heartbeat:
        time.sleep(0.5)
        del master  # the rendezvous host is gone
        assert done.wait(15)
    assert "(rank 1) could not reach the rendezvous store at 127.0.0.1" in gave_up[0] and "at step 12" in gave_up[0]
    assert read_heartbeats(tmp_path)[1]["store_silent_s"] >= 1.5


def test_a_cut_off_rank_gives_up_even_when_its_beating_thread_hangs(tmp_path):
    """A store call on a connection whose peer vanished can block for minutes (a pulled cable drops packets): the
    watchdog reads only the clock, so the rank still ends within lost_after_s + interval_s."""
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=dt.timedelta(seconds=5), wait_for_workers=False)
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master.port)}
    calls, release = [], threading.Event()

    def step() -> int:  # the beating thread's own work: from the third beat on, it never returns
        calls.append(1)
        if len(calls) > 2:
            release.wait()
        return 7

    gave_up: list[str] = []
    done = threading.Event()
    heartbeat = Heartbeat(tmp_path, 1, 2, step, lambda m: (gave_up.append(m), done.set()), lost_after_s=1.0,
                          interval_s=0.2, env=env)
    with heartbeat:
        started = time.monotonic()
        del master
        try:
            assert done.wait(10)
            assert time.monotonic() - started < 1.0 + 0.2 + 3  # the bound, and a loaded machine's slack
        finally:
            release.set()  # before the exit joins the beating thread (it waits interval_s + 10 s for a hung one)
    assert len(gave_up) == 1 and "(rank 1) could not reach the rendezvous store" in gave_up[0] and "at step 7" in gave_up[0]
