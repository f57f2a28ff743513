"""Which node stopped answering: rank heartbeats in batch jobs, read while the job runs.

A node that dies or drops off the network mid-run leaves the other ranks blocked in a collective until its
timeout, and the scheduler notices only minutes later (Slurm's ``SlurmdTimeout``); the error the survivors
raise (gloo's "Connection closed by peer", a store timeout) names no node. So every rank of a batch job runs
a :class:`Heartbeat` thread that, every :data:`HEARTBEAT_S` seconds:

1. stamps a counter under its own key in the job's TCP store (``MASTER_ADDR:MASTER_PORT``, the rendezvous host's
   store, reached over the cluster network) and reads it back: a store that does not answer for
   ``lost_after_s`` means *this* node is cut off — the rank reports ``failed`` and ends itself, so nothing is
   left running on a node that dropped off the network;
2. rank 0 reads every rank's counter: a counter that has not moved for ``lost_after_s`` (rank 0's own clock)
   is a rank that stopped answering on the network;
3. writes ``alive<rank>.json`` in the job's ranks directory on the shared filesystem, atomically: host, pid, the
   measured step, whether the store answered, and (rank 0) the silent ranks.

The submitting process reads those files while the job runs (:func:`lost_ranks`, pure): a rank that rank 0 hears
no more, that is cut off from the store, or whose file stopped changing (a dead node writes nothing) is lost,
unless it has already reported. The batch launcher then cancels the job at once and the record names the
node(s), rank(s), step and time — instead of waiting for the scheduler to declare the node dead.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.launch._base import write_json_atomic

#: Seconds between two heartbeats of a rank.
HEARTBEAT_S = 2.0
#: Seconds without an answer after which a rank (or the store) counts as lost, unless the run says otherwise.
LOST_AFTER_S = 20.0


def lost_after(timeout_s: float | None) -> float:
    """How long a silent rank is waited for in a run whose collectives time out after ``timeout_s``: a fifth
    of it, between 10 and 60 s (a hiccup of the network is not a lost node; a lost node must not cost minutes)."""
    return LOST_AFTER_S if not timeout_s else min(60.0, max(10.0, timeout_s / 5))
#: The store keys' prefix (torch's own keys live under other prefixes).
KEY = "dlbench/alive/"
ALIVE = "alive{rank}.json"
#: What an ended rank leaves under its key.
DONE = "done"


class Heartbeat:
    """A rank's heartbeat thread (see the module docstring). ``step`` returns the measured steps so far;
    ``on_cut_off(message)`` is called once when the store has not answered for ``lost_after_s`` (the worker
    reports the failure and ends the rank). Use as a context manager around the rank's work."""

    def __init__(self, out_dir: Path, rank: int, world_size: int, step: Callable[[], int],
                 on_cut_off: Callable[[str], None], lost_after_s: float = LOST_AFTER_S,
                 interval_s: float = HEARTBEAT_S, env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        self.out_dir, self.rank, self.world_size = out_dir, rank, world_size
        self.step, self.on_cut_off = step, on_cut_off
        self.lost_after_s, self.interval_s = lost_after_s, interval_s
        self.store_host = env.get("MASTER_ADDR", "")
        self.store_port = int(env.get("MASTER_PORT") or 0)
        self.host = socket.gethostname()
        self.started = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dlbench-heartbeat", daemon=True)
        # the watchdog: a thread of its own, because the beating thread can itself hang -- a store call on a
        # connection whose peer vanished (a pulled cable drops packets silently) waits for TCP's retransmissions,
        # minutes; the watchdog only reads the clock, so a cut-off node ends within lost_after_s + interval_s
        self._watchdog = threading.Thread(target=self._watch, name="dlbench-watchdog", daemon=True)
        self._gave_up = threading.Lock()
        self._last_step = 0
        self._store: Any = None
        self._count = 0
        self._store_ok_at = time.monotonic()
        self._seen: dict[int, tuple[bytes, float]] = {}  # rank 0: each rank's counter and when it last moved

    def __enter__(self) -> Heartbeat:
        self._beat()  # the file exists before the thread's first interval: the launcher sees the rank at once
        self._thread.start()
        self._watchdog.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 10)
        try:  # an ended rank stops beating: say so, so that rank 0 does not count it as lost
            if self._store is not None:
                self._store.set(f"{KEY}{self.rank}", DONE)
        except Exception:  # noqa: BLE001 - the rank has ended either way
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._beat()

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s / 2):
            cut_off_s = time.monotonic() - self._store_ok_at
            if cut_off_s >= self.lost_after_s + self.interval_s:  # the beating thread had its chance to say it
                self._give_up(self._cut_off_message(cut_off_s, self._last_step))  # never a call that could hang
                return

    def _give_up(self, message: str) -> None:
        """``on_cut_off(message)`` once, from whichever thread notices first."""
        if self._gave_up.acquire(blocking=False):
            self._stop.set()
            self.on_cut_off(message)

    def _cut_off_message(self, cut_off_s: float, step: int) -> str:
        return (f"{self.host} (rank {self.rank}) could not reach the rendezvous store at {self.store_host}:"
                f"{self.store_port} for {cut_off_s:.0f} s at step {step}: it is cut off from the other nodes")

    def _beat(self) -> None:
        step = self._last_step = self.step()
        store_ok, silent = self._stamp(step)
        now = time.monotonic()
        if store_ok:
            self._store_ok_at = now
        cut_off_s = now - self._store_ok_at
        doc = {"rank": self.rank, "host": self.host, "pid": os.getpid(), "step": step, "time": time.time(),
               "started": self.started, "store": f"{self.store_host}:{self.store_port}",
               "store_silent_s": round(cut_off_s, 1),
               "silent": {str(r): {"silent_s": round(s, 1), "host": h, "step": st} for r, (s, h, st) in silent.items()}}
        write_json_atomic(self.out_dir / ALIVE.format(rank=self.rank), doc)
        lost = {r: v for r, v in silent.items() if v[0] >= self.lost_after_s}
        if self._stop.is_set():
            return
        if cut_off_s >= self.lost_after_s:
            self._give_up(self._cut_off_message(cut_off_s, step))
        elif lost:
            self._give_up("; ".join(f"{host} (rank {r}) stopped answering on the network {s:.0f} s ago, after step {st}"
                                      for r, (s, host, st) in sorted(lost.items())))

    def _stamp(self, step: int) -> tuple[bool, dict[int, tuple[float, str, str]]]:
        """Stamp this rank's counter (with its host and step) and read it back; rank 0 also reads every rank's.
        (the store answered, {silent rank: (seconds, host, step)})."""
        if not self.store_port:
            return True, {}  # no store to reach (a single-process job): nothing to watch
        try:
            store = self._connect()
            self._count += 1
            stamp = f"{self._count}|{self.host}|{step}"
            store.set(f"{KEY}{self.rank}", stamp)
            if store.get(f"{KEY}{self.rank}") != stamp.encode():
                raise RuntimeError("the store gave back another value")
            return True, self._silent(store) if self.rank == 0 else {}
        except Exception:  # noqa: BLE001 - any failure to reach the store is the signal this thread watches for
            self._store = None  # a new connection next time: the old one may be dead for good
            return False, {}

    def _connect(self) -> Any:
        if self._store is None:
            import datetime as dt

            from torch.distributed import (
                TCPStore,  # torch: present wherever ranks run; heavy for the launcher side
            )

            timeout = dt.timedelta(seconds=max(1.0, min(5.0, self.lost_after_s / 4)))
            self._store = TCPStore(self.store_host, self.store_port, is_master=False, timeout=timeout,
                                   wait_for_workers=False)
        return self._store

    def _silent(self, store: Any) -> dict[int, tuple[float, str, str]]:
        now = time.monotonic()
        silent = {}
        for rank in range(self.world_size):
            key = f"{KEY}{rank}"
            value = store.get(key) if store.check([key]) else b""
            last = self._seen.get(rank)
            if last is None or last[0] != value:
                self._seen[rank] = (value, now)
            elif value and value != DONE.encode() and now - last[1] >= self.interval_s * 2:
                _, host, step = value.decode(errors="replace").split("|", 2)  # a rank not yet stamping is starting
                silent[rank] = (now - last[1], host, step)
        return silent


def read_heartbeats(ranks_dir: Path) -> dict[int, dict[str, Any]]:
    """Every rank's latest heartbeat in ``ranks_dir``, with ``seen_age_s``: seconds since the file last changed."""
    beats = {}
    now = time.time()
    for path in ranks_dir.glob("alive*.json"):
        try:
            doc = json.loads(path.read_text())
            doc["seen_age_s"] = max(0.0, now - path.stat().st_mtime)
            beats[int(path.stem[5:])] = doc
        except (ValueError, OSError):
            continue  # being replaced right now: read again on the next poll
    return beats


@dataclass(frozen=True)
class Lost:
    """Ranks that stopped answering, by host, and one sentence saying what was seen."""

    hosts: dict[str, list[int]]
    message: str


def lost_ranks(beats: Mapping[int, Mapping[str, Any]], reported: set[int], lost_after_s: float,
               unreachable: Callable[[str], bool] | None = None) -> Lost | None:
    """The ranks lost while the job runs (see the module docstring), or None. ``beats`` from
    :func:`read_heartbeats`; ``reported``: the ranks that wrote their final report (a rank that ended stops
    beating); ``unreachable(host)``: whether the submitting host cannot reach ``host`` either — it tells a
    rendezvous host that dropped off the network from the nodes that lost it (with two nodes each side
    blames the other)."""
    seen: dict[int, str] = {}
    where: dict[int, tuple[str, Any, float | None]] = {}  # rank → (host, last step, seconds into the run)
    for rank, beat in beats.items():
        into = beat["time"] - beat["started"] if "time" in beat and "started" in beat else None
        where[rank] = (str(beat.get("host") or "?"), beat.get("step"), into)
    fresh = any(b["seen_age_s"] < lost_after_s for b in beats.values())
    cut_off = set()
    for rank, beat in beats.items():
        if beat.get("store_silent_s", 0) >= lost_after_s:
            cut_off.add(rank)
            seen[rank] = f"could not reach the rendezvous store at {beat.get('store')} for {beat['store_silent_s']:.0f} s"
        elif rank not in reported and beat["seen_age_s"] >= lost_after_s and fresh:
            seen[rank] = f"sent no heartbeat for {beat['seen_age_s']:.0f} s (its node is down, or the rank was killed)"
    for rank_text, silent in ((beats.get(0) or {}).get("silent") or {}).items():
        rank = int(rank_text)
        if silent["silent_s"] >= lost_after_s:
            seen.setdefault(rank, f"stopped answering on the network (rank 0 heard nothing from it for "
                                  f"{silent['silent_s']:.0f} s)")
            where.setdefault(rank, (silent["host"], silent["step"], None))
    if not seen:
        return None
    store_host = str((beats.get(0) or {}).get("store", "")).rpartition(":")[0]
    if cut_off and unreachable is not None and store_host and unreachable(store_host) \
            and not any(unreachable(where[r][0]) for r in cut_off):
        # the nodes did not drop off: the rendezvous host did — they lost it, and so did the submitting host
        on_store = [r for r, (host, _, _) in where.items() if host == store_host] or [0]
        seen = {r: (f"stopped answering on the network: rank(s) {', '.join(map(str, sorted(cut_off)))} could not "
                    f"reach its rendezvous store, nor could the submitting host") for r in on_store}
    by_host: dict[str, list[int]] = {}
    for rank in sorted(seen):
        by_host.setdefault(where.get(rank, (f"rank {rank}'s node", None, None))[0], []).append(rank)
    parts = []
    for host, ranks in by_host.items():
        _, step, into = where.get(ranks[0], (host, None, None))
        last = ", ".join(filter(None, [f"step {step}" if step is not None else "",
                                       f"{into:.0f} s into the run" if into is not None else ""]))
        parts.append(f"{host} (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}) {seen[ranks[0]]}"
                     + (f"; last heard at {last}" if last else ""))
    return Lost(by_host, "; ".join(parts))


def unreachable(host: str, port: int, timeout_s: float = 3.0) -> bool:
    """Whether this host cannot reach ``host`` over TCP: a connection that neither opens nor is refused within
    ``timeout_s`` (a refusal proves the host answers). One connection attempt, made only once a rank was lost."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return False
    except ConnectionRefusedError:
        return False
    except OSError:
        return True
