"""Heavy-weight object detection to box and mask mAP targets, modelled on MLPerf Training's Mask
R-CNN (ResNet-50 FPN on COCO, box mAP 0.377 and mask mAP 0.339).

The model is torchvision's Mask R-CNN (``torchvision.models.detection.MaskRCNN``: region proposal
network, RoIAlign, box head, mask head) with every weight randomly initialised, on a backbone
shrunk to fit a CPU: four conv layers to one stride-4 feature map instead of ResNet-50 + FPN. The
data are generated 48x48 images holding 1-3 shapes of three classes, each with its instance mask
(the exact drawn pixels). Quality is COCO-style mAP (IoU 0.50:0.05:0.95) of the boxes and of the
masks, logged as MLPerf logs it, ``eval_accuracy: {"BBOX": …, "SEGM": …}``; the run succeeds when
both reach their targets.

Two metrics through the one-number task contract: :meth:`evaluate` returns the box mAP and keeps
the mask mAP of the same evaluation, which :meth:`reached` and :meth:`logged_quality` read.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from dlbench.mlperf.tasks._base import Batch, Optimizer, Task, seeded_generator
from dlbench.mlperf.tasks.metrics import COCO_IOU_THRESHOLDS, mask_iou, mean_average_precision
from dlbench.mlperf.tasks.shapes import instance_images

IMAGE_SIZE = 48
CLASSES = (0, 1, 2)  # square, circle, diamond (shapes.SHAPES)
MAX_OBJECTS = 3
TRAIN_SAMPLES = 384
EVAL_SAMPLES = 96
FEATURE_CHANNELS = 32


class InstanceSet(Dataset):
    """Images with their boxes, labels and masks, one torchvision target dict per image."""

    def __init__(self, images: torch.Tensor, boxes: Sequence[torch.Tensor], labels: Sequence[torch.Tensor],
                 masks: Sequence[torch.Tensor]):
        self.images, self.boxes, self.labels, self.masks = images, boxes, labels, masks

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.images[i], {"boxes": self.boxes[i], "labels": self.labels[i], "masks": self.masks[i].to(torch.uint8)}


def collate(items: list[tuple[torch.Tensor, dict]]) -> tuple[torch.Tensor, list[dict]]:
    images, targets = zip(*items)
    return torch.stack(images), list(targets)


def small_backbone() -> nn.Module:
    """Four 3x3 conv layers to a stride-4 map of FEATURE_CHANNELS (``out_channels`` is what
    torchvision's detection heads read)."""
    def conv(cin: int, cout: int, stride: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    body = nn.Sequential(conv(3, 16, 1), conv(16, 32, 2), conv(32, 32, 2), conv(32, FEATURE_CHANNELS, 1))
    body.out_channels = FEATURE_CHANNELS
    return body


def build_mask_rcnn(num_classes: int) -> nn.Module:
    """torchvision's Mask R-CNN on :func:`small_backbone`, sized for 48x48 images (anchors 6-24
    px, fewer proposals and sampled RoIs, a two-layer mask head); random initialisation."""
    from torchvision.models.detection import MaskRCNN  # heavy: only when the task is built
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.ops import MultiScaleRoIAlign

    c = FEATURE_CHANNELS
    return MaskRCNN(
        small_backbone(), num_classes=None, min_size=IMAGE_SIZE, max_size=IMAGE_SIZE,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.3, 0.3, 0.3],
        rpn_anchor_generator=AnchorGenerator(((6, 12, 24),), ((0.5, 1.0, 2.0),)),
        rpn_pre_nms_top_n_train=300, rpn_post_nms_top_n_train=64,
        rpn_pre_nms_top_n_test=150, rpn_post_nms_top_n_test=50, rpn_batch_size_per_image=64,
        box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2), box_head=TwoMLPHead(c * 7 * 7, 128),
        box_predictor=FastRCNNPredictor(128, num_classes), box_batch_size_per_image=32,
        box_detections_per_img=10, box_score_thresh=0.05,
        mask_roi_pool=MultiScaleRoIAlign(["0"], 7, 2), mask_head=MaskRCNNHeads(c, (32, 32), 1),
        mask_predictor=MaskRCNNPredictor(32, 32, num_classes),
    )


class InstanceSegmentation(Task):
    name = "maskrcnn"
    benchmark = "maskrcnn"
    description = "torchvision Mask R-CNN (tiny backbone, random init) on generated shapes with masks, box and mask mAP targets."
    mlperf_reference = "Mask R-CNN (ResNet-50 FPN) on COCO 2017, box mAP 0.377 and mask mAP 0.339"
    metric = "bbox mAP"
    target = 0.5
    segm_target = 0.5  # mask mAP, the second target
    targets = {"bbox_mAP": 0.5, "segm_mAP": 0.5}  # both must be met (as target and segm_target)
    max_epochs = 15
    batch_size = 16
    base_lr = 0.04
    momentum = 0.9
    weight_decay = 1e-4
    warmup_steps = 32
    warmup_factor = 0.1
    collate_fn = staticmethod(collate)

    def __init__(self, data_seed: int = 0, data_dir: str | None = None):
        super().__init__(data_seed, data_dir)
        self.last_segm: float | None = None

    def datasets(self) -> tuple[Dataset, Dataset]:
        gen = seeded_generator(self.data_seed)
        train = InstanceSet(*instance_images(TRAIN_SAMPLES, IMAGE_SIZE, MAX_OBJECTS, gen, classes=CLASSES))
        return train, InstanceSet(*instance_images(EVAL_SAMPLES, IMAGE_SIZE, MAX_OBJECTS, gen, classes=CLASSES))

    def build_model(self) -> nn.Module:
        return build_mask_rcnn(len(CLASSES) + 1)

    def build_optimizer(self, model: nn.Module, steps_per_epoch: int) -> Optimizer:
        # MLPerf's Mask R-CNN: SGD with momentum and a linear warm-up from warmup_factor x base LR.
        optimizer = torch.optim.SGD(model.parameters(), lr=self.base_lr, momentum=self.momentum,
                                    weight_decay=self.weight_decay)
        steps, factor = self.warmup_steps, self.warmup_factor
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: factor + (1 - factor) * step / steps if step < steps else 1.0)
        hyperparameters = {
            "opt_name": "sgd",
            "opt_base_learning_rate": self.base_lr,
            "opt_learning_rate_warmup_steps": steps,
            "opt_learning_rate_warmup_factor": factor,
            "opt_weight_decay": self.weight_decay,
            "num_image_candidates": 100,
        }
        return optimizer, scheduler, hyperparameters

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        images, targets = batch
        targets = [{k: v.to(images.device) for k, v in t.items()} for t in targets]
        losses = model(list(images), targets)  # RPN, box and mask losses, as torchvision sums them
        return sum(losses.values())

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device) -> float:
        boxes_pred, masks_pred, boxes_true, masks_true = [], [], [], []
        for images, targets in loader:
            for out, target in zip(model(list(images.to(device))), targets):
                out = {k: v.cpu() for k, v in out.items()}
                boxes_pred.append((out["boxes"], out["scores"], out["labels"]))
                masks_pred.append((out["masks"][:, 0] > 0.5, out["scores"], out["labels"]))
                boxes_true.append((target["boxes"], target["labels"]))
                masks_true.append((target["masks"].bool(), target["labels"]))
        self.last_segm = mean_average_precision(masks_pred, masks_true, COCO_IOU_THRESHOLDS, iou=mask_iou)
        return mean_average_precision(boxes_pred, boxes_true, COCO_IOU_THRESHOLDS)

    def reached(self, quality: float) -> bool:
        return quality >= self.target and self.last_segm is not None and self.last_segm >= self.segm_target

    def logged_quality(self, quality: float) -> dict[str, float]:
        return {"BBOX": quality, "SEGM": self.last_segm}

