"""storage.writeback: a checkpoint file's pieces start their write-out as they land, and the bytes are exactly
those written, through plain writes and through torch.distributed.checkpoint."""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed.checkpoint as dcp

from dlbench.engine import checkpoint_io
from dlbench.storage.writeback import WritebackFile, start_writeback

PIECE = 16 << 10


def _pieces(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (3, 5 * PIECE + 7, 1, PIECE, 2 * PIECE - 1)]


def test_every_piece_is_started_as_it_lands_and_the_bytes_are_those_written(tmp_path):
    probe = tmp_path / "probe"
    probe.write_bytes(b"x" * PIECE)
    with open(probe, "rb+") as f:
        supported = start_writeback(f.fileno(), 0, PIECE)
    data = _pieces()
    with WritebackFile(tmp_path / "f", "wb", every=PIECE) as out:
        assert sum(out.write(d) for d in data) == sum(map(len, data))
        started = out.started_bytes
        os.fsync(out.fileno())
    total = sum(map(len, data))
    assert (tmp_path / "f").read_bytes() == b"".join(data)
    if supported:  # Linux: all but the last partial piece was started before the closing fsync
        assert total - PIECE < started <= total
    else:
        assert started == 0


def test_without_writeback_nothing_is_started(tmp_path):
    data = _pieces(1)
    with WritebackFile(tmp_path / "f", "wb", every=PIECE, writeback=False) as out:
        for d in data:
            out.write(d)
        assert out.started_bytes == 0
    assert (tmp_path / "f").read_bytes() == b"".join(data)


def test_dcp_saves_through_it_and_loads_back_the_same_state(tmp_path, monkeypatch):
    opened = []

    class Recording(WritebackFile):  # the real file, its instances kept to look at after the save
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            opened.append(self)

    monkeypatch.setattr(checkpoint_io, "WritebackFile", Recording)
    state = {"w": torch.randn(300_000), "b": torch.arange(70_000, dtype=torch.int64)}
    for writeback in (True, False):
        opened.clear()
        where = tmp_path / str(writeback)
        assert checkpoint_io._dcp_save(state, where, 0, writeback=writeback)["fsync_s"] >= 0
        # with writeback every file DCP writes (the rank's data, the metadata) goes through WritebackFile
        written = sorted(os.path.basename(f.name).removesuffix(".tmp") for f in opened)  # .metadata: written, renamed
        assert written == (sorted(os.listdir(where)) if writeback else [])
        back = {name: torch.zeros_like(t) for name, t in state.items()}
        dcp.load(back, storage_reader=dcp.FileSystemReader(str(where)))
        assert all(torch.equal(back[n], state[n]) for n in state)
