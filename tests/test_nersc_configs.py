"""NERSC pytorch-benchmarks configs (issue 45, item 4): each of the 8 shapes of that repository's ``configs/``
runs dlbench's own implementation of its model, with every key that changes the model honoured or named as
ignored, and says so; a key dlbench cannot honour is refused in one sentence naming it.

The configs below are written here (that repository has no licence): the same sections and keys as its
alexnet, cnn3d, dcgan, inceptionV3, lstm, resnet50, transformer and vgg11 configs, with their sizes.
"""

import json

import pytest
import yaml

from dlbench.cli.app import main
from dlbench.config import load_config, nersc_lines
from dlbench.errors import UsageError

_SAMPLERS = {"use_dist_sampler_train": False, "use_dist_sampler_valid": False}


def nersc(model: dict, data: dict, trainer: str = "generic", epochs: int = 4) -> dict:
    return {"trainer": trainer, "output_dir": f"results/{model.get('model_type', model.get('name'))}",
            "data_config": {"name": "dummy", **data, **_SAMPLERS}, "model_config": model,
            "train_config": {"n_epochs": epochs}}


def _image(model_type: str, size: int, n: int, **extra) -> dict:
    return nersc({"model_type": model_type, "num_classes": 1000, **extra, "optimizer": "Adam", "learning_rate": 0.001},
                 {"n_train": n, "n_valid": n, "input_shape": [3, size, size], "n_classes": 1000, "batch_size": 128})


#: name → (config, workload, params, batch size, steps, learning rate) as dlbench runs it.
CONFIGS = {
    "alexnet": (_image("alexnet", 224, 16384), "alexnet", {"image_size": 224, "num_classes": 1000}, 128, 4 * 16384 // 128,
                0.001),
    "resnet50": (_image("resnet50", 224, 4096), "resnet50", {"image_size": 224, "num_classes": 1000}, 128, 128, 0.001),
    "vgg11": (_image("vgg11", 224, 4096), "vgg11", {"image_size": 224, "num_classes": 1000}, 128, 128, 0.001),
    "inceptionV3": (_image("inception_v3", 299, 4096, aux_logits=False), "inception_v3",
                    {"image_size": 299, "num_classes": 1000, "aux_logits": False}, 128, 128, 0.001),
    "cnn3d": (nersc({"model_type": "cnn3d", "input_shape": [1, 64, 64, 64], "output_size": 4, "optimizer": "Adam",
                     "learning_rate": 0.001},
                    {"n_train": 8192, "n_valid": 8192, "input_shape": [1, 64, 64, 64], "n_classes": 4, "batch_size": 128}),
              "cnn3d", {"in_channels": 1, "volume_size": 64, "n_targets": 4, "n_conv_layers": 4, "kernel_size": 3},
              128, 256, 0.001),
    "dcgan": (nersc({"name": "dcgan", "noise_dim": 64, "n_channels": 3},
                    {"n_train": 65536, "n_valid": 65536, "input_shape": [3, 64, 64], "target_shape": None,
                     "batch_size": 128}, trainer="gan"),
              "dcgan", {"image_size": 64, "channels": 3, "noise_dim": 64, "features": 16}, 128, 2048, 0.0002),
    "lstm": (nersc({"model_type": "lstm", "input_size": 512, "hidden_size": 512, "output_size": 8, "n_lstm_layers": 4,
                    "optimizer": "Adam", "learning_rate": 0.001},
                   {"n_train": 32768, "n_valid": 32768, "input_shape": [64, 512], "n_classes": 4, "batch_size": 128}),
             "lstm", {"seq_len": 64, "input_size": 512, "hidden_size": 512, "num_classes": 8, "num_layers": 4},
             128, 1024, 0.001),
    "transformer": (nersc({"model_type": "transformer", "ntoken": 1024, "ninp": 512, "nhid": 512, "nhead": 8,
                           "nlayers": 4, "optimizer": "Adam", "learning_rate": 0.01},
                          {"n_train": 8192, "n_valid": 8192, "input_shape": [512], "target_shape": [512],
                           "input_type": "label", "n_classes": 1024, "batch_size": 32}),
                    "transformer", {"seq_len": 512, "vocab_size": 1024, "d_model": 512, "ffn_dim": 512, "num_heads": 8,
                                    "num_layers": 4}, 32, 1024, 0.01),
}

#: Sizes that make each run take a fraction of a second (given on the command line, as a user would).
TINY = {
    "alexnet": {"image_size": 63, "num_classes": 10},
    "resnet50": {"image_size": 32, "num_classes": 10},
    "vgg11": {"image_size": 32, "num_classes": 10},
    "inceptionV3": {"image_size": 75, "num_classes": 10},
    "cnn3d": {"volume_size": 16},
    "dcgan": {"image_size": 32, "noise_dim": 8, "features": 4},
    "lstm": {"seq_len": 4, "input_size": 8, "hidden_size": 8},
    "transformer": {"seq_len": 8, "vocab_size": 64, "d_model": 16, "ffn_dim": 32, "num_heads": 2, "num_layers": 1},
}


def write(tmp_path, doc: dict, name: str = "c.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_maps_every_model_key(tmp_path, name):
    doc, workload, params, batch_size, steps, lr = CONFIGS[name]
    (spec,) = load_config(write(tmp_path, doc))
    assert (spec.workload, spec.params, spec.batch_size, spec.steps) == (workload, params, batch_size, steps)
    assert spec.optimizer == "adam" and spec.learning_rate == lr  # NERSC's trainers: Adam, 0.001 (GAN: 0.0002)
    assert spec.tags == {"config": "nersc", "implementation": "dlbench"}


# AlexNet's and VGG-11's dense layers (~60 M and ~130 M weights, whatever the image size) and Inception v3's depth
# take 5-15 s a step with Adam on a busy 2-core host: those three run in the slow tier.
HEAVY = {"alexnet", "vgg11", "inceptionV3"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in sorted(CONFIGS)])
def test_each_config_runs_dlbenchs_model_and_says_so(tmp_path, monkeypatch, capsys, name):
    monkeypatch.setenv("DLBENCH_DB", str(tmp_path / "runs.db"))
    doc, workload, params, _, _, lr = CONFIGS[name]
    path = write(tmp_path, doc, f"{name}.yaml")
    sizes = [arg for key, value in TINY[name].items() for arg in ("-p", f"{key}={value}")]
    code = main(["run", "--config", str(path), *sizes, "-b", "2", "--steps", "1", "--warmup", "0", "--threads", "1",
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (record,) = json.loads(out)
    assert record["status"] == "ok" and record["result"]["samples_per_s"] > 0
    spec = record["spec"]
    assert spec["workload"] == workload and spec["learning_rate"] == lr and spec["optimizer"] == "adam"
    assert spec["params"] == params | TINY[name]  # the config's model keys, then the command line's sizes
    assert spec["tags"] == {"config": "nersc", "implementation": "dlbench"}
    said = next(line for line in err.splitlines() if "NERSC pytorch-benchmarks config" in line)
    assert f"it runs dlbench's own {workload}, not NERSC's train.py" in said
    assert f"dlbench run --exec --metric nersc -- python train.py {path}" in said
    assert "ignored" not in err  # every key of these 8 is honoured or changes neither the model nor the work


def test_a_key_with_no_counterpart_is_named_printed_and_recorded(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DLBENCH_DB", str(tmp_path / "runs.db"))
    doc = CONFIGS["transformer"][0]
    doc = doc | {"model_config": doc["model_config"] | {"dropout": 0.2}, "train_config": {"n_epochs": 1, "lr_warmup": 3}}
    path = write(tmp_path, doc)
    (spec,) = load_config(path)
    assert spec.tags["nersc_ignored"] == "model_config.dropout, train_config.lr_warmup"
    lines = nersc_lines(spec, str(path))
    assert lines[1] == (f"{path}: ignored, as dlbench's transformer has no counterpart (recorded as tag nersc_ignored): "
                        "model_config.dropout, train_config.lr_warmup.")
    assert "an encoder-decoder translation model" in lines[0]  # how dlbench's differs from NERSC's is said
    sizes = [arg for key, value in TINY["transformer"].items() for arg in ("-p", f"{key}={value}")]
    code = main(["run", "--config", str(path), *sizes, "-b", "2", "--steps", "1", "--warmup", "0", "--threads", "1",
                 "--lr", "0.5", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (record,) = json.loads(out)
    assert record["spec"]["tags"]["nersc_ignored"] == "model_config.dropout, train_config.lr_warmup"
    assert record["spec"]["learning_rate"] == 0.5  # the command line wins over the file's 0.01
    assert [line.removeprefix("dlbench: ") for line in err.splitlines() if str(path) in line] == lines


def test_other_configs_print_nothing(tmp_path):
    (spec,) = load_config(write(tmp_path, {"workload": "lstm", "tags": {"config": "nersc"}}))
    assert nersc_lines(spec, "c.yaml") == []
    (spec,) = load_config(write(tmp_path, {"workload": "llm", "tags": {"config": "nersc", "implementation": "dlbench"}}))
    assert nersc_lines(spec, "c.yaml") == []  # no NERSC model is dlbench's llm


def test_cnn3d_takes_its_shape_from_the_model_when_the_data_gives_none(tmp_path):
    doc = CONFIGS["cnn3d"][0]
    doc = doc | {"data_config": {k: v for k, v in doc["data_config"].items() if k != "input_shape"},
                 "model_config": doc["model_config"] | {"input_shape": [2, 32, 32, 32]}}
    (spec,) = load_config(write(tmp_path, doc))
    assert (spec.params["in_channels"], spec.params["volume_size"]) == (2, 32) and "nersc_ignored" not in spec.tags


def _with(config: str, section: str, **keys) -> dict:
    doc = CONFIGS[config][0]
    return doc | {section: doc[section] | keys}


@pytest.mark.parametrize("doc, message", [
    (_with("resnet50", "data_config", name="cifar10"), "data_config.name 'cifar10' is a data set dlbench does not read"),
    (_with("resnet50", "model_config", optimizer="RMSprop"), "model_config.optimizer 'RMSprop' is not one dlbench"),
    (_with("lstm", "model_config", input_size=256), "model_config.input_size 256 does not match data_config.input_shape[1] 512"),
    (_with("cnn3d", "model_config", input_shape=[4, 64, 64, 64]), "model_config.input_shape [4, 64, 64, 64] does not match"),
    (_with("resnet50", "model_config", model_type="cnn2d"), "NERSC model_config.model_type 'cnn2d' has no dlbench workload"),
    (_with("dcgan", "model_config", name="wgan"), "NERSC model_config.name 'wgan' has no dlbench workload"),
    (_with("cnn3d", "data_config", input_shape=None) | {"model_config": {"model_type": "cnn3d", "input_shape": "big"}},
     "model_config.input_shape must be a list of positive integers, got 'big'"),
])
def test_what_cannot_be_honoured_is_refused_naming_the_key(tmp_path, capsys, doc, message):
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(write(tmp_path, doc))
    assert main(["run", "--config", str(tmp_path / "c.yaml"), "--no-store"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
