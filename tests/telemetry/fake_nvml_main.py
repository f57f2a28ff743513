"""Run dlbench's CLI with the NVML test double in place of ``pynvml``: for subprocess tests and benches.

    python tests/telemetry/fake_nvml_main.py monitor --port 9400 ...

The double is configured from the environment by :func:`fake_nvml.make_nvml` (``FAKE_NVML_GPUS``,
``FAKE_NVML_UNSUPPORTED``, ``FAKE_NVML_LOST``). It is installed as the ``pynvml`` module before dlbench
is imported, so dlbench runs its real NVML code path, unchanged, against simulated GPUs. dlbench
itself has no hook for this: only a process started through this file sees the double.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fake_nvml  # noqa: E402 - imports the real pynvml first (constants, exception classes)

sys.modules["pynvml"] = fake_nvml.make_nvml()

from dlbench.cli.app import main  # noqa: E402 - after the double is in place

if __name__ == "__main__":
    main()
