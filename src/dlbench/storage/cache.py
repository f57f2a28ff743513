"""The page cache between a data set and its reader: drop it (cold reads), and measure what stays.

``posix_fadvise(POSIX_FADV_DONTNEED)`` asks the kernel to drop a file's clean cached pages; it needs no
root (unlike ``echo 3 > /proc/sys/vm/drop_caches``), and works per file. Dirty pages are written back
first (``fdatasync``) so they can go too. What it cannot drop is measured (``mincore`` on a read-only
map, before and after) and said: pages other processes keep mapped or locked, and every cache outside
this kernel — a file server's or storage target's (NFS, Lustre OSS), GPFS's pagepool (its own cache,
which ignores fadvise), a disk controller's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CANNOT_DROP = ("pages other processes keep mapped or locked, and caches outside this kernel: a file server's or "
               "storage target's (NFS, Lustre), GPFS's pagepool, a disk controller's")

_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_bytes(path: Path) -> int | None:
    """Bytes of ``path`` in this node's page cache now (``mincore``); None where it cannot be asked."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, _MAP_FAILED):
            return None
        try:
            pages = (size + _PAGE - 1) // _PAGE
            vector = (ctypes.c_ubyte * pages)()
            if _libc.mincore(address, size, vector) != 0:
                return None
            resident = sum(1 for flag in bytes(vector) if flag & 1)  # bytes(): one C-level copy, then a fast scan
        finally:
            _libc.munmap(address, size)
        return min(size, resident * _PAGE)
    finally:
        os.close(fd)


def drop_from_cache(path: Path) -> None:
    """Write back, then drop ``path``'s pages from this node's page cache (no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            os.fdatasync(fd)  # dirty pages cannot be dropped until written
        except OSError:
            pass  # a file system without fdatasync on read-only descriptors: the drop does what it can
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_cache(paths: Iterable[Path]) -> dict[str, Any]:
    """Drop every file of ``paths`` from the page cache; what was cached before and still is after."""
    before = after = 0
    known = True
    files = 0
    for path in paths:
        files += 1
        was = resident_bytes(path)
        drop_from_cache(path)
        now = resident_bytes(path)
        known = known and was is not None and now is not None
        before, after = before + (was or 0), after + (now or 0)
    return {"dropped": True, "files": files, "method": "posix_fadvise(POSIX_FADV_DONTNEED) per file",
            "resident_before_bytes": before if known else None, "resident_after_bytes": after if known else None,
            "cannot_drop": CANNOT_DROP}


def cache_state(paths: Iterable[Path]) -> dict[str, Any]:
    """How much of ``paths`` is cached now (a warm or as-is read says what it started from)."""
    sizes = [resident_bytes(p) for p in paths]
    return {"dropped": False, "files": len(sizes),
            "resident_before_bytes": None if None in sizes else sum(s or 0 for s in sizes)}
