"""Every registered workload builds, samples, trains one step, infers and counts FLOPs on CPU."""

from __future__ import annotations

import contextlib
import functools
import math

import pytest
import torch

from dlbench.catalog import registry
from dlbench.catalog._base import StepContext, Workload
from dlbench.engine.loop import count_flops
from dlbench.errors import UsageError

BATCH = 2

#: Tiny sizes (mostly the minima) that still exercise each workload's structure (residuals, aux heads, ...).
TINY: dict[str, dict] = {
    "resnet50": {"image_size": 32, "num_classes": 10},
    "alexnet": {"image_size": 63, "num_classes": 10},
    "vgg11": {"image_size": 32, "num_classes": 10},
    # The auxiliary head needs the full 299 px; test_minimum_image_sizes covers 75 px without it.
    "inception_v3": {"image_size": 299, "num_classes": 10},
    "maskrcnn": {"image_size": 64, "num_classes": 3, "objects_per_image": 2},
    "ssd": {"num_classes": 3, "objects_per_image": 2},  # SSD300: always 300x300
    "cnn3d": {"volume_size": 16, "n_conv_layers": 2},
    "lstm": {"seq_len": 5, "input_size": 8, "hidden_size": 16, "num_layers": 2},
    "transformer": {
        "seq_len": 6, "vocab_size": 100, "d_model": 16, "num_heads": 2, "num_layers": 2,
        "ffn_dim": 32,
    },
    "gnmt": {"seq_len": 6, "vocab_size": 100, "hidden_size": 16, "num_layers": 4},
    "dcgan": {"image_size": 32, "noise_dim": 16, "features": 8},
    # the tiny preset spelled out: the workload records the sizes it resolved
    "llm": {"preset": "tiny", "dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 128,
            "seq_len": 16, "ffn_mult": 3.0, "tied": "false"},
}


@functools.cache
def built(name: str) -> tuple[Workload, torch.nn.Module]:
    assert name in TINY, f"add tiny test sizes for workload {name!r} to TINY"
    torch.manual_seed(0)
    workload = registry.create(name, TINY[name])
    return workload, workload.build_model()


def batch_of(workload: Workload, seed: int = 0) -> tuple[torch.Tensor, ...]:
    return workload.sample(BATCH, torch.Generator().manual_seed(seed))


def first_tensor(out) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out[0]


#: Workloads whose smallest shapes still cost seconds per step on a CPU (inception's 299 px for its auxiliary
#: head, SSD's fixed 300 px, Mask R-CNN's detection heads): their smoke tests run in the slow tier.
FULL_SIZE = {"inception_v3", "ssd", "maskrcnn"}


@pytest.fixture(params=[pytest.param(n, marks=pytest.mark.slow) if n in FULL_SIZE else n for n in registry.names()])
def name(request) -> str:
    return request.param


def test_class_attributes(name):
    cls = registry.get_class(name)
    assert cls.name == name
    assert cls.domain in {"vision", "sequence", "science", "generative"}
    assert cls.description and "\n" not in cls.description
    assert cls.default_batch_size > 0
    assert cls.__doc__
    for key, param in cls.params.items():
        assert param.help, key
        assert param.minimum is None or param.default >= param.minimum, key
        assert param.choices is None or param.default in param.choices, key


def test_describe_lists_params(name):
    workload, _ = built(name)
    described = workload.describe()
    assert described["name"] == name
    assert set(described["params"]) == set(type(workload).params)
    for key, value in workload.params.items():  # the instance holds the resolved values
        assert described["params"][key]["default"] == type(workload).params[key].default
        assert value == TINY[name].get(key, described["params"][key]["default"])


def test_sample_is_deterministic_cpu_and_batched(name):
    workload, _ = built(name)
    first, again, other = batch_of(workload), batch_of(workload), batch_of(workload, seed=1)
    for a, b in zip(first, again, strict=True):
        assert a.device.type == "cpu" and a.shape[0] == BATCH
        assert torch.equal(a, b)
    assert any(not torch.equal(a, c) for a, c in zip(first, other, strict=True))


def test_train_step_updates_every_parameter_group(name):
    workload, model = built(name)
    model.train()
    groups = [list(group) for group in workload.parameter_groups(model)]
    before = [[p.detach().clone() for p in group] for group in groups]
    ctx = StepContext([torch.optim.SGD(group, lr=0.1) for group in groups], contextlib.nullcontext)
    loss = workload.train_step(model, batch_of(workload), ctx)
    assert loss.dim() == 0 and not loss.requires_grad
    assert math.isfinite(loss.item())
    for i, (group, old) in enumerate(zip(groups, before, strict=True)):
        assert any(not torch.equal(p, q) for p, q in zip(group, old, strict=True)), f"group {i}"


def test_flops_are_counted(name):
    workload, model = built(name)
    model.train()
    batch = batch_of(workload)
    flops = count_flops(lambda: workload.loss(model, batch).backward())
    model.zero_grad(set_to_none=True)
    assert flops > 0


def test_lstm_flops_include_the_recurrent_layers():
    workload, model = built("lstm")
    p = workload.params
    t, i, h = p["seq_len"], p["input_size"], p["hidden_size"]
    # Four gates, each a GEMM over [x_t, h_{t-1}], per time step, sample and layer.
    expected = sum(
        2 * 4 * h * ((i if layer == 0 else h) + h) * t * BATCH for layer in range(p["num_layers"])
    )
    with torch.no_grad():
        counted = count_flops(lambda: workload.loss(model, batch_of(workload)))
    # the LSTM GEMMs dominate; the classifier adds a little
    assert expected <= counted <= 1.05 * expected


def test_inference_keeps_batch_dim(name):
    workload, model = built(name)
    model.eval()
    with torch.inference_mode():
        out = workload.inference(model, batch_of(workload))
    model.train()
    if isinstance(out, list):  # detectors: one dict of detections per image
        assert len(out) == BATCH and all({"boxes", "scores", "labels"} <= set(d) for d in out)
    else:
        assert first_tensor(out).shape[0] == BATCH


def test_detection_batches_hold_boxes_inside_the_image_and_box_masks():
    workload, _ = built("maskrcnn")
    images, boxes, labels, masks = batch_of(workload)
    size = workload.params["image_size"]
    assert boxes.shape == (BATCH, 2, 4) and masks.shape == (BATCH, 2, size, size)
    assert bool((boxes[..., :2] >= 0).all() and (boxes[..., 2:] <= size).all() and (boxes[..., 2:] > boxes[..., :2]).all())
    assert bool((labels >= 1).all() and (labels < workload.params["num_classes"]).all())
    area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
    assert torch.allclose(masks.flatten(2).sum(2).float(), area, rtol=0.35)  # pixel grid vs real box


def test_dcgan_trains_both_networks():
    workload, model = built("dcgan")
    generator, discriminator = workload.parameter_groups(model)
    assert {id(p) for p in generator} == {id(p) for p in model.generator.parameters()}
    assert {id(p) for p in discriminator} == {id(p) for p in model.discriminator.parameters()}


# -- registry behaviour ---------------------------------------------------------------------------


def test_unknown_workload_suggests_close_name():
    with pytest.raises(UsageError, match="resnet50"):
        registry.create("resnet5")


def test_unknown_param_names_the_known_ones():
    with pytest.raises(UsageError, match="image_size, num_classes"):
        registry.create("resnet50", {"imagesize": 64})


def test_string_values_are_coerced():
    assert registry.resolve_params("resnet50", {"image_size": "64"})["image_size"] == 64
    with pytest.raises(UsageError, match="must be an? int"):
        registry.resolve_params("resnet50", {"image_size": "abc"})


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("inception_v3", {"image_size": 74}, "at least 75"),
        ("inception_v3", {"image_size": 224}, "aux_logits=false"),
        ("alexnet", {"image_size": 62}, "at least 63"),
        ("vgg11", {"image_size": 31}, "at least 32"),
        ("dcgan", {"image_size": 48}, "must be one of 32, 64, 128"),
        ("gnmt", {"num_layers": 1}, "at least 2"),
        ("cnn3d", {"volume_size": 16}, "n_conv_layers"),
        ("transformer", {"d_model": 10, "num_heads": 4}, "divides d_model"),
    ],
)
def test_invalid_sizes_are_rejected(name, params, message):
    with pytest.raises(UsageError, match=message):
        registry.create(name, params)


@pytest.mark.parametrize(
    ("name", "extra"), [("alexnet", {}), ("vgg11", {}), ("inception_v3", {"aux_logits": False})]
)
def test_minimum_image_sizes(name, extra):
    """The declared minimum image size trains; one pixel less fails in the model itself."""
    minimum = int(registry.get_class(name).params["image_size"].minimum)
    workload = registry.create(name, {"image_size": minimum, "num_classes": 10} | extra)
    model = workload.build_model().train()
    workload.loss(model, workload.sample(BATCH, torch.Generator().manual_seed(0))).backward()
    with torch.no_grad(), pytest.raises(RuntimeError):
        model(torch.zeros(BATCH, 3, minimum - 1, minimum - 1))
