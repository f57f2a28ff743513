"""The one place where user text meets a sink that interprets it.

Every user value that reaches a shell script, an ``#SBATCH`` line, a file path, or a terminal markup renderer
passes one function of this module (YAML is written by ``yaml.safe_dump`` from data, never by formatting text,
and SQL by SQLAlchemy's bound parameters, never by formatting text — so neither needs one here):

* :func:`shell_word` — any text as one shell word (POSIX single quotes), for ``VAR=…`` lines and commands in
  generated scripts;
* :func:`sbatch_value` and :func:`sbatch_line` — a value on an ``#SBATCH --flag=value`` line. sbatch reads these
  lines itself, not the shell: it splits at white space, honours quotes and backslashes, and ends the line at
  an unquoted ``#``; so a value must be one token of the characters its kind allows, checked, never quoted;
* :func:`path_inside` — a file name built from stored or user text that must stay inside its folder;
* :func:`markup` — text shown through rich, so ``[/bold]`` in a tag or an error prints as typed;
* :func:`cluster_name` — the name of the cluster a run ran on (``--cluster``, a config's ``cluster:``), recorded and
  passed to the ranks in ``$DLBENCH_CLUSTER``;
* :func:`node_name` — the name of the node a pod runs on (``$DLBENCH_NODE_NAME``, Kubernetes' ``spec.nodeName``), a
  preflight's host: a file name, a record's key and a line on the terminal;
* :func:`plain_mathtext` — text in a matplotlib figure, so ``$`` in a name or a title never starts mathtext;
* :func:`read_input_file` — a file named by the user (a config, a run record to import): a regular file of
  bounded size, never a FIFO that blocks, a device that never ends, or a directory;
* :func:`write_text_atomic` — a file dlbench writes at a user's path: whole or not at all (a temporary file
  beside it, fsynced, renamed over it), and a new one never over a file that appeared meanwhile.

Each raises :class:`~dlbench.errors.UsageError` with one sentence naming the value and the fix, and each is
fuzzed with arbitrary text by ``tests/hostile/test_safety_properties.py``.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import stat
from pathlib import Path

from dlbench.errors import UsageError

#: Sensible limits of a job's size, so that a typo is one sentence instead of a MemoryError or a value a scheduler
#: cannot hold: the largest machines have about 10,000 nodes and 8 GPUs (or a few hundred cores) per node.
MAX_NODES = 65_536
MAX_RANKS_PER_NODE = 1_024
MAX_TIME_S = 366 * 86_400  # a year: beyond any queue's limit, and far inside int64 (activeDeadlineSeconds)
MAX_SIGNAL_LEAD_S = 86_400

#: What each kind of ``#SBATCH`` value may hold (Slurm's own syntax for it, and nothing the line parser reads).
#: Names: partition, account, QOS and reservation names, comma-separated lists of them.
_NAME = r"[A-Za-z0-9_.+\-]+"
SBATCH_KINDS: dict[str, re.Pattern[str]] = {
    "name": re.compile(rf"{_NAME}(,{_NAME})*"),
    # node features with Slurm's operators: intel&gpu, [rack1*2&rack2*4], a100|h100, !slow
    "constraint": re.compile(r"[A-Za-z0-9_.,:&|*!\[\]()\-]+"),
    # a container image reference (shifter: docker:nvcr.io/nvidia/pytorch:24.05-py3)
    "image": re.compile(r"[A-Za-z0-9_.:/@+\-]+"),
    # a path on a shared filesystem; %-patterns are Slurm's, so a literal % is refused too
    "path": re.compile(r"/[A-Za-z0-9_.,:@+=/\-~]*"),
    # a log file: a path as above whose file name may hold Slurm's %-patterns (dlbench's own: slurm-%j.out)
    "log": re.compile(r"/[A-Za-z0-9_.,:@+=/\-~]*/[A-Za-z0-9_.%\-]+"),
    # a job name, built by dlbench from workload and study names
    "label": re.compile(r"[A-Za-z0-9_.,:@+=\-]+"),
    # numbers, times, array ranges, TERM@60
    "plain": re.compile(r"[A-Za-z0-9_.,:@%+=\-]+"),
}
#: The flags whose values come from users, and the kind each must be.
SBATCH_FLAGS: dict[str, str] = {
    "partition": "name", "account": "name", "qos": "name", "reservation": "name", "constraint": "constraint",
    "image": "image", "output": "log", "chdir": "path", "job-name": "label", "time": "plain", "nodes": "plain",
    "gpus-per-node": "plain", "cpus-per-task": "plain", "ntasks-per-node": "plain", "ntasks": "plain",
    "signal": "plain", "array": "plain",
}
_HOW = {
    "name": "letters, digits and _ . + - (several separated by commas)",
    "constraint": "node features with Slurm's operators & | , * ! [ ] ( )",
    "image": "an image reference of letters, digits and _ . : / @ + -",
    "path": "an absolute path of letters, digits and _ . , : @ + = / - ~ (no spaces, quotes, # or %)",
    "log": "an absolute path of letters, digits and _ . , : @ + = / - ~ (no spaces, quotes, # or %)",
    "label": "letters, digits and _ . , : @ + = -",
    "plain": "letters, digits and _ . , : @ % + = -",
}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: What rich's markup parser reads as a tag (rich.markup.RE_TAGS, without the backslashes before it), and
#: every "[" with the backslashes before it.
_TAG = re.compile(r"\[[a-z#/@][^[]*?]")
_BRACKET = re.compile(r"(\\*)(\[(?:[a-z#/@][^[]*?])?)")
_SHOWN = 80  # characters of a refused value quoted in the error


def shown(value: object) -> str:
    """``value`` as it may be quoted in a one-line error: repr (so a newline shows as ``\\n``), cut short."""
    text = repr(str(value))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "…'"


def shell_word(value: object) -> str:
    """``value`` as exactly one shell word (the shell sees the text, never code). NUL cannot be in a shell word."""
    text = str(value)
    if "\0" in text:
        raise UsageError(f"{shown(text)} holds a NUL character, which no shell script can carry; remove it.")
    return shlex.quote(text)


def sbatch_problem(flag: str, value: object) -> str | None:
    """Why ``value`` cannot be one token of ``#SBATCH --flag=value`` ("must be …"), or None when it can."""
    kind = SBATCH_FLAGS.get(flag, "plain")
    return None if SBATCH_KINDS[kind].fullmatch(str(value)) else f"it must be {_HOW[kind]} to go on an #SBATCH line"


def sbatch_value(flag: str, value: object, option: str | None = None) -> str:
    """``value`` checked as one token for ``#SBATCH --flag=value`` (see :data:`SBATCH_FLAGS`); unchanged.

    ``option`` is the name the user gave it (``--workdir``, ``launcher.partition``) for the message."""
    problem = sbatch_problem(flag, value)
    if problem:
        raise UsageError(f"{option or '--' + flag} {shown(value)} is refused: {problem}.")
    return str(value)


#: A container image reference as podman, docker and apptainer take it: ``[registry[:port]/]name[:tag][@digest]``, or an
#: apptainer ``.sif`` path. It starts with a letter, digit or ``/`` (so it can never be read as an option) and holds
#: no white space or shell characters.
IMAGE_REFERENCE = re.compile(r"[A-Za-z0-9/][A-Za-z0-9._/:@+-]{0,254}")


def image_problem(value: object) -> str | None:
    """Why ``value`` is no container image reference (``it must be …``), or None when it is one."""
    if IMAGE_REFERENCE.fullmatch(str(value)):
        return None
    return ("it must be an image reference such as localhost/dlbench:latest or registry.example.org/team/dlbench@sha256:…, "
            "starting with a letter, digit or / and without spaces")


def sbatch_line(flag: str, value: object | None = None) -> str:
    """One ``#SBATCH`` line holding exactly one option: ``#SBATCH --flag`` or ``#SBATCH --flag=value``."""
    if not re.fullmatch(r"[a-z][a-z-]*", flag):
        raise ValueError(f"not an sbatch option name: {flag!r}")  # a programming error, not user input
    return f"#SBATCH --{flag}" if value is None else f"#SBATCH --{flag}={sbatch_value(flag, value)}"


#: A cluster's name: what Slurm's ClusterName holds, and fits the store's column (128).
_CLUSTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+=\-]{0,127}")


def env_seconds(name: str, default: float, *, zero: bool = True) -> float:
    """Seconds from the environment variable ``name`` (a configurable wait or budget), else ``default``. A value that
    is not a finite number of seconds (0 or more; above 0 where ``zero`` is False) is refused in one sentence."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value > 0 or (zero and value == 0))):
        least = "(0 or more)" if zero else "above 0"
        raise UsageError(f"{name}={text!r} is not a number of seconds {least}; set it to one, e.g. "
                         f"{name}={default:g} (the default), or unset it.")
    return value


def cluster_name(value: object, option: str = "--cluster") -> str:
    """``value`` checked as a cluster name (1 to 128 letters, digits and ``_ . : @ + = -``, starting with a letter or
    digit: one word in a job script, a terminal and the store's column); unchanged."""
    if not isinstance(value, str) or not _CLUSTER.fullmatch(value):
        raise UsageError(f"{option} {shown(value)} is refused: a cluster name is 1 to 128 letters, digits and "
                         "_ . : @ + = - (starting with a letter or digit), e.g. --cluster perlmutter.")
    return value


#: A node's name as Kubernetes and DNS write it (RFC 1123: letters, digits, ``-`` and ``.``), at most 195 characters,
#: not DNS's 253: it names the preflight's ``HOST.json``, a file name :func:`path_inside` keeps to 200.
_NODE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.\-]{0,193}[A-Za-z0-9])?")


def node_name(value: object, option: str = "$DLBENCH_NODE_NAME") -> str:
    """``value`` checked as a node's host name (1 to 195 letters, digits, ``-`` and ``.``, starting and ending with a
    letter or digit, as Kubernetes' node names and DNS host names are); unchanged."""
    if not isinstance(value, str) or not _NODE.fullmatch(value):
        raise UsageError(f"{option} {shown(value)} is refused: a node name is 1 to 195 letters, digits, - and . "
                         "(starting and ending with a letter or digit), as Kubernetes' spec.nodeName gives it.")
    return value


def path_inside(root: Path, name: str, what: str = "name") -> Path:
    """``root / name`` for a single path component ``name`` that cannot leave ``root`` (no separator, no ``..``,
    no NUL, not empty, at most 200 characters)."""
    if (not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name or len(name) > 200
            or any(ord(c) < 32 for c in name)):
        raise UsageError(f"the {what} {shown(name)} cannot be used as a file name in {root}; it must be one file "
                         "name without / or control characters.")
    return root / name


def printable(text: object) -> str:
    """``text`` with every control character but newline and tab shown as an escape (``\\x1b``, ``\\r``), so stored
    text cannot move the cursor, recolour the terminal or hide what precedes it."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


def plain_mathtext(text: object) -> str:
    """``text`` for a matplotlib label, shown as typed: every ``$`` escaped. matplotlib reads a text with an even
    number of unescaped ``$`` as mathtext (a title ``cost $a$`` drew italics; ``$\\frac`` failed to draw), and
    shows ``\\$`` as ``$`` outside mathtext; other backslashes are drawn as they are."""
    return printable(text).replace("$", "\\$")


def markup(text: object) -> str:
    """``text`` for a rich markup string (rendered with ``emoji=False``: rich has no escape for ``:smile:``
    codes — tables use :class:`rich.text.Text` objects instead), shown as typed whatever follows it.

    Control characters are made visible (:func:`printable`). Before something rich's parser reads as a tag, a
    run of k backslashes becomes 2k + 1 (as ``rich.markup.escape`` does); before any other ``[`` rich drops one
    backslash, so a run there gets one more; and a backslash run at the very end is doubled and closed by an
    empty tag, because rich's own escape leaves a text ending in three backslashes turning the caller's next
    ``[bold]`` into an escaped (printed) tag."""
    shown_text = printable(text)
    escaped = _BRACKET.sub(lambda m: m.group(1) * 2 + "\\" + m.group(2) if _TAG.match(m.group(2))
                           else m.group(1) + ("\\" if m.group(1) else "") + m.group(2), shown_text)
    trailing = len(escaped) - len(escaped.rstrip("\\"))
    return escaped + "\\" * trailing + "[bold][/bold]" if trailing else escaped


def input_file_problem(info: os.stat_result, what: str, limit_bytes: int) -> str | None:
    """Why a file (its ``os.fstat``) may not be read as the user's ``what``, as the end of a sentence that names it
    ("is a FIFO, not a regular file"), or None: a user's input is a regular file of at most ``limit_bytes``."""
    if not stat.S_ISREG(info.st_mode):
        kind = ("a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "not a regular file")
        return f"is {kind}, not a regular file" if kind != "not a regular file" else "is not a regular file"
    if info.st_size > limit_bytes:
        return f"is {info.st_size:,} bytes, larger than the {limit_bytes:,} bytes a {what} may be"
    return None


def open_input_fd(path: str | Path) -> int:
    """A descriptor of ``path`` opened without blocking (a FIFO with no writer, a terminal), to be checked with
    :func:`input_file_problem` before a byte is read; OSError as ``os.open`` raises it."""
    return os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))


def read_input_file(path: str | Path, what: str, limit_bytes: int) -> bytes:
    """The bytes of the user's input file ``path``: a regular file (a link to one is followed) of at most
    ``limit_bytes``. A FIFO, a device (``/dev/zero``), a socket or a directory is one sentence at once: the
    file is opened without blocking and checked before a byte is read, and never more than the limit is read."""
    shown_path = repr(str(path))
    try:
        fd = open_input_fd(path)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {shown_path} ({exc.strerror or exc}); check the path.") from None
    try:
        problem = input_file_problem(os.fstat(fd), what, limit_bytes)
        if problem:
            raise UsageError(f"{what} {shown_path} {problem}" + ("; give the right file." if "bytes" in problem else ""))
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit_bytes + 1)  # a file growing meanwhile is still read no further
    except OSError as exc:
        raise UsageError(f"cannot read {what} {shown_path} ({exc.strerror or exc}); check the path.") from None
    finally:
        os.close(fd)
    if len(data) > limit_bytes:
        raise UsageError(f"{what} {shown_path} is larger than the {limit_bytes:,} bytes a {what} may be; give the right file.")
    return data


def write_text_atomic(path: str | Path, text: str, *, new: bool) -> None:
    """``text`` as the content of ``path``, whole or not at all: written to a temporary file in the same
    directory, fsynced, then renamed over ``path`` (``new``: linked to it, which fails if a file appeared there
    meanwhile: a new file never replaces one) and the directory fsynced. A write that fails (a full disk) leaves
    ``path`` as it was and is one sentence; a link ``path`` is followed (the link stays)."""
    import tempfile  # only commands that write a user's file need it

    target = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with open(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if new:
            os.link(tmp, target)  # exclusive: fails with FileExistsError over any file
        else:
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))  # the file keeps its permissions
            os.replace(tmp, target)
    except FileExistsError:
        raise UsageError(f"{str(path)!r} appeared while dlbench was writing it; it is left as it is: run again.") from None
    except OSError as exc:
        raise UsageError(f"could not write {str(path)!r} ({exc.strerror or exc}); it is left as it was: free space "
                         "there (or fix the permissions) and run again.") from None
    finally:
        with contextlib.suppress(OSError):  # renamed already, or linked: the temporary name goes
            os.unlink(tmp)
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
