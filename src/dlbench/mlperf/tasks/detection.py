"""Light-weight object detection to an mAP target, modelled on MLPerf Training's SSD (ResNet-34
backbone on COCO, 23% mAP).

A single-shot detector (Liu et al. 2016) on generated 32x32 images holding 1-3 shapes of three
classes: default boxes of several sizes and aspect ratios on two feature maps (8x8 and 4x4), a
class and a box-offset head on each, box targets encoded with SSD's variances, hard negative
mining at 3:1, and per-class NMS at evaluation. Quality is COCO-style mAP (averaged over IoU
thresholds 0.50:0.05:0.95) on the eval set, MLPerf SSD's metric.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from dlbench.mlperf.tasks._base import Batch, Optimizer, Task, seeded_generator
from dlbench.mlperf.tasks.metrics import (
    COCO_IOU_THRESHOLDS,
    box_iou,
    mean_average_precision,
)
from dlbench.mlperf.tasks.shapes import detection_images

IMAGE_SIZE = 32
CLASSES = (0, 1, 2, 3, 4, 5)  # every shape in shapes.SHAPES
TRAIN_SAMPLES = 2048
EVAL_SAMPLES = 512
# (feature-map side, stride, [(size px, aspect w/h), ...]) — sizes cover the 6-15 px objects.
FEATURE_MAPS = (
    (8, 4, ((6.0, 1.0), (8.5, 1.0), (7.0, 2.0), (7.0, 0.5))),
    (4, 8, ((11.0, 1.0), (15.0, 1.0), (13.0, 2.0), (13.0, 0.5))),
)
ANCHORS_PER_CELL = 4
VARIANCES = (0.1, 0.2)  # SSD's box-coding variances for centre and size
MATCH_IOU = 0.5
NEGATIVES_PER_POSITIVE = 3


def default_boxes() -> torch.Tensor:
    """Every default box as (cx, cy, w, h) in pixels, in the order the heads predict them: (A, 4)."""
    boxes = []
    for side, stride, shapes in FEATURE_MAPS:
        for y, x in itertools.product(range(side), range(side)):
            cx, cy = (x + 0.5) * stride, (y + 0.5) * stride
            for size, aspect in shapes:
                boxes.append((cx, cy, size * aspect**0.5, size / aspect**0.5))
    return torch.tensor(boxes)


def to_corners(boxes: torch.Tensor) -> torch.Tensor:
    """(cx, cy, w, h) → (x0, y0, x1, y1)."""
    return torch.cat((boxes[..., :2] - boxes[..., 2:] / 2, boxes[..., :2] + boxes[..., 2:] / 2), dim=-1)


def encode(matched: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Corner boxes matched to each anchor (A, 4) → SSD offsets (A, 4)."""
    wh = matched[:, 2:] - matched[:, :2]
    centre = matched[:, :2] + wh / 2
    return torch.cat((
        (centre - anchors[:, :2]) / (anchors[:, 2:] * VARIANCES[0]),
        torch.log(wh.clamp(min=1e-3) / anchors[:, 2:]) / VARIANCES[1],
    ), dim=1)


def decode(offsets: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """SSD offsets (..., A, 4) → corner boxes (..., A, 4)."""
    centre = anchors[:, :2] + offsets[..., :2] * VARIANCES[0] * anchors[:, 2:]
    wh = anchors[:, 2:] * torch.exp(offsets[..., 2:] * VARIANCES[1])
    return to_corners(torch.cat((centre, wh), dim=-1))


def match(gt_boxes: torch.Tensor, gt_labels: torch.Tensor, anchors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SSD matching: an anchor takes the object it overlaps most if IoU >= 0.5, and every object
    takes its best anchor whatever the IoU. Returns class targets (A,) (0 = background) and box
    offsets (A, 4)."""
    ious = box_iou(to_corners(anchors), gt_boxes)  # (A, G)
    best_iou, best_gt = ious.max(dim=1)  # per anchor
    best_iou[ious.argmax(dim=0)] = 1.0  # every object keeps its best anchor
    best_gt[ious.argmax(dim=0)] = torch.arange(gt_boxes.shape[0])
    classes = torch.where(best_iou >= MATCH_IOU, gt_labels[best_gt], torch.zeros_like(best_gt))
    return classes, encode(gt_boxes[best_gt], anchors)


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class SmallSSD(nn.Module):
    """Backbone to an 8x8 and a 4x4 feature map, with a class head and a box head on each."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = num_classes  # with the background
        self.stage1 = nn.Sequential(_conv(3, 32), _conv(32, 32, 2), _conv(32, 64, 2), _conv(64, 64))  # 8x8
        self.stage2 = nn.Sequential(_conv(64, 128, 2), _conv(128, 128))  # 4x4
        self.class_heads = nn.ModuleList(nn.Conv2d(c, ANCHORS_PER_CELL * num_classes, 3, padding=1) for c in (64, 128))
        self.box_heads = nn.ModuleList(nn.Conv2d(c, ANCHORS_PER_CELL * 4, 3, padding=1) for c in (64, 128))

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f1 = self.stage1(images)  # (B, 64, 8, 8)
        f2 = self.stage2(f1)  # (B, 128, 4, 4)
        logits, offsets = [], []
        for feature, class_head, box_head in zip((f1, f2), self.class_heads, self.box_heads):
            b = feature.shape[0]
            # (B, A*K, H, W) -> (B, H, W, A*K) -> (B, H*W*A, K): cell-major, like default_boxes()
            logits.append(class_head(feature).permute(0, 2, 3, 1).reshape(b, -1, self.num_classes))
            offsets.append(box_head(feature).permute(0, 2, 3, 1).reshape(b, -1, 4))
        return torch.cat(logits, dim=1), torch.cat(offsets, dim=1)  # (B, A, K), (B, A, 4)


class ObjectDetection(Task):
    name = "ssd"
    benchmark = "ssd"
    description = "SSD-style single-shot detector on generated shapes, COCO-style mAP target."
    mlperf_reference = "SSD (ResNet-34 backbone) on COCO 2017, 23.0% mAP"
    metric = "mAP"
    target = 0.7
    max_epochs = 20
    batch_size = 32
    base_lr = 2e-3
    weight_decay = 5e-4

    def __init__(self, data_seed: int = 0, data_dir: str | None = None):
        super().__init__(data_seed, data_dir)
        self.anchors = default_boxes()
        self.eval_truth: list[tuple[torch.Tensor, torch.Tensor]] = []

    def datasets(self) -> tuple[Dataset, Dataset]:
        gen = seeded_generator(self.data_seed)
        images, boxes, labels = detection_images(TRAIN_SAMPLES, IMAGE_SIZE, 3, gen, classes=CLASSES)
        # Box encoding is deterministic (no augmentation), so it is done once with the data set,
        # like any offline preprocessing the MLPerf rules allow before the clock starts.
        targets = [match(b, lab, self.anchors) for b, lab in zip(boxes, labels)]
        train = TensorDataset(images, torch.stack([t[0] for t in targets]), torch.stack([t[1] for t in targets]))
        eval_images, eval_boxes, eval_labels = detection_images(EVAL_SAMPLES, IMAGE_SIZE, 3, gen, classes=CLASSES)
        self.eval_truth = list(zip(eval_boxes, eval_labels))
        return train, TensorDataset(eval_images, torch.arange(EVAL_SAMPLES))

    def build_model(self) -> nn.Module:
        return SmallSSD(len(CLASSES) + 1)

    def build_optimizer(self, model: nn.Module, steps_per_epoch: int) -> Optimizer:
        optimizer = torch.optim.Adam(model.parameters(), lr=self.base_lr, weight_decay=self.weight_decay)
        hyperparameters = {
            "opt_name": "adam",
            "opt_base_learning_rate": self.base_lr,
            "opt_weight_decay": self.weight_decay,
            "opt_learning_rate_warmup_epochs": 0,
            "opt_learning_rate_warmup_factor": 0,
        }
        return optimizer, None, hyperparameters

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        images, class_targets, box_targets = batch  # (B, 3, S, S), (B, A), (B, A, 4)
        logits, offsets = model(images)
        positive = class_targets > 0  # (B, A)
        n_positive = positive.sum(dim=1, keepdim=True)  # (B, 1)
        ce = F.cross_entropy(logits.transpose(1, 2), class_targets, reduction="none")  # (B, A)
        # hard negative mining: only the 3*P most confidently wrong background anchors count
        negative_ce = ce.detach().masked_fill(positive, 0.0)
        rank = negative_ce.argsort(dim=1, descending=True).argsort(dim=1)
        hard_negative = rank < NEGATIVES_PER_POSITIVE * n_positive
        box_loss = F.smooth_l1_loss(offsets, box_targets, reduction="none").sum(dim=2)  # (B, A)
        total = (ce * (positive | hard_negative)).sum() + (box_loss * positive).sum()
        return total / n_positive.sum().clamp(min=1)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device) -> float:
        from torchvision.ops import batched_nms

        predictions, truth = [], []
        for images, indices in loader:
            truth += [self.eval_truth[i] for i in indices.tolist()]
            logits, offsets = model(images.to(device))
            scores = logits.softmax(dim=2).cpu()[:, :, 1:]  # (B, A, C) without the background
            boxes = decode(offsets.cpu(), self.anchors)  # (B, A, 4)
            for image_scores, image_boxes in zip(scores, boxes):
                anchor, cls = torch.nonzero(image_scores > 0.05, as_tuple=True)
                kept_scores = image_scores[anchor, cls]
                keep = batched_nms(image_boxes[anchor], kept_scores, cls, iou_threshold=0.45)[:20]
                predictions.append((image_boxes[anchor][keep], kept_scores[keep], cls[keep] + 1))
        return mean_average_precision(predictions, truth, COCO_IOU_THRESHOLDS)
