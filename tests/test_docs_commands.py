"""The README and docs/ cannot drift from the tool (issue 24).

Convention (also in docs/testing.md, "The documentation commands"):

* Every line ``$ dlbench …`` in any fenced block of README.md or docs/**/*.md is **checked** (fast): its
  subcommand path must exist and every ``--option`` it names must be an option of that command.
* Lines ``$ dlbench …`` in ```` ```console ```` blocks are also **run** (slow tier), in order, in a temp
  directory with a fresh store (``DLBENCH_DB``); each must exit 0.
* An HTML comment right before a console block adjusts it:
  ``<!-- docs-test: replace "OLD" "NEW" -->`` (repeatable) substitutes text in its commands, e.g. to
  shrink sizes; ``<!-- docs-test: skip REASON -->`` shows the block without running it (clusters, GPUs).
* ``DLBENCH_DOCS_TINY_ARGS`` (default: a tiny LSTM) is what ``{tiny}`` in a ``replace`` expands to.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TINY = os.environ.get("DLBENCH_DOCS_TINY_ARGS", "-p seq_len=4 -p input_size=8 -p hidden_size=8 -b 4 --steps 2 --warmup 1 --threads 1")
FENCE = re.compile(r"^(`{3,})(\w*)\s*$")
DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(replace|skip)\s*(.*?)\s*-->")
SHELL_END = {"|", ">", ">>", "&&", ";", "||", "2>", "2>&1"}


@dataclass
class Block:
    page: Path
    line: int
    language: str
    commands: list[str]
    replacements: list[tuple[str, str]] = field(default_factory=list)
    skip: str | None = None


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` with their ``$ dlbench`` lines and the directives before them."""
    out, pending, current = [], {"replacements": [], "skip": None}, None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        fence = FENCE.match(line.strip())
        if current is None:
            directive = DIRECTIVE.search(line)
            if directive and directive.group(1) == "skip":
                pending["skip"] = directive.group(2) or "marked skip"
            elif directive:
                old, new = shlex.split(directive.group(2))
                pending["replacements"].append((old, new.replace("{tiny}", TINY)))
            elif fence:
                current = Block(page, number, fence.group(2), [], **pending)
                pending = {"replacements": [], "skip": None}
        elif fence and not fence.group(2):
            out.append(current)
            current = None
        elif current.commands and current.commands[-1].endswith("\\"):
            current.commands[-1] = current.commands[-1][:-1] + " " + line.strip()  # a continued line
        elif line.lstrip().startswith("$ dlbench "):
            current.commands.append(line.lstrip()[2:])
    return out


def words(command: str) -> list[str]:
    """The command's arguments up to a comment, a pipe or a redirection."""
    text = re.split(r"\s+#\s", command, maxsplit=1)[0]
    try:
        argv = shlex.split(text)
    except ValueError:  # an unbalanced quote in prose-like synopsis: plain words are enough to check
        argv = text.split()
    for i, word in enumerate(argv):
        if word in SHELL_END or word.startswith((">", "2>")):
            return argv[:i]
        if word.endswith(";"):  # "dlbench jobs; dlbench jobs logs ID": the first command
            return argv[:i] + [word[:-1]]
    return argv


def _click_app():
    import typer

    from dlbench.cli.app import app

    return typer.main.get_command(app)


def problems(command: str, root) -> list[str]:
    """What in ``command`` the CLI does not have: an unknown subcommand or option."""
    argv = words(command)[1:]
    node, path = root, ["dlbench"]
    while hasattr(node, "commands") and argv and not argv[0].startswith("-"):
        child = node.commands.get(argv[0])
        if child is None:
            if argv[0].startswith(("[", "<")) or argv[0].isupper():
                return []  # a synopsis line: "dlbench suite [quick|standard]"
            return [f"'{' '.join(path)}' has no subcommand {argv[0]!r}"]
        node, path, argv = child, path + [argv.pop(0)], argv
    known = {opt for param in node.params for opt in (*param.opts, *param.secondary_opts)} | {"--help", "--debug"}
    return [f"'{' '.join(path)}' has no option {word.split('=')[0]!r}"
            for word in argv if word.startswith("--") and word.split("=")[0] not in known and word != "--"]


def shown_commands() -> list[tuple[str, str]]:
    return [(f"{b.page.relative_to(ROOT)}:{b.line}", c) for page in PAGES for b in blocks(page) for c in b.commands]


def test_every_documented_command_and_option_exists():
    root = _click_app()
    found = shown_commands()
    assert len(found) > 50  # the pages were read
    wrong = [f"{where}: {c}: {p}" for where, c in found for p in problems(c, root)]
    assert not wrong, "\n".join(wrong)


def test_the_checker_catches_drift():
    root = _click_app()
    assert problems("dlbench show 3f2a1c --json", root) == []
    assert problems("dlbench results --format csv > runs.csv  # export", root) == []
    assert problems("dlbench shwo 3f2a1c", root) == ["'dlbench' has no subcommand 'shwo'"]
    assert problems("dlbench run lstm --stepz 3", root) == ["'dlbench run' has no option '--stepz'"]


def console_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.language == "console" and b.commands]


@pytest.mark.slow
@pytest.mark.parametrize("block", console_blocks(), ids=lambda b: f"{b.page.relative_to(ROOT)}:{b.line}")
def test_console_blocks_run_as_shown(block, tmp_path):
    if block.skip:
        pytest.skip(f"{block.page.name}:{block.line}: {block.skip}")
    env = dict(os.environ, DLBENCH_DB=str(tmp_path / "runs.db"), OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for command in block.commands:
        for old, new in block.replacements:
            command = command.replace(old, new)
        argv = words(command)
        proc = subprocess.run([sys.executable, "-m", "dlbench", *argv[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{block.page.name}:{block.line}: {command}\n{proc.stderr[-3000:]}"
