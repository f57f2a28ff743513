"""The README and docs/ cannot drift from the tool (issue 24).

Convention (also in docs/testing.md, "The documentation commands"):

* Every line ``$ dlbench …`` in any fenced block of README.md or docs/**/*.md is **checked** (fast): its
  subcommand path must exist and every ``--option`` it names must be an option of that command (with ``--exec``,
  the words after ``--`` are the program's own, not checked).
* Every such line is also **run** (slow tier), whatever the block's language: the lines of a block in
  order, in a temp directory with a fresh store (``DLBENCH_DB``); each must exit 0. They run in this
  process (``dlbench.cli.app.main``): torch is imported once, not once a line. ``python`` on PATH is
  the test's interpreter (a study's command, a launcher's ranks). ``> FILE`` after a command
  writes its stdout to FILE; ``dlbench a; dlbench b`` is two commands.
* HTML comments right before a block adjust it (each repeatable):

  - ``<!-- docs-test: replace "OLD" "NEW" -->`` substitutes text in its commands (and in a ``file``
    block's text), e.g. to shrink sizes. In NEW, ``{tiny}`` is ``DLBENCH_DOCS_TINY_ARGS`` (default: a
    tiny LSTM), ``{run_id}`` the newest run in the block's store when the command runs, ``{port}`` a free
    loopback port (one per block), ``{root}`` the repository (for paths such as ``tests/data/…``),
    ``{job_id}`` the newest job dlbench submitted from the block;
  - ``<!-- docs-test: skip REASON -->`` shows the block without running it; ``<!-- docs-test: skip-line
    "TEXT" REASON -->`` only its commands containing TEXT. The reason names what this machine lacks (a
    GPU, a multi-node cluster, a Kubernetes API, the network);
  - ``<!-- docs-test: exit "TEXT" CODE[,CODE] -->``: the command containing TEXT must exit CODE (a
    documented refusal or failure; several codes where a tiny run's noise decides, as a CI gate's verdict);
  - ``<!-- docs-test: serve "TEXT" -->``: the command containing TEXT serves Prometheus metrics until
    stopped: it runs as a process (``--host 127.0.0.1 --port PORT`` appended), must answer on
    ``/metrics``, and must exit 0 on Ctrl-C (SIGINT);
  - ``<!-- docs-test: setup "dlbench …" -->``: a command run before the block's own (what the reader's
    store would hold already, e.g. runs for a report);
  - ``<!-- docs-test: cluster slurm -->``: the block's commands submit to a real one-node Slurm started
    for this file (``tests/launch/slurm_cluster.py``);
  - ``<!-- docs-test: file NAME -->``: the block's text is written to NAME in the directory of every
    block of the page that runs (a study or config file the commands read).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from launch.slurm_cluster import free_port

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TINY = os.environ.get("DLBENCH_DOCS_TINY_ARGS", "-p seq_len=4 -p input_size=8 -p hidden_size=8 -b 4 --steps 2 --warmup 1 --threads 1")
FENCE = re.compile(r"^(`{3,})(\w*)\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:\s*(replace|skip-line|skip|exit|serve|file|setup|cluster)\b\s*(.*?)\s*-->\s*$")
QUOTED_THEN_REST = re.compile(r'"([^"]*)"\s*(.*)')
SHELL_END = {"|", ">", ">>", "&&", ";", "||", "2>", "2>&1"}
NEXT_COMMAND = re.compile(r";\s+(?=dlbench\s)")  # "dlbench jobs; dlbench jobs logs ID"


@dataclass
class Block:
    page: Path
    line: int
    language: str
    commands: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    replacements: list[tuple[str, str]] = field(default_factory=list)
    skip: str | None = None
    skip_lines: list[tuple[str, str]] = field(default_factory=list)
    exits: list[tuple[str, set[int]]] = field(default_factory=list)
    serves: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    file: str | None = None
    cluster: str | None = None

    def expected_exit(self, command: str) -> set[int]:
        return next((codes for text, codes in self.exits if text in command), {0})

    def skipped_because(self, command: str) -> str | None:
        return next((reason for text, reason in self.skip_lines if text in command), None)


def _directive(kind: str, argument: str, pending: dict) -> None:
    """Adds one ``docs-test`` directive to the settings of the block that follows."""
    if kind == "skip":
        pending["skip"] = argument or "marked skip"
    elif kind in ("file", "cluster"):
        pending[kind] = argument
    elif kind == "replace":
        old, new = shlex.split(argument)
        pending.setdefault("replacements", []).append((old, new.replace("{tiny}", TINY)))
    elif kind == "setup":
        pending.setdefault("setup", []).append(shlex.split(argument)[0].replace("{tiny}", TINY))
    else:  # skip-line "TEXT" REASON, exit "TEXT" CODE, serve "TEXT": the rest is prose, quotes and all
        text, rest = QUOTED_THEN_REST.match(argument).groups()
        if kind == "skip-line":
            pending.setdefault("skip_lines", []).append((text, rest or "marked skip"))
        elif kind == "exit":
            pending.setdefault("exits", []).append((text, {int(code) for code in rest.split(",")}))
        else:
            pending.setdefault("serves", []).append(text)


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` with their ``$ dlbench`` lines and the directives before them."""
    out, pending, current = [], {}, None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        fence = FENCE.match(line.strip())
        if current is None:
            directive = DIRECTIVE.search(line)
            if directive:
                _directive(directive.group(1), directive.group(2), pending)
            elif fence:
                current, pending = Block(page, number, fence.group(2), **pending), {}
        elif fence and not fence.group(2):
            out.append(current)
            current = None
        elif current.commands and current.commands[-1].endswith("\\"):
            current.commands[-1] = current.commands[-1][:-1] + " " + line.strip()  # a continued line
        else:
            current.text.append(line)
            if line.lstrip().startswith("$ dlbench "):
                current.commands.extend(NEXT_COMMAND.split(line.lstrip()[2:]))
    return out


def split_shell(command: str) -> tuple[list[str], str | None]:
    """The command's arguments up to a comment, a pipe or a redirection, and the file of ``> FILE`` if any."""
    text = re.split(r"\s+#\s", command, maxsplit=1)[0]
    try:
        argv = shlex.split(text)
    except ValueError:  # an unbalanced quote in prose-like synopsis: plain words are enough to check
        argv = text.split()
    for i, word in enumerate(argv):
        if word == ">" and i + 1 < len(argv):
            return argv[:i], argv[i + 1]
        if word in SHELL_END or word.startswith((">", "2>")):
            return argv[:i], None
    return argv, None


def words(command: str) -> list[str]:
    """The command's arguments up to a comment, a pipe or a redirection."""
    return split_shell(command)[0]


def _click_app():
    import typer

    from dlbench.cli.app import app

    return typer.main.get_command(app)


def problems(command: str, root) -> list[str]:
    """What in ``command`` the CLI does not have: an unknown subcommand or option (what follows ``--`` after
    ``--exec`` is the user's program and its own options, as dlbench.cli.app.split_program reads it)."""
    from dlbench.cli.app import split_program

    argv = split_program(words(command)[1:])[0]
    node, path = root, ["dlbench"]
    while hasattr(node, "commands") and argv and not argv[0].startswith("-"):
        child = node.commands.get(argv[0])
        if child is None:
            if argv[0].startswith(("[", "<")) or argv[0].isupper():
                return []  # a synopsis line: "dlbench suite [quick|standard]"
            return [f"'{' '.join(path)}' has no subcommand {argv[0]!r}"]
        node, path, argv = child, path + [argv.pop(0)], argv
    known = {opt for param in node.params for opt in (*param.opts, *param.secondary_opts)} | {"--help", "--debug"}
    argv = argv[:argv.index("--")] if "--exec" in argv and "--" in argv else argv  # after '--': the program's own
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


def test_the_runner_reads_directives_and_shell_words(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('<!-- docs-test: replace "--steps 20" "{tiny}" -->\n<!-- docs-test: exit "shwo" 2 -->\n'
                    '<!-- docs-test: skip-line "--nproc 8" needs 8 GPUs -->\n```text\n'
                    "$ dlbench run lstm --steps 20 > out.txt   # a comment\n$ dlbench shwo; dlbench run x --nproc 8\n"
                    "some output\n```\n")
    [block] = blocks(page)
    assert block.commands == ["dlbench run lstm --steps 20 > out.txt   # a comment", "dlbench shwo", "dlbench run x --nproc 8"]
    assert block.replacements == [("--steps 20", TINY)]
    assert (block.expected_exit("dlbench shwo"), block.expected_exit("dlbench run lstm")) == ({2}, {0})
    assert block.skipped_because("dlbench run x --nproc 8") == "needs 8 GPUs" and block.skipped_because("dlbench shwo") is None
    assert split_shell(block.commands[0]) == (["dlbench", "run", "lstm", "--steps", "20"], "out.txt")


SELECTING = {"compare", "regress", "report", "trend"}  # the commands whose arguments select stored runs


def documented_selectors(command: str) -> list[str]:
    """The selectors a documented read command names: compare's two groups, regress's --baseline/--candidate,
    report's positional selectors and each side of --compare 'A vs B', trend's --where."""
    argv = words(command)[1:]
    if not argv or argv[0] not in SELECTING:
        return []
    out, rest = [], argv[1:]
    takes_value = {"--out", "--plot", "--by", "--threshold", "--min-runs", "--db", "--trend-by", "--group-by",
                   "--telemetry-runs", "--references", "--since", "--until"}
    i = 0
    while i < len(rest):
        word = rest[i]
        if word in ("--baseline", "--candidate", "--where") and i + 1 < len(rest):
            out.append(rest[i + 1])
            i += 2
        elif word == "--compare" and i + 1 < len(rest):
            out.extend(side.strip() for side in rest[i + 1].split(" vs "))
            i += 2
        elif word in takes_value:
            i += 2
        elif word.startswith("-") or word.startswith("["):
            i += 1
        else:
            if not (argv[0] == "trend" and i == 0):  # trend's first argument is a workload
                out.append(word)
            i += 1
    return out


def test_documented_selectors_run_as_written_in_the_one_selector_language():
    """A reader types a page's commands in order on a fresh store: the runs a selector names are made on the
    page first (no docs-test directive rewrites a selector into one that matches), and every selector is
    written in the store's language (store._base.parse_selector; a tag as tag:KEY=VALUE)."""
    from dlbench.store._base import FIELDS, TAG_PREFIX, parse_selector

    wrong = []
    for page in PAGES:
        for block in blocks(page):
            for command in block.commands:
                where = f"{page.relative_to(ROOT)}:{block.line}: {command}"
                selectors = documented_selectors(command)
                for old, _ in block.replacements:
                    if old in command and any("=" in term for term in old.split() if term in " ".join(selectors)):
                        wrong.append(f"{where}: a docs-test replace rewrites the selector text {old!r}")
                for selector in selectors:
                    if selector.isupper() or selector.startswith(("<", "[")):
                        continue  # a synopsis: SELECTOR, A, B
                    parse_selector(selector)
                    for term in selector.split(","):
                        key = term.partition("=")[0]
                        if "=" in term and not key.startswith(TAG_PREFIX) and key not in FIELDS:
                            wrong.append(f"{where}: {term!r} is a tag: write tag:{term}")
    assert not wrong, "\n".join(wrong)


def test_the_selector_check_reads_each_commands_selectors():
    assert documented_selectors("dlbench compare tag:try=a tag:try=b   # note") == ["tag:try=a", "tag:try=b"]
    assert documented_selectors("dlbench report workload=resnet50 --compare 'tag:a=1 vs tag:a=2' --out x.html") == [
        "workload=resnet50", "tag:a=1", "tag:a=2"]
    assert documented_selectors("dlbench regress --baseline torch=2.4 --candidate torch=2.5 --threshold 5%") == [
        "torch=2.4", "torch=2.5"]
    assert documented_selectors("dlbench trend resnet50 --by torch --where host=a") == ["host=a"]


# ---- running the documented commands (slow tier) ----

def runnable_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.commands]


def page_files(page: Path) -> dict[str, str]:
    """The ``file`` blocks of ``page``: name → text, with the block's replacements applied."""
    files = {}
    for block in blocks(page):
        if block.file:
            text = "\n".join(block.text) + "\n"
            for old, new in block.replacements:
                text = text.replace(old, new)
            files[block.file] = text
    return files


def newest_run_id(db: Path) -> str:
    from dlbench.store import open_store

    store = open_store(str(db), create=False)
    try:
        return max(store.query(), key=lambda run: run.created_at).id
    finally:
        store.close()


def newest_job_id() -> str:
    from dlbench.launch.registry import JobRegistry

    return JobRegistry().entries()[-1]["job_id"]


@pytest.fixture(scope="module")
def slurm_here(tmp_path_factory):
    """A real one-node Slurm (tests/launch/slurm_cluster.py) for the blocks marked ``cluster slurm``."""
    from launch.slurm_cluster import started_or_skip

    with started_or_skip(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


def serve_and_stop(argv: list[str], port: int, cwd: Path) -> tuple[int, str]:
    """Runs a serving command as a process until its ``/metrics`` answers, then stops it with SIGINT."""
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", *argv, "--host", "127.0.0.1", "--port", str(port)],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, served = time.monotonic() + 120, False
    try:
        while not served and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                    served = b"# TYPE" in answer.read()
            except OSError:
                time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return (proc.returncode if served else -1), output


def isolate(tmp_path: Path, monkeypatch) -> None:
    """A reader's fresh machine in ``tmp_path``: store, home, no site config; ``python`` is this interpreter."""
    for key, value in {"DLBENCH_DB": str(tmp_path / "runs.db"), "OMP_NUM_THREADS": "1", "HOME": str(tmp_path / "home"),
                       "DLBENCH_SITE_CONFIG": str(tmp_path / "no-site-config.yaml"),
                       "DLBENCH_JOBS_DIR": str(tmp_path / "jobs"),
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
                       "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)


def expanded(shown: str, block: Block, port: int, db: Path) -> str:
    """The command as it runs: the block's replacements, then the placeholders filled in."""
    command = shown
    for old, new in block.replacements:
        command = command.replace(old, new)
    command = command.replace("{port}", str(port)).replace("{root}", str(ROOT))
    if "{job_id}" in command:
        command = command.replace("{job_id}", newest_job_id())
    if "{run_id}" in command:
        command = command.replace("{run_id}", newest_run_id(db))
    return command


@pytest.mark.slow
@pytest.mark.parametrize("block", runnable_blocks(), ids=lambda b: f"{b.page.relative_to(ROOT)}:{b.line}")
def test_documented_commands_run_as_shown(block, tmp_path, monkeypatch, capfd, request):
    if block.skip:
        pytest.skip(f"{block.page.name}:{block.line}: {block.skip}")
    from dlbench.cli.app import main

    isolate(tmp_path, monkeypatch)
    if block.cluster == "slurm":
        for key, value in request.getfixturevalue("slurm_here").env.items():
            monkeypatch.setenv(key, value)
    for name, text in page_files(block.page).items():
        (tmp_path / name).write_text(text)
    port, skipped = free_port(), []
    for shown in block.setup + block.commands:
        if block.skipped_because(shown):
            skipped.append(block.skipped_because(shown))
            continue
        command = expanded(shown, block, port, tmp_path / "runs.db")
        argv, out_file = split_shell(command)
        where = f"{block.page.relative_to(ROOT)}:{block.line}: {command}"
        if any(text in shown for text in block.serves):
            code, output = serve_and_stop(argv[1:], free_port(), tmp_path)
            assert code == 0, f"{where}: exit {code} (-1: never answered on /metrics)\n{output[-3000:]}"
            continue
        code = main(argv[1:])
        if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):  # main turned Ctrl-C into an exit code: stop pytest too
            raise KeyboardInterrupt(f"{where}: stopped by a signal")
        out, err = capfd.readouterr()
        if out_file:
            (tmp_path / out_file).write_text(out)
        assert code in block.expected_exit(shown), f"{where}: exit {code}\n{err[-3000:]}\n{out[-2000:]}"
    if len(skipped) == len(block.commands):
        pytest.skip(f"{block.page.name}:{block.line}: " + "; ".join(dict.fromkeys(skipped)))
