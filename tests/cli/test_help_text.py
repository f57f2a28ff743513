"""Help texts say what they mean: typer renders them with rich markup, where ``[word]`` is a style tag
and vanishes (``pip install 'dlbench[ray]'`` printed as ``pip install 'dlbench'``) unless escaped."""

from __future__ import annotations

import json
import re

import click
import pytest
import typer.main

from dlbench.cli.app import app, main
from dlbench.record import STATUSES, finish, new_record
from dlbench.store import open_store

#: ``[`` starting a would-be markup tag, not escaped with a backslash.
UNESCAPED_TAG = re.compile(r"(?<!\\)\[[A-Za-z/]")


def help_texts(command: click.Command, path: str = "dlbench"):
    """(where, text) of every command's and option's help in the application."""
    yield path, command.help or ""
    for param in command.params:
        yield f"{path} {param.opts[0] if getattr(param, 'opts', None) else param.name}", getattr(param, "help", None) or ""
    for name, sub in getattr(command, "commands", {}).items():
        yield from help_texts(sub, f"{path} {name}")


def test_no_help_text_loses_square_brackets_to_markup():
    lost = [(where, text) for where, text in help_texts(typer.main.get_command(app)) if UNESCAPED_TAG.search(text)]
    assert lost == []


@pytest.mark.parametrize("argv, shown", [
    (["hpo", "run", "--help"], "pip install 'dlbench[ray]'"),
    (["results", "--help"], " | ".join(STATUSES)),
])
def test_the_rendered_help_shows_it(argv, shown, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # one line per option: the text is not wrapped
    assert main(argv) == 0
    assert shown in capsys.readouterr().out


def test_results_status_pruned_lists_the_pruned_runs(capsys, tmp_path):
    db = str(tmp_path / "runs.db")
    store = open_store(db)
    try:
        for status in ("ok", "pruned"):
            store.save(finish(new_record({"workload": "lstm", "tags": {}}, {"hostname": "test"}), status,
                              error=None if status == "ok" else "stopped early"))
    finally:
        store.close()
    capsys.readouterr()
    assert main(["results", "--status", "pruned", "--db", db, "--json"]) == 0
    assert [row["status"] for row in json.loads(capsys.readouterr().out)] == ["pruned"]


#: typer's type tags: ``<bool>``, ``<str>``, ``<list[str]>``, ``<int range>``, ``<fp32|bf16>``.
TYPE_TAG = re.compile(r"<(?:bool|str|int|float|Path|path|datetime|list\[[^\]]*\]|\w+ range|[^<>\s|]+(?:\|[^<>\s|]+)+)>")


def command_paths(command: click.Command, path: tuple[str, ...] = ()):
    """Every command and group of the application, as the words that name it."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from command_paths(sub, (*path, name))


def test_no_help_page_shows_type_tags(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    pages = 0
    for path in command_paths(typer.main.get_command(app)):
        assert main([*path, "--help"]) == 0
        page = capsys.readouterr().out
        assert not TYPE_TAG.findall(page), (path, TYPE_TAG.findall(page))
        pages += 1
    assert pages > 40  # every subcommand, not only the root
    assert main(["run", "--help"]) == 0
    page = capsys.readouterr().out
    # a flag has no label; a value says what to type; an option's own metavar stays
    assert re.search(r"--steps +INT ", page) and re.search(r"--profile +DIR ", page)
    assert re.search(r"--compile +--no-compile +torch\.compile", page)
