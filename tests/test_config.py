import textwrap

import pytest

from dlbench.config import builtin_suite, load_config
from dlbench.errors import UsageError
from dlbench.spec import RunSpec, make_spec, parse_key_values

# The layout of NERSC's pytorch-benchmarks configs (configs/resnet50.yaml, configs/lstm.yaml there).
NERSC_RESNET50 = """\
trainer: generic
output_dir: $BENCHMARK_RESULTS_PATH/resnet50

data_config:
    name: dummy
    n_train: 2048
    n_valid: 2048
    input_shape: [3, 224, 224]
    n_classes: 1000
    batch_size: 128
    use_dist_sampler_train: false
    use_dist_sampler_valid: false

model_config:
    model_type: resnet50
    num_classes: 1000
    optimizer: 'Adam'
    learning_rate: 0.001

train_config:
    n_epochs: 1
"""

NERSC_LSTM = """\
trainer: generic
data_config:
    name: dummy
    n_train: 2048
    input_shape: [50, 500] # (seq_size, input_size)
    n_classes: 4
    batch_size: 64
model_config:
    model_type: lstm
    input_size: 500
    hidden_size: 500
    n_classes: 4
    optimizer: 'Adam'
    learning_rate: 0.001
train_config:
    n_epochs: 8
"""


def write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_single_run_file(tmp_path):
    (spec,) = load_config(write(tmp_path, "workload: lstm\nsteps: 3\nparams: {seq_len: 8}\n"))
    assert spec == RunSpec(workload="lstm", steps=3, params={"seq_len": 8})


def test_suite_merges_defaults_and_overrides(tmp_path):
    path = write(tmp_path, """
        name: mine
        defaults: {steps: 3, params: {image_size: 64}, tags: {site: a}}
        runs:
          - {workload: resnet50, tags: {x: "1"}}
          - {workload: vgg11, params: {num_classes: 10}, steps: 4}
    """)
    a, b = load_config(path, overrides={"device": "cpu", "tags": {"who": "me"}})
    assert a.steps == 3 and a.params == {"image_size": 64} and a.device == "cpu"
    assert a.tags == {"site": "a", "x": "1", "who": "me"}
    assert b.steps == 4 and b.params == {"image_size": 64, "num_classes": 10}


def test_nersc_resnet50_config(tmp_path):
    (spec,) = load_config(write(tmp_path, NERSC_RESNET50))
    assert spec.workload == "resnet50"
    assert spec.params == {"image_size": 224, "num_classes": 1000}
    assert spec.batch_size == 128
    assert spec.optimizer == "adam" and spec.learning_rate == 0.001
    assert spec.steps == 2048 // 128  # one epoch of n_train samples
    assert spec.tags == {"config": "nersc", "implementation": "dlbench"}


def test_nersc_lstm_config(tmp_path):
    (spec,) = load_config(write(tmp_path, NERSC_LSTM))
    assert spec.workload == "lstm"
    assert spec.params == {"seq_len": 50, "input_size": 500, "hidden_size": 500, "num_classes": 4}
    assert spec.steps == 8 * 2048 // 64


@pytest.mark.parametrize(
    "text, message",
    [
        ("workload: lstm\nstepz: 3\n", "unknown key 'stepz'"),
        ("workload: lstm\nsteps: 0\n", "steps=0"),
        ("workload: lstm\ndevice: gpu\n", "device='gpu'"),
        ("workload: [unclosed\n", "not valid YAML at line"),
        ("- just\n- a list\n", "expected a mapping"),
        ("runs: []\n", "non-empty list"),
        ("steps: 3\n", "'workload' is required"),
        ("model_config: {model_type: unet}\n", "NERSC model_config.model_type 'unet'"),
    ],
)
def test_bad_files_give_one_clear_sentence(tmp_path, text, message):
    with pytest.raises(UsageError, match=message):
        load_config(write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(UsageError, match="cannot read config file"):
        load_config(tmp_path / "nope.yaml")


def test_yaml_is_loaded_safely(tmp_path):
    with pytest.raises(UsageError):
        load_config(write(tmp_path, "workload: !!python/object/apply:os.system ['true']\n"))


def test_builtin_suites_cover_the_catalogue():
    from dlbench.catalog import registry

    for name in ("quick", "standard"):
        specs = builtin_suite(name)
        assert {s.workload for s in specs} == set(registry.names())
        for s in specs:
            registry.create(s.workload, s.params)  # every param is valid and consistent
    with pytest.raises(UsageError, match="unknown suite 'quik'; did you mean 'quick'"):
        builtin_suite("quik")


def test_the_llm_suites_resolve_every_layout():
    from dlbench.api.resolve import resolve_train

    runs = [resolve_train(spec) for spec in builtin_suite("llm")]
    assert [r.record_spec["layout"] and r.record_spec["layout"]["parallel"] for r in runs] == [
        None, "ddp", "fsdp", "tp", "pp", "fsdp+tp"]
    assert {r.record_spec["global_batch_size"] for r in runs} == {8}  # one global batch: losses comparable
    gpu = builtin_suite("llm-gpu")
    assert {s.params["preset"] for s in gpu} == {"1b"} and any(s.compile for s in gpu)


def test_key_values():
    assert parse_key_values(["a=1", "b = x"], "--tag") == {"a": "1", "b": "x"}
    with pytest.raises(UsageError, match="NAME=VALUE"):
        parse_key_values(["novalue"], "--param")


def test_make_spec_rejects_non_scalar_params():
    with pytest.raises(UsageError, match="params"):
        make_spec({"workload": "lstm", "params": {"seq_len": [1, 2]}})


def test_the_shipped_nersc_example_loads_as_the_test_config_does():
    """examples/nersc-lstm.yaml is the file the README points to (issue 24: none shipped)."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "nersc-lstm.yaml"
    (spec,) = load_config(example)
    assert spec.workload == "lstm" and spec.steps == 8 * 2048 // 64
    assert spec.params == {"seq_len": 50, "input_size": 500, "hidden_size": 500, "num_classes": 4}
