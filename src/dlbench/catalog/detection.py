"""Object detection: torchvision's detection models on synthetic COCO-shaped data, for throughput.

* ``maskrcnn`` — Mask R-CNN with a ResNet-50 FPN backbone, MLPerf Training's heavy-weight object
  detection model (v0.5-v3.1), at COCO's 800 px short side by default.
* ``ssd`` — SSD300 with torchvision's VGG-16 backbone. MLPerf Training v0.5-v0.7's light-weight
  detector is SSD300 too, but on ResNet-34; torchvision ships no ResNet-34 SSD, so the numbers are
  those of the VGG-16 variant (heavier per image).

Models are built with ``weights=None`` and ``weights_backbone=None``: nothing is downloaded.
A batch is (images, boxes, labels[, masks]) with a fixed number of objects per image (COCO averages
about 7); the detectors' transform keeps the given image size (``min_size = max_size``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlbench.catalog._base import Batch, Param, Workload
from dlbench.catalog._lazy import lazy_import

torch = lazy_import("torch")  # imported when a model is built: 'dlbench list' stays torch-free
tv_detection = lazy_import("torchvision.models.detection")

if TYPE_CHECKING:  # annotations only
    from torch import nn


def _boxes(batch_size: int, objects: int, size: int, generator: torch.Generator) -> torch.Tensor:
    """Random boxes (B, K, 4) as (x0, y0, x1, y1), each 5-50% of the image side."""
    wh = size * (0.05 + 0.45 * torch.rand(batch_size, objects, 2, generator=generator))
    corner = (size - wh) * torch.rand(batch_size, objects, 2, generator=generator)
    return torch.cat((corner, corner + wh), dim=2)


def _targets(batch: Batch, with_masks: bool) -> list[dict[str, torch.Tensor]]:
    """torchvision's per-image target dicts from a stacked batch."""
    _, boxes, labels, *rest = batch
    targets = [{"boxes": b, "labels": lab} for b, lab in zip(boxes, labels)]
    if with_masks:
        for target, masks in zip(targets, rest[0]):
            target["masks"] = masks
    return targets


class _Detector(Workload):
    """A torchvision detector trained on random images with random boxes (and box-shaped masks)."""

    domain = "vision"
    with_masks = False

    def image_size(self) -> int:
        return self.params["image_size"]

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        size, objects = self.image_size(), self.params["objects_per_image"]
        images = torch.rand(batch_size, 3, size, size, generator=generator)  # (B, 3, S, S)
        boxes = _boxes(batch_size, objects, size, generator)  # (B, K, 4)
        labels = torch.randint(1, self.params["num_classes"], (batch_size, objects), generator=generator)  # (B, K)
        if not self.with_masks:
            return images, boxes, labels
        coords = torch.arange(size, dtype=torch.float32)
        x0, y0, x1, y1 = (boxes[..., i, None, None] for i in range(4))  # (B, K, 1, 1) each
        inside_x = (coords.view(1, 1, 1, -1) >= x0) & (coords.view(1, 1, 1, -1) < x1)  # (B, K, 1, S)
        inside_y = (coords.view(1, 1, -1, 1) >= y0) & (coords.view(1, 1, -1, 1) < y1)  # (B, K, S, 1)
        return images, boxes, labels, (inside_x & inside_y).to(torch.uint8)  # masks (B, K, S, S)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        losses = model(list(batch[0]), _targets(batch, self.with_masks))
        return sum(losses.values())

    def inference(self, model: nn.Module, batch: Batch) -> Any:
        """The detections of each image (a list of dicts, one per image)."""
        return model(list(batch[0]))


class MaskRCNN(_Detector):
    """Mask R-CNN, ResNet-50 FPN (torchvision), MLPerf Training's heavy-weight object detection."""

    name = "maskrcnn"
    description = "Mask R-CNN ResNet-50 FPN (MLPerf heavy-weight object detection) on synthetic COCO-sized images."
    default_batch_size = 2
    with_masks = True
    params = {
        "image_size": Param(800, "height and width of the square images (COCO: short side 800)", minimum=64),
        "num_classes": Param(91, "classes including the background (COCO: 91)", minimum=2),
        "objects_per_image": Param(7, "objects (boxes and masks) per image (COCO averages about 7)", minimum=1),
    }

    def build_model(self) -> nn.Module:
        size = self.params["image_size"]
        return tv_detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=self.params["num_classes"],
                                     min_size=size, max_size=size)


class SSD300(_Detector):
    """SSD300 (torchvision, VGG-16 backbone): single-shot detection at 300x300 pixels."""

    name = "ssd"
    description = "SSD300 VGG-16 single-shot detector (MLPerf light-weight detection used ResNet-34) on synthetic images."
    default_batch_size = 32
    # From random weights (no pretrained VGG-16, no batch norm, conv4_3 rescaled x20 by L2Norm) the first gradient's
    # norm is ~6e3: SGD at the default lr 0.01 (even 0.001), momentum 0.9, moves the weights so far that the loss
    # is ~1e13 at step 2 and NaN from step 3 -- every run of the quick suite diverged. Clipping the norm to 10
    # keeps the loss finite and falling (245 -> 22 in 8 steps); it costs one norm over the gradients per step.
    max_grad_norm = 10.0
    # No image_size: SSD300's extra layers are built for 300x300 (torchvision fixes the size).
    params = {
        "num_classes": Param(91, "classes including the background (COCO: 91)", minimum=2),
        "objects_per_image": Param(7, "objects (boxes) per image (COCO averages about 7)", minimum=1),
    }

    def image_size(self) -> int:
        return 300

    def build_model(self) -> nn.Module:
        return tv_detection.ssd300_vgg16(weights=None, weights_backbone=None, num_classes=self.params["num_classes"])
