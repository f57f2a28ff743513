"""Image classification: torchvision architectures on synthetic ImageNet-shaped data.

Models are built with ``weights=None``: nothing is downloaded and the throughput of a randomly
initialised network is the same as a pretrained one's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from dlbench.catalog._base import Batch, Param, Workload
from dlbench.catalog._lazy import lazy_import
from dlbench.errors import UsageError

torch = lazy_import("torch")
F = lazy_import("torch.nn.functional")
tv_models = lazy_import("torchvision.models")
tv_inception = lazy_import("torchvision.models.inception")

if TYPE_CHECKING:  # annotations only: nn is imported when a model is built
    from torch import nn


def _image_params(default_size: int, minimum_size: int) -> dict[str, Param]:
    return {
        "image_size": Param(
            default_size,
            f"height and width of the square input images (at least {minimum_size})",
            minimum=minimum_size,
        ),
        "num_classes": Param(1000, "number of output classes (ImageNet: 1000)", minimum=1),
    }


class _ImageClassifier(Workload):
    """A torchvision classifier trained with cross-entropy on random images and labels."""

    domain = "vision"
    arch: ClassVar[str]  # the torchvision.models builder name

    def model_kwargs(self) -> dict[str, Any]:
        """Extra keyword arguments for the torchvision builder."""
        return {}

    def build_model(self) -> nn.Module:
        builder = getattr(tv_models, self.arch)
        return builder(weights=None, num_classes=self.params["num_classes"], **self.model_kwargs())

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        size = self.params["image_size"]
        images = torch.randn(batch_size, 3, size, size, generator=generator)  # (B, 3, S, S)
        labels = torch.randint(
            0, self.params["num_classes"], (batch_size,), generator=generator
        )  # (B,) int64
        return images, labels

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        images, labels = batch
        return F.cross_entropy(model(images), labels)  # logits (B, C)


class ResNet50(_ImageClassifier):
    """ResNet-50 v1.5 (torchvision), the MLPerf Training image-classification model."""

    name = "resnet50"
    description = "ResNet-50 image classifier (MLPerf image classification) on synthetic ImageNet."
    # Training keeps ~80 MB of activations per 224 px image in fp32, so 64 fits any 16 GB GPU with
    # room for cuDNN workspaces; NERSC's pytorch-benchmarks used 128 (raise it with --batch-size).
    default_batch_size = 64
    # Five stride-2 stages: below 32 px the last stage has nothing left to downsample.
    params = _image_params(224, 32)
    arch = "resnet50"


class AlexNet(_ImageClassifier):
    """AlexNet (Krizhevsky et al. 2012), torchvision's single-tower variant."""

    name = "alexnet"
    description = "AlexNet image classifier on synthetic ImageNet."
    # 128 is the batch size of the AlexNet paper and of NERSC's pytorch-benchmarks.
    default_batch_size = 128
    # The 11x11/stride-4 stem and three 3x3/stride-2 max-pools need at least 63 px.
    params = _image_params(224, 63)
    arch = "alexnet"


class VGG11(_ImageClassifier):
    """VGG-11 (configuration A of Simonyan & Zisserman 2014), without batch norm."""

    name = "vgg11"
    description = "VGG-11 image classifier on synthetic ImageNet."
    # 128 as in NERSC's pytorch-benchmarks: ~47 MB of activations per 224 px image in fp32, ~6 GB
    # in all (the VGG paper trained with 256 over 4 GPUs).
    default_batch_size = 128
    # Five 2x2 max-pools: 32 px is the smallest input that survives them.
    params = _image_params(224, 32)
    arch = "vgg11"


class InceptionV3(_ImageClassifier):
    """Inception v3 (Szegedy et al. 2016) with its auxiliary classifier, trained at 299 px."""

    name = "inception_v3"
    description = "Inception v3 image classifier (with auxiliary head) on synthetic ImageNet."
    # Same per-GPU batch as ResNet-50: ~95 MB of activations per 299 px image in fp32.
    default_batch_size = 64
    # torchvision documents 75 px as the smallest input the reduction blocks accept; the auxiliary
    # head is stricter (checked in __init__).
    params = _image_params(299, 75) | {
        "aux_logits": Param(True, "train the auxiliary classifier too (needs image_size >= 299)"),
    }
    arch = "inception_v3"

    #: The auxiliary head's 5x5 average pool and 5x5 conv need the 17x17 grid of a 299 px input.
    AUX_MIN_SIZE = 299

    def __init__(self, **params: Any):
        super().__init__(**params)
        size = self.params["image_size"]
        if self.params["aux_logits"] and size < self.AUX_MIN_SIZE:
            raise UsageError(
                f"inception_v3 image_size={size} is too small for the auxiliary classifier, which "
                f"needs at least {self.AUX_MIN_SIZE}; raise image_size or pass aux_logits=false."
            )

    def model_kwargs(self) -> dict[str, Any]:
        # init_weights=True is the reference truncated-normal init; torchvision now draws it with
        # torch (no scipy), so it is as fast to build as the default init.
        return {"aux_logits": self.params["aux_logits"], "init_weights": True}

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        images, labels = batch
        out = model(images)
        if isinstance(out, tv_inception.InceptionOutputs):  # train mode with aux: (logits, aux_logits), (B, C)
            # Weight 0.4 on the auxiliary loss, as in torchvision's reference training script.
            return F.cross_entropy(out.logits, labels) + 0.4 * F.cross_entropy(
                out.aux_logits, labels
            )
        return F.cross_entropy(out, labels)  # eval mode or no aux head: logits (B, C)
