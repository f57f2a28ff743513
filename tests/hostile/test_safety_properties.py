"""Property-based tests of :mod:`dlbench.safety` and of every script dlbench renders for Slurm: whatever text a
user gives (partition, account, QOS, constraint, reservation, image, job directory, study name), the value is
refused with one sentence, or it lands where it belongs and nowhere else.

An ``#SBATCH`` line is read here as sbatch reads it (split at white space, an unquoted ``#`` ends it, quotes and
backslashes are special): every such line must hold exactly one option, with no quote, backslash or ``#``
in it, so that what sbatch reads is the token itself. The shell part must give every user value back as one
word (``shlex`` and a real ``bash``), and ``bash -n`` must pass.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from rich.console import Console
from rich.text import Text

from dlbench.api.resolve import resolve_batch
from dlbench.errors import UsageError
from dlbench.hpo._base import WorkerPlan
from dlbench.hpo.slurm import worker_array_script
from dlbench.launch.slurm import sbatch_array_script, sbatch_script
from dlbench.safety import (
    markup,
    path_inside,
    plain_mathtext,
    printable,
    sbatch_line,
    sbatch_value,
    shell_word,
)
from dlbench.spec import RunSpec, make_launch_settings

TINY = {"workload": "lstm", "params": {"seq_len": 4, "input_size": 8, "hidden_size": 8}, "batch_size": 4}
#: Text a hostile or careless user may type: anything, with the characters that matter made likely.
SPECIAL = st.sampled_from(list(" \t\n\r\"'\\#$`;&|<>()[]{}*?!%~=,:@/\0")
                          + ["--output=/x", " --uid=0", "$(id)", "\n#SBATCH ", "\\[", "[b]", "[/", "[1]", "\\\\"])
TEXT = st.lists(st.one_of(st.text(max_size=6), SPECIAL), max_size=8).map("".join)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SITE_FIELDS = ("partition", "account", "qos", "constraint", "reservation")


def sbatch_tokens(line: str) -> list[str]:
    """The words sbatch reads from one ``#SBATCH`` line, as its option parser does (conservatively: a quote or
    backslash is returned inside the word, so the caller sees it)."""
    words, word = [], ""
    for char in line.removeprefix("#SBATCH"):
        if char == "#":
            break
        if char.isspace():
            if word:
                words.append(word)
            word = ""
        else:
            word += char
    return words + ([word] if word else [])


def check_sbatch_lines(script: str, expected: dict[str, str]) -> None:
    """Every ``#SBATCH`` line sbatch reads (those before the first command) one clean option; each ``--flag`` in
    ``expected`` has exactly that value; and no line after the header looks like an option sbatch could take."""
    options, header = {}, True
    for line in script.split("\n")[1:]:  # sbatch splits at newlines only
        header = header and (line.startswith("#") or not line.strip())
        if header and line.startswith("#SBATCH"):
            words = sbatch_tokens(line)
            assert len(words) == 1, f"{line!r} holds {len(words)} options"
            assert not set(words[0]) & set("\"'\\#") and words[0].startswith("--"), line
            flag, _, value = words[0][2:].partition("=")
            options[flag] = value
        elif header and line.startswith("#") and "SBATCH" in line.upper():
            pytest.fail(f"a line that looks like an sbatch option but is not one: {line!r}")
    for flag, value in expected.items():
        assert options.get(flag) == value, (flag, options)


def check_bash_syntax(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@SETTINGS
@given(field=st.sampled_from(SITE_FIELDS), value=TEXT)
def test_any_site_value_is_refused_or_one_token_on_its_own_sbatch_line(field, value):
    try:
        run = resolve_batch(RunSpec(**TINY), make_launch_settings({field: value}), "slurm")
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assume(value)  # an empty value asks for nothing
    script = sbatch_script(run, Path("/home/u/dlbench/jobs/j1"))
    check_sbatch_lines(script, {field: value})
    check_bash_syntax(script)


@SETTINGS
@given(workdir=TEXT, image=TEXT, runtime=st.sampled_from(["pyxis", "shifter", "apptainer"]))
def test_any_job_directory_and_image_land_quoted_or_are_refused(workdir, image, runtime):
    folder = "/" + workdir
    try:
        run = resolve_batch(RunSpec(**TINY), make_launch_settings(dict(workdir=folder, container_image=image or None,
                                                                      container_runtime=runtime)), "slurm")
        script = sbatch_script(run, Path(folder))
        array = sbatch_array_script([run, run], Path(folder))
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    expected = {"chdir": str(Path(folder))} | ({"image": image} if image and runtime == "shifter" else {})
    check_sbatch_lines(script, expected)
    check_sbatch_lines(array, expected)
    for text, expected_dir in ((script, str(Path(folder))), (array, f"{Path(folder)}/$SLURM_ARRAY_TASK_ID")):
        check_bash_syntax(text)
        (jobdir,) = [line for line in text.splitlines() if line.startswith("JOBDIR=")]
        assert shlex.split(jobdir.removeprefix("JOBDIR=")) == [expected_dir]
    step = next(line for line in script.splitlines() if line.startswith("srun "))
    words = shlex.split(step.removesuffix(" &"))  # the shell's words, quotes removed
    if image and runtime == "apptainer":
        assert image in words
    elif image and runtime == "pyxis":
        assert f"--container-image={image}" in words
    assert not image or runtime == "shifter" or words.count(image) + words.count(f"--container-image={image}") == 1


@SETTINGS
@given(study=TEXT, partition=TEXT, argv=st.lists(TEXT, min_size=1, max_size=4))
def test_hpo_worker_array_script_keeps_every_value_in_its_place(study, partition, argv):
    try:
        settings_ = make_launch_settings({"partition": partition or None})
        plans = [WorkerPlan(("dlbench", "hpo", "worker", *argv, "--index", str(i)), {}, f"w{i}") for i in range(2)]
        script = worker_array_script(plans, settings_, Path("/home/u/jobs/hpo"), study)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    check_sbatch_lines(script, {"job-name": f"dlbench-hpo-{study}"} | ({"partition": partition} if partition else {}))
    check_bash_syntax(script)
    words = shlex.split(script[script.index("\nexec srun ") + len("\nexec srun "):])  # the shell's words
    assert words == ["dlbench", "hpo", "worker", *argv, "--index", "$SLURM_ARRAY_TASK_ID"]


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXT.filter(lambda t: "\0" not in t), min_size=1, max_size=5))
def test_shell_word_gives_the_text_back_through_a_real_bash(texts):
    script = "printf '%s\\0' " + " ".join(shell_word(t) for t in texts)
    done = subprocess.run(["bash", "-c", script], capture_output=True, check=True)
    assert done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1] == texts


@SETTINGS
@given(TEXT)
def test_shell_word_is_one_word_or_refused(text):
    try:
        word = shell_word(text)
    except UsageError:
        assert "\0" in text
        return
    assert shlex.split(word) == [text]


@SETTINGS
@given(flag=st.sampled_from(["partition", "constraint", "image", "output", "job-name", "time"]), value=TEXT)
def test_sbatch_line_is_exactly_one_option_or_refused(flag, value):
    try:
        line = sbatch_line(flag, value)
    except UsageError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
        return
    assert sbatch_tokens(line) == [f"--{flag}={value}"] and sbatch_value(flag, value) == value


@SETTINGS
@given(TEXT)
def test_path_inside_never_leaves_its_folder(name):
    root = Path("/srv/out")
    try:
        path = path_inside(root, name)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assert path.parent == root and path.name == name


@SETTINGS
@given(TEXT)
def test_markup_prints_any_text_as_typed(text):
    shown_text = printable(text)
    assert not any(ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f for c in shown_text)
    assert Text.from_markup(markup(text), emoji=False).plain == shown_text  # no tag taken from the text
    console = Console(width=200, force_terminal=True, color_system="standard")
    with console.capture() as captured:
        console.print(markup(text) + "[bold]x[/bold]", end="", soft_wrap=True, highlight=False, emoji=False)
    assert captured.get().endswith("\x1b[1mx\x1b[0m")  # and the markup after it still works
    if all(c.isprintable() or c in "\n\t" for c in text):
        assert shown_text == text


def test_the_reported_injections_are_refused_with_one_sentence():
    """The issue's own findings: a newline command and extra #SBATCH options through --partition."""
    for value in ("gpu\ntouch /tmp/x", "gpu --output=/x --uid=0", "gpu#comment", "$(id)"):
        with pytest.raises(UsageError, match="partition"):
            resolve_batch(RunSpec(**TINY), make_launch_settings({"partition": value}), "slurm")


@SETTINGS
@given(TEXT)
def test_plain_mathtext_is_drawn_as_typed(text):
    from matplotlib.text import Text as MplText

    shown = plain_mathtext(text)
    # what matplotlib draws: (the string, whether it is mathtext) — its own preprocessing step, called directly
    assert MplText(text=shown)._preprocess_math(shown) == (printable(text), False)


@given(key=st.sampled_from(["DLBENCH_CLUSTER", "SLURM_CLUSTER_NAME"]),
       value=st.one_of(TEXT, st.text(alphabet="ab-", min_size=120, max_size=400)))
def test_a_cluster_name_from_the_environment_passes_the_one_cluster_rule(key, value):
    """What ``$DLBENCH_CLUSTER`` or ``$SLURM_CLUSTER_NAME`` holds is recorded (and reaches the store's 128-character
    column, scripts and terminals) only when ``--cluster`` would take it: refused with one sentence before a run,
    dropped where the run has happened; never stored otherwise."""
    from dlbench.env import detect_cluster
    from dlbench.safety import cluster_name

    try:
        accepted = cluster_name(value, f"${key}")
    except UsageError:
        accepted = None
    try:
        strict = detect_cluster({key: value})
    except UsageError as exc:
        assert accepted is None and value and "\n" not in str(exc) and f"${key}" in str(exc)
    else:
        assert strict == accepted and (accepted is not None or not value)
    assert detect_cluster({key: value}, strict=False) == accepted  # never raises where the run has happened
    if accepted is not None:
        assert len(accepted) <= 128 and accepted.isprintable() and " " not in accepted and ";" not in accepted


@given(value=st.one_of(TEXT, st.text(alphabet="ab-.", min_size=180, max_size=260)))
def test_a_node_name_from_the_environment_is_one_safe_file_name_or_refused(value):
    """What ``$DLBENCH_NODE_NAME`` holds (Kubernetes' spec.nodeName) names the preflight's ``HOST.json`` and a record's
    node: it is taken only as a host name could be written, else refused in one sentence naming the variable."""
    from dlbench.safety import node_name, path_inside

    try:
        accepted = node_name(value)
    except UsageError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("$DLBENCH_NODE_NAME ")
        return
    assert accepted == value and 1 <= len(value) <= 195 and value.isascii() and value.isprintable()
    assert not set(value) & set(" /\\;'\"$`[]") and value[0].isalnum() and value[-1].isalnum()
    assert path_inside(Path("/tmp/preflight"), f"{value}.json").parent == Path("/tmp/preflight")


@given(value=st.one_of(TEXT, st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers().map(str)),
       zero=st.booleans())
def test_seconds_from_the_environment_are_a_finite_wait_or_one_sentence(value, zero):
    """A configurable wait or budget (``$DLBENCH_JOB_POLL_S``, ``$DLBENCH_PREFLIGHT_BUDGET_S`` …) is a finite number of
    seconds, 0 or more (above 0 where 0 makes no sense), or refused in one sentence naming the variable and the fix."""
    import math
    import os

    from dlbench.safety import env_seconds

    assume("\0" not in value)
    os.environ["DLBENCH_TEST_SECONDS"] = value
    try:
        seconds = env_seconds("DLBENCH_TEST_SECONDS", 7.0, zero=zero)
    except UsageError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("DLBENCH_TEST_SECONDS=") and "DLBENCH_TEST_SECONDS=7" in str(exc)
        return
    finally:
        del os.environ["DLBENCH_TEST_SECONDS"]
    assert math.isfinite(seconds) and (seconds >= 0 if zero else seconds > 0)
    assert seconds == (float(value) if value.strip() else 7.0)
