"""A file that asks the kernel to start writing each piece to the device as soon as it is written.

A checkpoint written with plain buffered writes lands in the page cache first and reaches the device only at
the closing ``fsync`` (a few GB stay below the kernel's background-writeback threshold on a node with tens of
GB of memory), so its duration is *copy, then flush*. Starting the write-out of every ``WRITEBACK_BYTES``
piece as soon as it is in the page cache (``sync_file_range(SYNC_FILE_RANGE_WRITE)``: asynchronous, no wait
for the device) overlaps the two: the closing ``fsync`` waits only for what is still in flight. The data is
no more and no less durable than before — the ``fsync`` at the end is what makes it so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import os

#: Bytes written before their write-out is started (large enough for the device to stream, small enough to overlap).
WRITEBACK_BYTES = 64 << 20
_SYNC_FILE_RANGE_WRITE = 2


def _sync_file_range():
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux: the closing fsync does all the work, as without this module
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    return fn


_SYNC = _sync_file_range()


def start_writeback(fd: int, offset: int, nbytes: int) -> bool:
    """Start writing ``[offset, offset + nbytes)`` of ``fd`` to its device without waiting; False where the
    kernel or file system cannot (the closing fsync then writes it)."""
    return _SYNC is not None and _SYNC(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE) == 0


class WritebackFile(io.FileIO):
    """An unbuffered binary file whose writes go in ``every``-byte pieces, each one's write-out started as it
    lands (``writeback=False``: the same pieces, nothing started — a plain file)."""

    def __init__(self, path: str | os.PathLike, mode: str = "wb", every: int = WRITEBACK_BYTES, writeback: bool = True):
        super().__init__(path, mode.replace("b", ""))
        self.every, self.writeback, self.started_bytes, self._from, self._at = every, writeback, 0, 0, 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += super().write(view[done:done + self.every])
            self._at = self.tell()
            if self.writeback and self._at - self._from >= self.every:
                self._start()
        return done

    def _start(self) -> None:
        if self._at > self._from and start_writeback(self.fileno(), self._from, self._at - self._from):
            self.started_bytes += self._at - self._from
        self._from = self._at

