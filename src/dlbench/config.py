"""YAML configuration files: one run, a suite, or a NERSC pytorch-benchmarks config.

* one run: a mapping of :class:`~dlbench.spec.RunSpec` fields (``workload: resnet50`` …);
* a suite: ``{name: …, defaults: {…}, runs: [{…}, …]}`` — each run is ``defaults`` updated by its
  own keys (``params`` and ``tags`` are merged key by key);
* NERSC pytorch-benchmarks (``trainer``, ``data_config``, ``model_config``, ``train_config``), translated
  by :func:`from_nersc` so existing configs run unchanged.
"""

from __future__ import annotations

import math
import os
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dlbench.errors import UsageError, unknown_name
from dlbench.safety import read_input_file

if TYPE_CHECKING:  # spec imports pydantic (~0.2 s): only where runs are built, not at `dlbench --help`
    from dlbench.spec import RunSpec

# NERSC model_type → dlbench workload.
_NERSC_MODELS = {
    "resnet50": "resnet50", "alexnet": "alexnet", "vgg11": "vgg11", "inceptionv3": "inception_v3",
    "inception_v3": "inception_v3", "cnn3d": "cnn3d", "lstm": "lstm", "transformer": "transformer",
    "dcgan": "dcgan", "gnmt": "gnmt",
}
# NERSC model_config key → dlbench parameter name.
_NERSC_MODEL_KEYS = {
    "num_classes": "num_classes", "n_classes": "num_classes", "input_size": "input_size",
    "hidden_size": "hidden_size", "n_layers": "num_layers", "num_layers": "num_layers",
    "output_size": "n_targets", "ntoken": "vocab_size", "ninp": "d_model", "nhid": "ffn_dim",
    "nhead": "num_heads", "nlayers": "num_layers", "noise_dim": "noise_dim", "n_channels": "channels",
}
_NERSC_IGNORED = {"output_dir", "trainer", "name", "model_type", "loss", "optimizer", "learning_rate",
                  "lr", "n_valid", "use_dist_sampler_train", "use_dist_sampler_valid", "target_shape",
                  "input_type", "input_shape", "n_train", "batch_size", "n_epochs", "n_classes",
                  "input_size"}


#: Largest config file read: configs are a few KiB; this stops ``/dev/zero`` or a huge file.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: Deepest nesting of mappings and lists accepted (real configs nest 3 or 4 levels).
MAX_DEPTH = 64
#: Most nodes a document may expand to once aliases are followed ("billion laughs" stops here).
MAX_EXPANDED_NODES = 100_000


class _TooComplex(Exception):
    """Raised by :class:`_BoundedLoader`; turned into a usage error naming the file."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses documents nested deeper than :data:`MAX_DEPTH`.

    The composer recurses once per level: without a bound, a file of 50,000 ``[`` ends in a
    RecursionError deep inside PyYAML.
    """

    _depth = 0

    def compose_node(self, parent, index):  # noqa: D102 - PyYAML's hook
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooComplex(f"it nests more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes in ``node`` with every alias followed; shared nodes (aliases) are counted each time
    they are used, so a few hundred bytes of nested aliases show their exponential size here."""
    known = memo.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    memo[id(node)] = size = min(size, MAX_EXPANDED_NODES + 1)  # capped: the sum cannot explode either
    return size


def parse_yaml(text: str, where: str) -> Any:
    """Parse YAML safely and within bounds (depth, alias expansion); problems name ``where``."""
    loader = None
    try:
        loader = _BoundedLoader(text)  # its reader already refuses control characters
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_EXPANDED_NODES:
            raise _TooComplex(f"its aliases expand to more than {MAX_EXPANDED_NODES:,} values")
        return loader.construct_document(node)
    except _TooComplex as exc:
        raise UsageError(f"{where} is too complex to be a config file ({exc}); simplify it.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or "malformed YAML"
        raise UsageError(f"{where} is not valid YAML{at}: {problem}; fix the file.") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text_file(path: str | Path, what: str = "config file", limit_bytes: int = MAX_CONFIG_BYTES) -> str:
    """A small UTF-8 text file's content; unreadable, oversized or non-UTF-8 files are usage errors."""
    shown = repr(str(path))
    try:  # a regular file, bounded: never a FIFO that blocks or /dev/zero that never ends
        data = read_input_file(path, what, limit_bytes)
    except UsageError as exc:
        text = str(exc)
        raise UsageError(text if text.endswith(".") else f"{text}; give a {what}.") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {shown} is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); "
                         "save it as UTF-8.") from None


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file safely; a missing, malformed, huge or hostile file is a usage error naming it."""
    return parse_yaml(read_text_file(path), f"config file {str(path)!r}")


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> list[RunSpec]:
    """The runs a config file describes, with ``overrides`` (from the command line) applied to each."""
    doc = load_yaml(path)
    return specs_from_document(doc, str(path), overrides)


def builtin_suite(name: str, overrides: dict[str, Any] | None = None) -> list[RunSpec]:
    """A suite shipped inside dlbench (``dlbench/data/suite-<name>.yaml``)."""
    files = {p.name.removeprefix("suite-").removesuffix(".yaml"): p
             for p in resources.files("dlbench.data").iterdir() if p.name.startswith("suite-")}
    if name not in files:
        raise unknown_name("suite", name, files, "Or give a suite file with --config.")
    return specs_from_document(yaml.safe_load(files[name].read_text()), f"suite {name}", overrides)


def specs_from_document(doc: Any, where: str, overrides: dict[str, Any] | None = None) -> list[RunSpec]:
    """The runs of a parsed config document (one run, a suite, or a NERSC config)."""
    from dlbench.spec import make_spec

    overrides = overrides or {}
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: expected a mapping of run settings or a suite with 'runs:', got {type(doc).__name__}.")
    _require_string_keys(doc, where)
    doc = {k: v for k, v in doc.items() if k not in ("launcher", "cluster", "preflight", "preflight_expect")}  # where to run: see launcher_section
    if "model_config" in doc or "data_config" in doc:
        entries = [from_nersc(doc, where)]
    elif "runs" in doc:
        extra = set(doc) - {"name", "description", "defaults", "runs"}
        if extra:
            raise UsageError(f"{where}: unknown suite key {sorted(extra)[0]!r}; a suite has name, description, defaults, "
                             "runs and launcher.")
        runs = doc["runs"]
        if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
            raise UsageError(f"{where}: 'runs' must be a non-empty list of mappings.")
        defaults = doc.get("defaults") or {}
        if not isinstance(defaults, dict):
            raise UsageError(f"{where}: 'defaults' must be a mapping of run settings, got {type(defaults).__name__}.")
        for i, run in enumerate([defaults, *runs]):
            _require_string_keys(run, where if i == 0 else f"{where}, run {i}")
        entries = [merge(defaults, run) for run in runs]
    else:
        entries = [doc]
    return [make_spec(merge(entry, overrides), f"{where}, run {i + 1}" if len(entries) > 1 else where)
            for i, entry in enumerate(entries)]


def site_config_path() -> Path:
    """The site's config file (``$DLBENCH_SITE_CONFIG``, else ``$XDG_CONFIG_HOME/dlbench/config.yaml``): a
    ``launcher:`` key there applies to every command, so a site writes its partition or namespace once."""
    if os.environ.get("DLBENCH_SITE_CONFIG"):
        return Path(os.environ["DLBENCH_SITE_CONFIG"])
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "dlbench" / "config.yaml"


def cluster_setting(path: str | Path | None = None) -> tuple[Any, str] | None:
    """The ``cluster:`` value of ``path`` (a config file), else of the site config, with where it was written; None
    when neither names one (``--cluster`` overrides both; see :func:`dlbench.safety.cluster_name`)."""
    for source in (path, site_config_path()):
        if source is None or (source != path and not Path(source).is_file()):
            continue
        doc = load_yaml(source)
        if isinstance(doc, dict) and doc.get("cluster") is not None:
            return doc["cluster"], f"config file {str(source)!r}: cluster"
    return None


def top_setting(key: str, path: str | Path | None = None) -> tuple[Any, str] | None:
    """The top-level ``key`` of ``path`` (a config file), else of the site config, with where it was written; None
    when neither has it (``preflight:``, ``preflight_expect:``; a flag overrides both)."""
    for source in (path, site_config_path()):
        if source is None or (source != path and not Path(source).is_file()):
            continue
        doc = load_yaml(source)
        if isinstance(doc, dict) and doc.get(key) is not None:
            return doc[key], f"config file {str(source)!r}: {key}"
    return None


def launcher_section(path: str | Path | None = None) -> dict[str, Any]:
    """The ``launcher:`` settings of the site config with those of ``path`` (a config file) on top."""
    merged: dict[str, Any] = {}
    for source in (site_config_path(), path):
        if source is None or (source != path and not Path(source).is_file()):
            continue
        doc = load_yaml(source)
        section = doc.get("launcher") if isinstance(doc, dict) else None
        if section is None:
            continue
        if not isinstance(section, dict):
            raise UsageError(f"config file {str(source)!r}: 'launcher' must be a mapping of launcher settings "
                             f"(name: slurm, partition: gpu …), not {short_repr(section)}.")
        _require_string_keys(section, f"config file {str(source)!r}: launcher")
        merged |= section
    return merged


def _require_string_keys(mapping: dict[Any, Any], where: str) -> None:
    bad = next((key for key in mapping if not isinstance(key, str)), None)
    if bad is not None:
        raise UsageError(f"{where}: key {short_repr(bad)} is not a name; config keys are words such as 'workload'.")


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about values from a file."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``update``; ``params`` and ``tags`` merge key by key."""
    out = dict(base)
    for key, value in update.items():
        if key in ("params", "tags") and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def from_nersc(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """Translate a NERSC pytorch-benchmarks config into RunSpec fields.

    The work it describes is kept: ``steps = n_epochs * n_train // batch_size``.
    """
    data, model, train = (_nersc_section(doc, name, where) for name in ("data_config", "model_config", "train_config"))
    model_type = str(model.get("model_type") or model.get("name") or "").lower()
    if model_type not in _NERSC_MODELS:
        raise UsageError(f"{where}: NERSC model_type {short_repr(model_type)} has no dlbench workload; "
                         f"known: {', '.join(sorted(_NERSC_MODELS))}.")
    workload = _NERSC_MODELS[model_type]
    params = _nersc_shape_params(workload, data.get("input_shape"), where)
    if "n_classes" in data and workload not in ("cnn3d", "dcgan"):
        params["num_classes" if workload != "transformer" else "vocab_size"] = data["n_classes"]
    for key, value in model.items():
        if key in _NERSC_MODEL_KEYS and key not in ("input_shape",):
            params[_NERSC_MODEL_KEYS[key]] = value
    ignored = sorted((set(data) | set(model) | set(train) | set(doc)) - _NERSC_IGNORED - set(_NERSC_MODEL_KEYS)
                     - {"data_config", "model_config", "train_config"})
    if ignored:
        print(f"dlbench: {where}: ignoring NERSC keys with no dlbench meaning: {', '.join(ignored)}", file=sys.stderr)
    spec: dict[str, Any] = {"workload": workload, "params": params}
    if "batch_size" in data:
        spec["batch_size"] = _nersc_number(data, "data_config", "batch_size", int, where)
    if "optimizer" in model:
        spec["optimizer"] = str(model["optimizer"]).lower()
    if "learning_rate" in model:
        spec["learning_rate"] = _nersc_number(model, "model_config", "learning_rate", float, where)
    if "n_train" in data and spec.get("batch_size"):
        epochs = _nersc_number(train, "train_config", "n_epochs", int, where) if "n_epochs" in train else 1
        samples = _nersc_number(data, "data_config", "n_train", int, where)
        spec["steps"] = max(1, epochs * samples // spec["batch_size"])
    spec["tags"] = {"config": "nersc"}
    return spec


def _nersc_section(doc: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    section = doc.get(name) or {}
    if not isinstance(section, dict):
        raise UsageError(f"{where}: {name} must be a mapping of settings (key: value lines), "
                         f"not {type(section).__name__} {short_repr(section)}; fix the config file.")
    _require_string_keys(section, f"{where}: {name}")
    return section


def _nersc_number(section: dict[str, Any], name: str, key: str, kind: type, where: str) -> Any:
    """``section[key]`` as an int or float; a word, a list or a fraction for an int is a usage error."""
    value = section[key]
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and (kind is float or float(value).is_integer()) and math.isfinite(value))
    if not ok:
        article = "an integer" if kind is int else "a number"
        raise UsageError(f"{where}: {name}.{key}={short_repr(value)} must be {article}; fix the config file.")
    return kind(value)


def _nersc_shape_params(workload: str, shape: Any, where: str) -> dict[str, Any]:
    if shape is None:
        return {}
    if not isinstance(shape, list) or not shape or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
        raise UsageError(f"{where}: data_config.input_shape must be a list of positive integers, got {short_repr(shape)}.")
    if workload in ("resnet50", "alexnet", "vgg11", "inception_v3", "dcgan"):
        if len(shape) != 3 or shape[1] != shape[2]:
            raise UsageError(f"{where}: input_shape {shape} must be [channels, size, size] for {workload}.")
        return {"image_size": shape[1]} | ({"channels": shape[0]} if workload == "dcgan" else {})
    if workload == "cnn3d":
        if len(shape) != 4 or len(set(shape[1:])) != 1:
            raise UsageError(f"{where}: input_shape {shape} must be [channels, size, size, size] for cnn3d.")
        return {"in_channels": shape[0], "volume_size": shape[1]}
    if workload == "lstm":
        if len(shape) != 2:
            raise UsageError(f"{where}: input_shape {shape} must be [seq_len, input_size] for lstm.")
        return {"seq_len": shape[0], "input_size": shape[1]}
    return {"seq_len": shape[0]}


def writable_dir(directory: str, option: str) -> Path:
    """``directory`` (absolute) once it is known that it is, or can be created as, a writable directory;
    nothing is created. ``option`` names the flag in the error."""
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {directory!r} is a file; give a directory.")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise UsageError(f"{option} {directory!r} cannot be created: {existing} is a file; give a directory.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {directory!r} cannot be written ({existing} is not writable); "
                         "give a directory you can write to.")
    return path.resolve()
