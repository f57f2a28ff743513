"""YAML configuration files: one run, a suite, or a NERSC pytorch-benchmarks config.

* one run: a mapping of :class:`~dlbench.spec.RunSpec` fields (``workload: resnet50`` …);
* a suite: ``{name: …, defaults: {…}, runs: [{…}, …]}`` — each run is ``defaults`` updated by its
  own keys (``params`` and ``tags`` are merged key by key);
* NERSC pytorch-benchmarks (``trainer``, ``data_config``, ``model_config``, ``train_config``), translated
  by :func:`from_nersc` so existing configs run unchanged.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dlbench.errors import UsageError, unknown_name
from dlbench.spec import RunSpec, make_spec

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


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file safely; a missing or malformed file is a usage error naming it."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read config file {str(path)!r} ({exc.strerror}); check the path.") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "malformed YAML"
        raise UsageError(f"config file {str(path)!r} is not valid YAML{where}: {problem}; fix the file.") from None


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
    overrides = overrides or {}
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: expected a mapping of run settings or a suite with 'runs:', got {type(doc).__name__}.")
    if "model_config" in doc or "data_config" in doc:
        entries = [from_nersc(doc, where)]
    elif "runs" in doc:
        extra = set(doc) - {"name", "description", "defaults", "runs"}
        if extra:
            raise UsageError(f"{where}: unknown suite key {sorted(extra)[0]!r}; a suite has name, description, defaults and runs.")
        runs = doc["runs"]
        if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
            raise UsageError(f"{where}: 'runs' must be a non-empty list of mappings.")
        defaults = doc.get("defaults") or {}
        entries = [merge(defaults, run) for run in runs]
    else:
        entries = [doc]
    return [make_spec(merge(entry, overrides), f"{where}, run {i + 1}" if len(entries) > 1 else where)
            for i, entry in enumerate(entries)]


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
    data = doc.get("data_config") or {}
    model = doc.get("model_config") or {}
    train = doc.get("train_config") or {}
    model_type = str(model.get("model_type") or model.get("name") or "").lower()
    if model_type not in _NERSC_MODELS:
        raise UsageError(f"{where}: NERSC model_type {model_type!r} has no dlbench workload; known: {', '.join(sorted(_NERSC_MODELS))}.")
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
        spec["batch_size"] = int(data["batch_size"])
    if "optimizer" in model:
        spec["optimizer"] = str(model["optimizer"]).lower()
    if "learning_rate" in model:
        spec["learning_rate"] = float(model["learning_rate"])
    if "n_train" in data and spec.get("batch_size"):
        spec["steps"] = max(1, int(train.get("n_epochs", 1)) * int(data["n_train"]) // spec["batch_size"])
    spec["tags"] = {"config": "nersc"}
    return spec


def _nersc_shape_params(workload: str, shape: Any, where: str) -> dict[str, Any]:
    if shape is None:
        return {}
    if not isinstance(shape, list) or not all(isinstance(n, int) for n in shape):
        raise UsageError(f"{where}: data_config.input_shape must be a list of integers, got {shape!r}.")
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
