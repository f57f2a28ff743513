"""The MLPerf results folder: paths and the system description, as pure functions.

Layout (as in MLCommons' results repositories, one submitter's folder)::

    OUT/results/<system>/<benchmark>/result_<i>.txt    one mllog result log per run
    OUT/systems/<system>.json                          the machine, for the system-description checker
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from dlbench import strict_json
from dlbench.errors import UsageError

_RESULT_NAME = re.compile(r"^\.?result_(\d+)\.txt(?:\.pending)?$")  # a run's log, or its reservation
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """``text`` as a file-name component: runs of other characters become one '_'."""
    return _UNSAFE.sub("_", text).strip("._") or "system"


def check_system_name(name: str) -> str:
    """A user's ``--system`` must already be a safe file name: it becomes a folder and a file."""
    if not name or safe_name(name) != name:
        raise UsageError(
            f"--system {name!r} must be a plain name of letters, digits, '.', '_' or '-' "
            f"(it names a folder); for example --system {safe_name(name)!r}."
        )
    return name


def default_system_name(env: dict[str, Any], device_type: str, nproc: int = 1) -> str:
    """``<host>_<n>x<accelerator>`` on GPUs (``node7_8xNVIDIA_A100-SXM4-80GB``), ``<host>_cpu`` else."""
    host = safe_name(str(env.get("hostname") or "host").split(".")[0])
    gpus = env.get("gpus") or []
    if device_type == "cuda" and gpus:
        return f"{host}_{nproc}x{safe_name(gpus[0].get('name', 'gpu'))}"
    return f"{host}_cpu"


def submission_root(out: Path) -> Path:
    """The folder that holds ``results/`` and ``systems/``: ``--out results/`` names the results folder itself
    (where a reader expects the logs), so its parent is the root, never ``results/results/``."""
    return out.parent if out.name == "results" else out


def result_path(out: Path, system: str, benchmark: str, index: int) -> Path:
    return out / "results" / system / benchmark / f"result_{index}.txt"


def next_result_index(out: Path, system: str, benchmark: str) -> int:
    """The first index after the runs already in the folder (and those reserved by jobs not yet
    collected: :func:`reserve_result`), so that repeated invocations add runs."""
    folder = out / "results" / system / benchmark
    taken = [int(m.group(1)) for p in (folder.iterdir() if folder.is_dir() else ()) if (m := _RESULT_NAME.match(p.name))]
    return max(taken) + 1 if taken else 0


def reserve_result(path: Path) -> None:
    """Reserve result file ``path`` for a submitted run (a hidden ``.result_<i>.txt.pending`` beside it)
    until :func:`file_result` writes it; a reservation already there is a ``UsageError``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(_pending(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        raise UsageError(f"{path} is reserved by another dlbench submitting into {path.parents[3]}; "
                         "run again (the next free index is taken).") from None


def release_result(path: Path) -> None:
    _pending(path).unlink(missing_ok=True)


def file_result(path: Path, text: str) -> Path:
    """Write a submitted run's result log (from its job's rank 0) into the folder, atomically, and
    never over another run's: if ``path`` is taken (its reservation was lost), the next free index.
    Returns where it went."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    return file_log(path, tmp)


def file_log(path: Path, log: Path) -> Path:
    """Move the finished result log ``log`` (a file on the folder's filesystem) to ``path`` as :func:`file_result`
    files a text: atomically, never over another run's, and release ``path``'s reservation. Returns where it went."""
    out, system, benchmark = path.parents[3], path.parents[1].name, path.parent.name
    target = path
    while True:
        try:
            os.link(log, target)  # fails if the name exists: an atomic "create, never replace"
            break
        except FileExistsError:
            target = result_path(out, system, benchmark, next_result_index(out, system, benchmark))
    log.unlink()
    release_result(path)
    return target


def _pending(path: Path) -> Path:
    return path.with_name(f".{path.name}.pending")


def system_description(
    env: dict[str, Any], system: str, device_type: str, device_name: str, nproc: int = 1,
    submitter: str = "dlbench", division: str = "open", notes: str | None = None,
) -> dict[str, Any]:
    """The MLPerf system description (every field MLCommons' system_desc_checker requires) filled
    from dlbench's environment capture; unknown fields are empty strings, and the full capture
    rides along under ``dlbench_env``. Values are strings, as in MLCommons' own files."""
    cpu = env.get("cpu") or {}
    gpus = env.get("gpus") or []
    torch_info = env.get("torch") or {}
    on_gpu = device_type == "cuda" and bool(gpus)
    memory_gb = f"{(cpu.get('memory_bytes') or 0) / 2**30:.0f} GB" if cpu.get("memory_bytes") else ""
    container = env.get("container") or {}
    software = [f"python {(env.get('python') or {}).get('version', '')}", f"dlbench {env.get('dlbench', '')}"]
    if torch_info.get("cuda") and on_gpu:
        software.append(f"cuda {torch_info['cuda']}")
    if container.get("in_container"):
        software.append(f"container {container.get('runtime')}{' ' + container['image'] if container.get('image') else ''}")
    fields = {
        "submitter": submitter,
        "division": division,
        "status": "Research, Development, or Internal (RDI)",
        "system_name": system,
        "number_of_nodes": 1,
        "host_processors_per_node": 1,
        "host_processor_model_name": cpu.get("model", ""),
        "host_processor_core_count": cpu.get("physical_cores") or "",
        "host_processor_vcpu_count": cpu.get("logical_cores") or "",
        "host_processor_frequency": "",
        "host_processor_caches": "",
        "host_processor_interconnect": "",
        "host_memory_capacity": memory_gb,
        "host_storage_type": "",
        "host_storage_capacity": "",
        "host_networking": "",
        "host_networking_topology": "",
        "host_memory_configuration": "",
        "accelerators_per_node": nproc if on_gpu else 0,
        "accelerator_model_name": device_name if on_gpu else "",
        "accelerator_host_interconnect": "",
        "accelerator_frequency": "",
        "accelerator_on-chip_memories": "",
        "accelerator_memory_configuration": "",
        "accelerator_memory_capacity": f"{gpus[0].get('memory_total_bytes', 0) / 2**30:.0f} GB" if on_gpu and gpus[0].get("memory_total_bytes") else "",
        "accelerator_interconnect": "",
        "accelerator_interconnect_topology": "",
        "cooling": "",
        "hw_notes": "" if on_gpu else f"CPU only: {device_name}",
        "framework": f"PyTorch {torch_info.get('version', '')}".strip(),
        "other_software_stack": ", ".join(software),
        "operating_system": (env.get("platform") or {}).get("platform", ""),
        "sw_notes": notes or "dlbench MLPerf-style time-to-train task (open division: shrunken models and generated data)",
    }
    # MLCommons' files hold every field as a string, and its checker joins them as strings.
    return {key: str(value) for key, value in fields.items()} | {"dlbench_env": env}


def write_system(out: Path, system: str, description: dict[str, Any]) -> Path:
    """``out/systems/<system>.json``: a system description (:func:`system_description`)."""
    path = out / "systems" / f"{system}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(strict_json.dumps(description, indent=2, default=str) + "\n")
    return path
