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
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dlbench.errors import UsageError, unknown_name
from dlbench.safety import read_input_file, shell_word

if TYPE_CHECKING:  # spec imports pydantic (~0.2 s): only where runs are built, not at `dlbench --help`
    from dlbench.spec import RunSpec

# NERSC model_type (model_config.name for its GAN trainer) → dlbench workload.
_NERSC_MODELS = {
    "resnet50": "resnet50", "alexnet": "alexnet", "vgg11": "vgg11", "inceptionv3": "inception_v3",
    "inception_v3": "inception_v3", "cnn3d": "cnn3d", "lstm": "lstm", "transformer": "transformer",
    "dcgan": "dcgan", "gnmt": "gnmt",
}
_CLASSIFIER_KEYS = {"num_classes": "num_classes", "n_classes": "num_classes"}
# NERSC model_config key → the dlbench parameter it sets, per workload: NERSC's train.py passes every other
# model_config key to the model's constructor, so a key missing here changes NERSC's model and is named as
# ignored (printed and recorded), never dropped silently.
_NERSC_MODEL_KEYS: dict[str, dict[str, str]] = {
    "resnet50": _CLASSIFIER_KEYS, "alexnet": _CLASSIFIER_KEYS, "vgg11": _CLASSIFIER_KEYS,
    "inception_v3": _CLASSIFIER_KEYS | {"aux_logits": "aux_logits"},
    "cnn3d": {"output_size": "n_targets"},  # input_shape: see _nersc_shape_params
    "lstm": _CLASSIFIER_KEYS | {"input_size": "input_size", "hidden_size": "hidden_size",
                                "output_size": "num_classes", "n_lstm_layers": "num_layers"},
    "transformer": {"ntoken": "vocab_size", "ninp": "d_model", "nhid": "ffn_dim", "nhead": "num_heads",
                    "nlayers": "num_layers"},
    "dcgan": {"noise_dim": "noise_dim", "n_channels": "channels", "n_filters": "features"},
    "gnmt": {"hidden_size": "hidden_size", "n_layers": "num_layers", "num_layers": "num_layers"},
}
# Where NERSC's model constructors default otherwise than dlbench's workload (models/cnn3d.py: conv_sizes
# [16, 32, 64, 128] of kernel 3; models/dcgan.py: n_filters=16), the run takes NERSC's default.
_NERSC_MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "cnn3d": {"n_conv_layers": 4, "kernel_size": 3},
    "dcgan": {"features": 16},
}
# What dlbench's workload is beside NERSC's model, for the line a NERSC config run prints.
_VISION = "the same torchvision model"
_NERSC_MODEL_NOTES = {
    "resnet50": _VISION, "alexnet": _VISION, "vgg11": _VISION, "inception_v3": _VISION,
    "lstm": "the same layers: nn.LSTM, then a linear layer on the last hidden state",
    "cnn3d": "CosmoFlow's 3D CNN set to NERSC's 4 blocks of 3x3x3 convolutions, with 32 to 256 filters where NERSC's "
             "has 16 to 128 and dense 128, 64 and an MSE loss where NERSC's has dense 256 and cross-entropy",
    "transformer": "an encoder-decoder translation model with nlayers layers on each side, where NERSC's is an "
                   "encoder-only language model doing less work per token",
    "dcgan": "DCGAN's generator and discriminator as NERSC's, the generator ending in tanh where NERSC's ends in a sigmoid",
    "gnmt": "dlbench's GNMT v2",
}
# Optimizer and learning rate of NERSC's trainers when model_config gives none (trainers/generic.py, gan.py).
_NERSC_TRAINER_LR = {"generic": 0.001, "gan": 0.0002}
# Keys that change neither the model nor the measured training work: bookkeeping of NERSC's script
# (where it writes, its validation pass, its samplers) and the data layout the workload already implies.
_NERSC_BOOKKEEPING = {
    "doc": {"trainer", "output_dir", "data_config", "model_config", "train_config"},
    "data_config": {"name", "n_train", "n_valid", "input_shape", "target_shape", "input_type", "n_classes",
                    "batch_size", "use_dist_sampler_train", "use_dist_sampler_valid"},
    "model_config": {"model_type", "name", "optimizer", "learning_rate"},
    "train_config": {"n_epochs"},
}


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
    """Translate a NERSC pytorch-benchmarks config into RunSpec fields, for dlbench's own implementation of
    its model (NERSC's ``train.py`` itself runs through ``dlbench run --exec``).

    The work it describes is kept: ``steps = n_epochs * n_train // batch_size``. Model keys map to the
    workload's parameters; one with no counterpart is printed and recorded (tag ``nersc_ignored``); a key
    dlbench cannot honour without running something else (another data set, optimizer) is refused.
    """
    data, model, train = (_nersc_section(doc, name, where) for name in ("data_config", "model_config", "train_config"))
    key = "model_type" if "model_type" in model else "name"
    model_type = str(model.get(key) or "").lower()
    if model_type not in _NERSC_MODELS:
        raise UsageError(f"{where}: NERSC model_config.{key} {short_repr(model_type)} has no dlbench workload; "
                         f"known: {', '.join(sorted(_NERSC_MODELS))}.")
    workload = _NERSC_MODELS[model_type]
    dataset = data.get("name", "dummy")
    if dataset != "dummy":
        raise UsageError(f"{where}: data_config.name {short_repr(dataset)} is a data set dlbench does not read "
                         "(it runs NERSC configs on synthetic data, name: dummy); set name: dummy, or run NERSC's "
                         "script itself with dlbench run --exec -- python train.py CONFIG.")
    params = dict(_NERSC_MODEL_DEFAULTS.get(workload, {}))
    params |= _nersc_shape_params(workload, data.get("input_shape"), where)
    if "n_classes" in data and workload not in ("cnn3d", "dcgan"):
        params["num_classes" if workload != "transformer" else "vocab_size"] = data["n_classes"]
    keys = _NERSC_MODEL_KEYS[workload]
    ignored = [name for name in doc if name not in _NERSC_BOOKKEEPING["doc"]]
    for name, section in (("data_config", data), ("model_config", model), ("train_config", train)):
        known = _NERSC_BOOKKEEPING[name] | (set(keys) if name == "model_config" else set())
        ignored += [f"{name}.{k}" for k in section if k not in known]
    shape = data.get("input_shape")
    if workload == "cnn3d" and "input_shape" in model:  # NERSC's CNN3D takes the data's shape again
        ignored.remove("model_config.input_shape")
        _nersc_agree("input_shape", model["input_shape"], "input_shape", shape, where)
        params |= _nersc_shape_params(workload, model["input_shape"], where, "model_config.input_shape")
    if workload == "lstm" and "input_size" in model and shape is not None:
        _nersc_agree("input_size", model["input_size"], "input_shape[1]", shape[1], where)
    for name, value in model.items():
        if name in keys:
            params[keys[name]] = value
    spec: dict[str, Any] = {"workload": workload, "params": params}
    if "batch_size" in data:
        spec["batch_size"] = _nersc_number(data, "data_config", "batch_size", int, where)
    optimizer = str(model.get("optimizer", "Adam")).lower()  # NERSC's trainers build Adam unless told
    if optimizer not in ("adam", "sgd"):
        raise UsageError(f"{where}: model_config.optimizer {short_repr(model['optimizer'])} is not one dlbench "
                         "trains with; use Adam or SGD.")
    spec["optimizer"] = optimizer
    trainer = "gan" if workload == "dcgan" else "generic"
    spec["learning_rate"] = (_nersc_number(model, "model_config", "learning_rate", float, where)
                             if "learning_rate" in model else _NERSC_TRAINER_LR[trainer])
    if "n_train" in data and spec.get("batch_size"):
        epochs = _nersc_number(train, "train_config", "n_epochs", int, where) if "n_epochs" in train else 1
        samples = _nersc_number(data, "data_config", "n_train", int, where)
        spec["steps"] = max(1, epochs * samples // spec["batch_size"])
    # short, as the results table shows tags: whose implementation of the workload ran (NERSC's own runs through
    # --exec, under the workload name of its script)
    spec["tags"] = {"config": "nersc", "implementation": "dlbench"}
    if ignored:
        spec["tags"]["nersc_ignored"] = ", ".join(ignored)
    return spec


def nersc_lines(spec: RunSpec, path: str) -> list[str]:
    """What a run of NERSC config ``path`` prints before it starts (and once it is known to be valid): that it
    runs dlbench's implementation of the model, how the script itself runs, and the keys it ignored. None for
    a run of any other config."""
    if (spec.tags.get("config"), spec.tags.get("implementation")) != ("nersc", "dlbench") \
            or spec.workload not in _NERSC_MODEL_NOTES:  # what from_nersc wrote
        return []
    where = str(path)
    script = f"dlbench run --exec --metric nersc -- python train.py {shell_word(where)}"
    lines = [f"{where} is a NERSC pytorch-benchmarks config; it runs dlbench's own {spec.workload}, not NERSC's "
             f"train.py: {_NERSC_MODEL_NOTES[spec.workload]}. To time the script itself: {script} "
             "(docs/guide/your-code.md)."]
    if "nersc_ignored" in spec.tags:
        lines.append(f"{where}: ignored, as dlbench's {spec.workload} has no counterpart (recorded as tag "
                     f"nersc_ignored): {spec.tags['nersc_ignored']}.")
    return lines


def _nersc_agree(model_key: str, model_value: Any, data_key: str, data_value: Any, where: str) -> None:
    """A model size NERSC gives twice (model_config and data_config) must agree: its script would fail on the
    first batch, and dlbench would have to pick one."""
    if data_value is not None and model_value != data_value:
        raise UsageError(f"{where}: model_config.{model_key} {short_repr(model_value)} does not match "
                         f"data_config.{data_key} {short_repr(data_value)}; make them agree.")


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


def _nersc_shape_params(workload: str, shape: Any, where: str, key: str = "data_config.input_shape") -> dict[str, Any]:
    if shape is None:
        return {}
    if not isinstance(shape, list) or not shape or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
        raise UsageError(f"{where}: {key} must be a list of positive integers, got {short_repr(shape)}.")
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
