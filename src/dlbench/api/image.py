"""``dlbench image build``: an image holding this checkout's dlbench and a PyTorch (deploy/container/Containerfile).

Three steps, each skipped when its result exists already:

1. **the base** — the user's ``--base`` (an NGC or site image), else ``localhost/dlbench-base:bookworm`` made
   offline: ``debootstrap --variant=minbase --include=python3,python3-venv bookworm`` from the Debian mirror in
   apt's sources, imported with ``podman import`` (no registry needed);
2. **the dependencies** — ``localhost/dlbench-deps:KEY``, KEY a hash of the requirements (pyproject's, the torch
   requirement pinned), the base's id and the Containerfile: built once per machine and dependency set;
3. **dlbench** — this checkout's wheel installed over it (``--no-deps``, seconds), tagged ``--tag``.

The wheels come from the host's pip (its index and find-links configuration), so the build needs no network
beyond what ``pip install`` here needs.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import dlbench
from dlbench.errors import UsageError
from dlbench.safety import image_problem, shown

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser from PyPI
    import tomli as tomllib

log = logging.getLogger("dlbench")

BASE_IMAGE = "localhost/dlbench-base:bookworm"
DEPS_REPOSITORY = "localhost/dlbench-deps"
CONTAINERFILE = Path(__file__).resolve().parent.parent / "data" / "container" / "Containerfile"
#: Seconds a build step may take (the CUDA PyTorch's wheels are several GB).
BUILD_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class BuiltImage:
    """What :func:`build_image` made: the tag, its digest, the base and dependency images, what was built now."""

    tag: str
    digest: str | None
    base: str
    deps_image: str
    torch: str
    built: tuple[str, ...]
    seconds: float

    def as_dict(self) -> dict:
        return asdict(self)


def default_tag() -> str:
    return f"localhost/dlbench:{dlbench.__version__}"


def host_torch_requirement() -> str:
    """The host's own torch, pinned (the same build inside is what a container ÷ bare-metal ratio needs)."""
    try:
        return f"torch=={importlib.metadata.version('torch')}"
    except importlib.metadata.PackageNotFoundError:
        raise UsageError("no torch is installed here to copy into the image; give one with --torch, e.g. "
                         "--torch 'torch==2.13.0+cpu'.") from None


def checkout_root() -> Path:
    """The source tree dlbench runs from (an editable install of a checkout); ``UsageError`` for a wheel."""
    root = Path(dlbench.__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file() or not (root / "src" / "dlbench").is_dir():
        raise UsageError("dlbench image build packs the checkout dlbench runs from, and this dlbench is an installed "
                         "wheel; run it from a checkout ('pip install -e .'), or build deploy/container/Containerfile "
                         "with your own tools.")
    return root


def torch_requirement_problem(text: str) -> str | None:
    """Why ``text`` is not one PEP 508 requirement of torch (it becomes a line of the image's requirements.txt, where
    a newline or a leading dash would be a pip option such as --index-url); None when it is one."""
    from packaging.requirements import InvalidRequirement, Requirement  # packaging: only to check --torch

    if any(not c.isprintable() for c in text) or text.lstrip().startswith("-"):
        return "it holds a line break, a control character or a pip option"
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        return f"it is not a requirement ({str(exc).splitlines()[0]})"
    if requirement.name.lower() != "torch":
        return f"it names {requirement.name!r}, not torch"
    if requirement.url:
        return "it installs from a URL"
    return None


def requirements(root: Path, torch_requirement: str) -> list[str]:
    """pyproject's dependencies with ``torch`` replaced by ``torch_requirement``."""
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    return [torch_requirement if re.match(r"torch\b(?!vision)", d) else d for d in deps]


def deps_key(reqs: list[str], base_id: str, containerfile: str) -> str:
    """The dependency image's tag: it changes when any requirement, the base or the Containerfile does."""
    text = json.dumps({"requirements": reqs, "base": base_id, "containerfile": containerfile}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_image(tag: str | None = None, base: str | None = None, torch_requirement: str | None = None,
                runtime: str = "podman") -> BuiltImage:
    """Build (or reuse) the three layers described in the module docstring; returns what was made."""
    started_s = time.monotonic()
    tag = tag or default_tag()
    for flag, value in (("--tag", tag), ("--base", base)):
        if value is not None and image_problem(value):
            raise UsageError(f"{flag} {shown(value)} is refused: {image_problem(value)}.")
    if torch_requirement is not None:
        problem = torch_requirement_problem(torch_requirement)
        if problem:
            raise UsageError(f"--torch {shown(torch_requirement)} is refused: {problem}; give one requirement of torch, "
                             "e.g. --torch 'torch==2.13.0+cpu'.")
    if shutil.which(runtime) is None:
        raise UsageError(f"{runtime} is not on PATH; install it (Debian: apt-get install podman runc) to build images.")
    root = checkout_root()
    built: list[str] = []
    if base is None:
        base = BASE_IMAGE
        if not image_exists(runtime, base):
            log.info("dlbench: no --base given: building %s offline with debootstrap (about a minute) …", base)
            build_debian_base(runtime, base)
            built.append(base)
    elif not image_exists(runtime, base):
        raise UsageError(f"--base {base} is not in {runtime}'s image store; pull it first ({runtime} pull {base}).")
    torch_requirement = torch_requirement or host_torch_requirement()
    reqs = requirements(root, torch_requirement)
    containerfile = CONTAINERFILE.read_text()
    deps_image = f"{DEPS_REPOSITORY}:{deps_key(reqs, image_id(runtime, base), containerfile)}"
    with tempfile.TemporaryDirectory(prefix="dlbench-image-") as tmp:
        context = Path(tmp)
        wheels = context / "wheels"
        wheels.mkdir()
        _pip_wheel(["--no-deps", "--no-build-isolation", str(_source_copy(root, context / "src"))], wheels)
        (wheels / "requirements.txt").write_text("\n".join(reqs) + "\n")
        (context / "Containerfile").write_text(containerfile)
        if not image_exists(runtime, deps_image):
            log.info("dlbench: collecting the dependencies' wheels (%s) and building %s …", torch_requirement, deps_image)
            _pip_wheel(["-r", str(wheels / "requirements.txt")], wheels)
            _build(runtime, ["--target", "deps", "--build-arg", f"BASE={base}", "-t", deps_image], context)
            built.append(deps_image)
        replaced = image_id(runtime, tag) if image_exists(runtime, tag) else None
        _build(runtime, ["--build-arg", f"DEPS={deps_image}", "-t", tag], context)
        built.append(tag)
    if replaced and replaced != image_id(runtime, tag):  # the image this tag named before: no name left, a GB of disk
        _run([runtime, "rmi", replaced], check=False)  # refused (kept) while a container or another tag uses it
    return BuiltImage(tag=tag, digest=image_id(runtime, tag), base=base, deps_image=deps_image, torch=torch_requirement,
                      built=tuple(built), seconds=round(time.monotonic() - started_s, 1))


def image_exists(runtime: str, image: str) -> bool:
    return _run([runtime, "image", "inspect", "--format", "{{.Id}}", image], check=False).returncode == 0


def image_id(runtime: str, image: str) -> str:
    return _run([runtime, "image", "inspect", "--format", "{{.Id}}", image]).stdout.strip()


def debian_mirror(sources: list[Path] | None = None) -> str:
    """The Debian mirror apt uses here (``deb URL suite`` lines or deb822 ``URIs:``), for debootstrap."""
    files = sources if sources is not None else [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in files:
        text = path.read_text(errors="replace") if path.is_file() else ""
        for url in re.findall(r"^(?:deb\s+(?:\[[^\]]*\]\s+)?|URIs:\s*)(\S+)", text, flags=re.M):
            if url.rstrip("/").endswith("/debian"):
                return url
    raise UsageError("no Debian mirror found in /etc/apt/sources.list*, which the offline base needs; give a base "
                     "image with --base (any image with python3 and python3-venv).")


def build_debian_base(runtime: str, image: str, mirror: str | None = None) -> None:
    """Debian bookworm (minbase, python3 and its venv module) by debootstrap, imported as ``image``."""
    if shutil.which("debootstrap") is None:
        raise UsageError("debootstrap is not on PATH, which the offline base needs (apt-get install debootstrap); or "
                         "give a base image with --base.")
    with tempfile.TemporaryDirectory(prefix="dlbench-rootfs-", dir="/var/tmp") as tmp:
        _run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv", "bookworm", tmp,
              mirror or debian_mirror()], timeout_s=BUILD_TIMEOUT_S)
        tar = subprocess.Popen(["tar", "-C", tmp, "-c", "."], stdout=subprocess.PIPE)
        try:
            _run([runtime, "import", "-", image], stdin=tar.stdout, timeout_s=BUILD_TIMEOUT_S)
        finally:
            tar.stdout.close()
            tar.wait()


def _source_copy(root: Path, dest: Path) -> Path:
    """What the wheel is built from, copied: building in the checkout would leave build/ there."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (root / name).is_file():
            shutil.copy2(root / name, dest / name)
    shutil.copytree(root / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest


def _pip_wheel(args: list[str], wheels: Path) -> None:
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), *args], timeout_s=BUILD_TIMEOUT_S)


def _build(runtime: str, args: list[str], context: Path) -> None:
    # --no-cache: the wheels come in through a bind mount, which is no part of the layer cache's key (a cached
    # layer would hold another dlbench or torch); the dependency layer is cached by its own tag instead
    _run([runtime, "build", "-q", "--no-cache", "-f", str(context / "Containerfile"), *args, str(context)], timeout_s=BUILD_TIMEOUT_S)


def _run(argv: list[str], check: bool = True, timeout_s: float = 120.0, stdin=None) -> subprocess.CompletedProcess:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False, stdin=stdin)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{' '.join(argv[:3])} … did not end within {timeout_s:.0f} s.") from None
    if check and out.returncode != 0:
        why = (out.stderr.strip().splitlines() or out.stdout.strip().splitlines() or ["no message"])[-1][:300]
        raise UsageError(f"{' '.join(argv[:3])} … failed: {why}")
    return out
