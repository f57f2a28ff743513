"""Image classification to a top-1 target, modelled on MLPerf Training's ResNet-50 on ImageNet.

The data set is generated (6 classes of shapes on 16x16 images, :mod:`.shapes`) or read from an
ImageFolder directory (``data_dir/train/<class>/*.png`` and ``data_dir/val/<class>/*.png``, the layout
of ImageNet's own ``train``/``val`` folders), resized to 32x32.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torchvision.models.resnet import BasicBlock

from dlbench.errors import UsageError
from dlbench.mlperf.tasks._base import Batch, Optimizer, Task, seeded_generator
from dlbench.mlperf.tasks.shapes import SHAPES, classification_images

IMAGE_SIZE = 16
FOLDER_IMAGE_SIZE = 32  # images of a real data set are resized to this (the model pools globally)
TRAIN_SAMPLES = 8192
EVAL_SAMPLES = 1024


class SmallResNet(nn.Module):
    """A ResNet for small images: 3x3 stem, three stages of torchvision BasicBlocks (widths 16, 32,
    64; the last two halve the resolution), global average pooling, a linear classifier."""

    def __init__(self, num_classes: int, width: int = 16):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        )
        stages, channels = [], width
        for i, out in enumerate((width, 2 * width, 4 * width)):
            stride = 1 if i == 0 else 2
            down = None
            if stride != 1 or channels != out:
                down = nn.Sequential(nn.Conv2d(channels, out, 1, stride, bias=False), nn.BatchNorm2d(out))
            stages.append(BasicBlock(channels, out, stride, down))
            channels = out
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(images))  # (B, 4w, S/4, S/4)
        return self.fc(x.mean(dim=(2, 3)))  # (B, classes)


class ImageClassification(Task):
    name = "resnet"
    benchmark = "resnet"
    description = "Small ResNet classifying generated shapes (or an ImageFolder) to a top-1 target."
    mlperf_reference = "ResNet-50 v1.5 on ImageNet, 75.9% top-1"
    metric = "top1_accuracy"
    target = 0.95
    max_epochs = 16
    batch_size = 64
    accepts_data_dir = True
    base_lr = 0.1
    momentum = 0.9
    weight_decay = 5e-5

    def __init__(self, data_seed: int = 0, data_dir: str | None = None):
        super().__init__(data_seed, data_dir)
        self.num_classes = len(SHAPES)

    def datasets(self) -> tuple[Dataset, Dataset]:
        if self.data_dir is not None:
            return self._image_folders(Path(self.data_dir))
        gen = seeded_generator(self.data_seed)
        train = TensorDataset(*classification_images(TRAIN_SAMPLES, IMAGE_SIZE, gen))
        evaluation = TensorDataset(*classification_images(EVAL_SAMPLES, IMAGE_SIZE, gen))
        return train, evaluation

    def _image_folders(self, root: Path) -> tuple[Dataset, Dataset]:
        from torchvision import datasets, transforms

        for split in ("train", "val"):
            if not (root / split).is_dir():
                raise UsageError(
                    f"--data-dir {str(root)!r} has no '{split}' folder; an ImageFolder data set needs "
                    f"{root}/train/<class>/<image> and {root}/val/<class>/<image>."
                )
        to_tensor = transforms.Compose([
            transforms.Resize((FOLDER_IMAGE_SIZE, FOLDER_IMAGE_SIZE)), transforms.ToTensor(),
        ])
        try:
            train = datasets.ImageFolder(str(root / "train"), transform=to_tensor)
            evaluation = datasets.ImageFolder(str(root / "val"), transform=to_tensor)
        except (FileNotFoundError, RuntimeError) as exc:  # torchvision: no class folders / no images
            raise UsageError(f"--data-dir {str(root)!r} is not an ImageFolder data set ({exc}).") from None
        if train.classes != evaluation.classes:
            raise UsageError(
                f"--data-dir {str(root)!r}: train and val have different classes "
                f"({len(train.classes)} vs {len(evaluation.classes)}); give both the same class folders."
            )
        self.num_classes = len(train.classes)
        return train, evaluation

    def build_model(self) -> nn.Module:
        return SmallResNet(self.num_classes)

    def build_optimizer(self, model: nn.Module, steps_per_epoch: int) -> Optimizer:
        optimizer = torch.optim.SGD(
            model.parameters(), lr=self.base_lr, momentum=self.momentum, weight_decay=self.weight_decay
        )
        # MLPerf's ResNet schedule: polynomial decay (power 2) to the end LR over the epoch budget.
        total = steps_per_epoch * self.max_epochs
        end_lr = 1e-4
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: (end_lr + (self.base_lr - end_lr) * (1 - min(step, total) / total) ** 2) / self.base_lr
        )
        hyperparameters = {
            "opt_name": "sgd",
            "opt_base_learning_rate": self.base_lr,
            "opt_end_learning_rate": end_lr,
            "opt_learning_rate_decay_poly_power": 2,
            "opt_learning_rate_decay_steps": total,
            "opt_learning_rate_warmup_epochs": 0,
            "opt_weight_decay": self.weight_decay,
            "sgd_opt_momentum": self.momentum,
        }
        return optimizer, schedule, hyperparameters

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        images, labels = batch
        return F.cross_entropy(model(images), labels)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device) -> float:
        correct = total = 0
        for images, labels in loader:
            logits = model(images.to(device))
            correct += int((logits.argmax(dim=1).cpu() == labels).sum())
            total += labels.numel()
        return correct / max(total, 1)
