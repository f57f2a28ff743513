"""The torch-free checks: what the host's device nodes say about ``--device`` without asking torch."""

import pytest

from dlbench.api.checks import device_type, gpu_driver_present
from dlbench.errors import UsageError


def test_device_type_from_the_driver_nodes(tmp_path):
    assert device_type("cpu", gpu_present=True) == "cpu"
    assert device_type("auto", gpu_present=False) == "cpu"
    assert device_type("auto", gpu_present=True) is None  # torch says whether the GPU is usable
    assert device_type("cuda", gpu_present=True) == "cuda"
    with pytest.raises(UsageError, match="--device cuda was asked.*use --device cpu"):
        device_type("cuda", gpu_present=False)


def test_a_driver_node_is_a_path_that_exists(tmp_path):
    node = tmp_path / "nvidiactl"
    assert not gpu_driver_present((str(node),))
    node.touch()
    assert gpu_driver_present((str(tmp_path / "absent"), str(node)))
