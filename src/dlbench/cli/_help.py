"""What ``--help`` shows in its type column: INT, FLOAT, PATH, TEXT, the choices — never typer's tags.

typer (0.2x) labels each parameter with its Python annotation in angle brackets (``<bool>`` beside every
flag, ``<str>``, ``<list[str]>``): noise for a reader who wants to know what to type. A flag takes no
value, so it gets no label; a value gets the word click used for years; an option's own ``metavar``
(``DIR``) wins. Applied once to the command tree before it runs (``app.main``).
"""

from __future__ import annotations

import re
from typing import Any

#: typer's annotation names and the word help shows for them.
_TYPE_WORDS = {"str": "TEXT", "int": "INT", "float": "FLOAT", "bool": "BOOL", "Path": "PATH", "path": "PATH",
               "file": "FILE", "directory": "DIR", "datetime": "DATETIME", "UUID": "UUID", "int range": "INT",
               "float range": "FLOAT"}
_TAG = re.compile(r"^<(?:list\[)?(?P<name>[^\]>]*)\]?>(?P<more>\.\.\.)?$")


def plain_label(typer_label: str | None, is_flag: bool = False) -> str | None:
    """The label help shows for a parameter typer would label ``typer_label`` (``<int>``, ``<list[str]>``,
    ``<fp32|bf16>``, or an option's own metavar such as ``DIR``): None for a flag."""
    if is_flag or typer_label is None:
        return None
    tag = _TAG.match(typer_label)
    if tag is None:
        return typer_label  # a metavar the command chose
    name = tag["name"]
    return _TYPE_WORDS.get(name, name.upper() if "|" not in name else name) + (tag["more"] or "")


def plain_type_labels(command: Any) -> Any:
    """Give every parameter of ``command`` (a typer/click command) and its subcommands, ``--help`` included,
    the label of :func:`plain_label` in the rich help: typer asks ``display_type_rich``; usage lines and
    error messages are untouched."""
    for param in command.params:
        _relabel(param)
    help_option = command.get_help_option
    command.get_help_option = lambda ctx: _relabel(help_option(ctx))
    for sub in getattr(command, "commands", {}).values():
        plain_type_labels(sub)
    return command


def _relabel(param: Any) -> Any:
    typer_label = getattr(param, "display_type_rich", None)
    if typer_label is not None and not getattr(typer_label, "plain", False):
        is_flag = bool(getattr(param, "is_flag", False) or getattr(param, "count", False))

        def label(ctx: Any) -> str | None:
            return plain_label(typer_label(ctx), is_flag)

        label.plain = True  # type: ignore[attr-defined]  # relabelled once, however often asked
        param.display_type_rich = label
    return param
