"""Labels of a chart's marks that show only what differs between them; what they share goes in the title.

A configuration (``config_key``: ``"llm train fp32 bs8 x2 parallel=tp:dp1tp2pp1 [n_heads=4,n_layers=2,…]"``)
is read as settings: the words before the brackets and each ``name=value`` inside them. Six llm bars whose
labels began with the same eight parameters were cut before the one that differed.
"""

from __future__ import annotations

#: The label of a mark whose every setting is shared by the others (it differs only by lacking one).
ONLY_SHARED = "(shared settings only)"


def settings(configuration: str) -> tuple[list[str], list[str]]:
    """The words of ``configuration`` and the parameters inside its brackets, in order."""
    head, _, rest = configuration.partition("[")
    params = [p for p in rest.removesuffix("]").split(",") if p]
    return head.split(), params


def _text(words: list[str], params: list[str]) -> str:
    return " ".join(words + ([f"[{','.join(params)}]"] if params else []))


def split_shared(configurations: list[str]) -> tuple[str, list[str]]:
    """``(shared, labels)``: the settings every configuration has, written once, and per configuration the
    settings the others do not all share (:data:`ONLY_SHARED` when there are none). One configuration: all of
    it is shared and its label is its first word."""
    parsed = [settings(c) for c in configurations]
    if not parsed:
        return "", []
    common_words = set.intersection(*(set(words) for words, _ in parsed))
    common_params = set.intersection(*(set(params) for _, params in parsed))
    first_words, first_params = parsed[0]
    shared = _text([w for w in first_words if w in common_words], [p for p in first_params if p in common_params])
    if len(parsed) == 1:
        return shared, [first_words[0] if first_words else ONLY_SHARED]
    labels = [_text([w for w in words if w not in common_words], [p for p in params if p not in common_params])
              or ONLY_SHARED for words, params in parsed]
    return shared, labels
