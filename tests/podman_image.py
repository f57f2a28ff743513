"""The container tests' image (the ``container_image`` fixture of tests/conftest.py, for tests/container and the
multi-node container test in tests/cluster): built once per session from this checkout over a dependency layer that is built
once per machine and dependency set (``dlbench.api.image``: the layer's tag is a hash of the requirements, the
base and the Containerfile), so a session pays for dlbench's own thin layer only (seconds). Skipped, with the
reason, where podman cannot run a container here."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

#: The CPU build of torch (small): the host's CUDA build would make a 5 GB image. The stacks then differ,
#: which the comparison must say (a test below checks that it does).
TEST_TORCH = "torch==2.13.0+cpu"
#: One tag per pytest process (each xdist worker builds its own thin layer; the dependency layer is shared):
#: a worker never sees the image change under its tests. Removed when the session ends.
TEST_TAG = f"localhost/dlbench-test:session-{os.getpid()}"


def podman_problem() -> str | None:
    """Why podman cannot run a container here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc; .ci/run does)"
    out = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], capture_output=True, text=True,
                         timeout=60, check=False)
    if out.returncode != 0:
        return f"podman cannot start here: {(out.stderr.strip().splitlines() or ['no message'])[-1]}"
    return None


def build_test_image(tmp_path_factory) -> str:
    """The tag of an image holding this checkout's dlbench and the CPU torch (skips where podman cannot run);
    :func:`remove_test_image` removes it."""
    why = podman_problem()
    if why:
        pytest.skip(why)
    from dlbench.api.image import build_image

    lock = Path(tmp_path_factory.getbasetemp()).parent / "dlbench-test-image.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # two pytest sessions on one machine build one at a time
        built = build_image(tag=TEST_TAG, torch_requirement=TEST_TORCH)
    return built.tag


def remove_test_image(tag: str) -> None:
    subprocess.run(["podman", "rmi", tag], capture_output=True, check=False, timeout=120)
