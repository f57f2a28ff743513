"""Hostile input, round two — stored text is never read as terminal markup.

A run saved with a tag such as ``data=[/scratch/imagenet]`` made every later ``results``, ``compare`` and
``regress`` on that store crash in rich's markup parser. Here any tag text (brackets, backslashes and rich's
own tag syntax made likely) is stored in a real store, and the three commands must render it without an error
and show it as typed.
"""

from __future__ import annotations

import copy
import re
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from dlbench.cli.app import main
from dlbench.record import new_id
from dlbench.store import open_store

#: Printable text a careless user may put in a tag: rich's markup made likely. (No ',' or '=', which a
#: selector splits at, and no surrounding white space, which ``--tag`` strips; control characters are covered
#: by the safety properties: they are shown as escapes, not as typed.)
RICH = st.sampled_from(["[", "]", "\\", "[/", "[/bold]", "[bold]", "[/scratch/data]", "[link=x]", "\\[", "[@click]",
                        "[#fff]", ":smile:", "\\\\["])
PLAIN = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters=",="), max_size=4)
TAG_TEXT = st.lists(st.one_of(RICH, PLAIN), min_size=1, max_size=5).map("".join).filter(lambda t: t.strip() == t != "")


def store_with_tagged_run(seed: Path, folder: Path, text: str) -> tuple[Path, str, str]:
    """A copy of the seeded store with a second run (the seeded one's twin) tagged ``data=text``."""
    db = folder / "runs.db"
    shutil.copy(seed, db)
    store = open_store(str(db))
    try:
        base = store.records()[0]
        twin = copy.deepcopy(base)
        twin["id"] = new_id()
        twin["spec"]["tags"] = {"data": text}
        assert store.save(twin) is None
    finally:
        store.close()
    return db, base["id"], twin["id"]


def flat(text: str) -> str:
    """Rendered output without white space and table borders (a long cell may be folded over lines)."""
    return re.sub(r"[\s│┃]", "", text)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=TAG_TEXT)
def test_any_stored_tag_renders_as_typed_in_results_compare_and_regress(text, seeded_store, monkeypatch, capsys):
    seed, _ = seeded_store
    with tempfile.TemporaryDirectory() as tmp:
        db, base_id, _ = store_with_tagged_run(seed, Path(tmp), text)
        monkeypatch.setenv("DLBENCH_DB", str(db))
        capsys.readouterr()
        for argv in (["results"], ["compare", base_id, f"data={text}"],
                     ["regress", "--baseline", base_id, "--candidate", f"data={text}", "--min-runs", "1"]):
            code = main(argv)
            out, err = capsys.readouterr()
            assert code in (0, 1), f"{argv}: exit {code}: {err[-1500:]}"  # regress: 1 is a verdict, not a crash
            assert "Traceback" not in err and "MarkupError" not in err
            assert flat(text) in flat(out), f"{argv}: {text!r} not shown as typed in:\n{out}"


@settings(max_examples=60, deadline=None)
@given(choice=TAG_TEXT, error=TAG_TEXT, name=TAG_TEXT)
def test_any_trial_text_renders_as_typed_in_the_hpo_table(choice, error, name):
    """A categorical choice, a parameter name, a study name and a trial's error (its command's stderr) in
    ``hpo run``'s live table and ``hpo status``: shown as typed, never read as markup."""
    import io
    from types import SimpleNamespace

    from dlbench.cli.hpo_table import render_table

    spec = SimpleNamespace(name=name, sampler="tpe", pruner="none", direction="maximize",
                           space=[SimpleNamespace(name=name)])
    rows = [{"trial": 0, "state": "failed", "params": {name: choice}, "epoch": None, "latest": None, "best": None,
             "error": error}]
    out = io.StringIO()
    render_table(rows, spec, {"failed": 1}, None, file=out)
    for text in (choice, error, name):
        assert flat(text) in flat(out.getvalue()), f"{text!r} not shown as typed in:\n{out.getvalue()}"
