"""Trivial baselines of the time-to-train tasks: what a target must be well beyond.

A quality target means something only when no shortcut reaches it. For every task three
baselines are scored on the task's own eval set with the task's own metric:

* ``constant`` — the best input-independent answer (the majority class, the mean parameters, the
  most common class per pixel, each class's mean box/mask in every image, the most common target
  sentence);
* ``untrained`` — the task's model with its random initialisation (seed 0), through ``evaluate``;
* ``closed_form`` — a least-squares fit on the training set with no network: a linear classifier
  on pixels (resnet), a quadratic fit on four summary statistics of the volume (cosmoflow:
  mean, standard deviation, lag-1 autocorrelation, z-gradient), a per-pixel linear classifier on
  the four channels (deepcam), a word-by-word dictionary from co-occurrence counts without
  reordering (translation). Detection has no closed-form baseline (None).

:data:`MARGIN` is how far beyond every baseline a target must sit; ``bench/mlperf_baselines.py``
measures them into ``bench/RESULTS.md`` and a test keeps the rule true.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any

import torch
from torch.utils.data import DataLoader, Subset

from dlbench.mlperf import tasks
from dlbench.mlperf.tasks._base import seeded_generator
from dlbench.mlperf.tasks.metadata import shipped_baselines
from dlbench.mlperf.tasks.metrics import (
    COCO_IOU_THRESHOLDS,
    confusion_counts,
    corpus_bleu,
    mask_iou,
    mean_average_precision,
    mean_iou,
)
from dlbench.mlperf.tasks.shapes import detection_images

MARGIN = 0.2  # higher is better: baseline <= (1 - MARGIN) x target; lower: baseline >= target / (1 - MARGIN)


def well_beyond(task_cls, baseline: float) -> bool:
    """Whether the task's target is at least :data:`MARGIN` beyond ``baseline``."""
    if task_cls.higher_is_better:
        return baseline <= (1 - MARGIN) * task_cls.target
    return baseline * (1 - MARGIN) >= task_cls.target


def _tensors(dataset) -> tuple[torch.Tensor, ...]:
    return dataset.tensors


def _lstsq(features: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    with_bias = torch.cat((features, torch.ones(len(features), 1)), dim=1)
    return torch.linalg.lstsq(with_bias.double(), targets.double(), rcond=None).solution.float()


def _apply(features: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return torch.cat((features, torch.ones(len(features), 1)), dim=1) @ weights


def _classification(task, train, evaluation) -> dict[str, float | None]:
    (x, y), (xe, ye) = _tensors(train), _tensors(evaluation)
    classes = int(max(y.max(), ye.max())) + 1
    pool = torch.nn.functional.avg_pool2d  # 4x fewer features keeps the fit small and well posed
    weights = _lstsq(pool(x, 2).flatten(1), torch.nn.functional.one_hot(y, classes).float())
    predicted = _apply(pool(xe, 2).flatten(1), weights).argmax(dim=1)
    majority = Counter(y.tolist()).most_common(1)[0][0]
    return {"constant": float((ye == majority).float().mean()), "closed_form": float((predicted == ye).float().mean())}


def volume_statistics(volumes: torch.Tensor) -> torch.Tensor:
    """Mean, standard deviation, lag-1 autocorrelation along x and z-gradient of each volume (N, 4)."""
    v = volumes[:, 0]
    mean, std = v.mean((1, 2, 3)), v.std((1, 2, 3))
    centred = v - mean.view(-1, 1, 1, 1)
    lag1 = (centred[..., 1:] * centred[..., :-1]).mean((1, 2, 3)) / std**2
    z = torch.linspace(-1, 1, v.shape[1]).view(1, -1, 1, 1)
    return torch.stack((mean, std, lag1, (v * z).mean((1, 2, 3))), dim=1)


def _cosmoflow(task, train, evaluation) -> dict[str, float | None]:
    (x, y), (xe, ye) = _tensors(train), _tensors(evaluation)

    def quadratic(f: torch.Tensor) -> torch.Tensor:
        return torch.cat((f, (f[:, :, None] * f[:, None, :]).flatten(1)), dim=1)

    weights = _lstsq(quadratic(volume_statistics(x)), y)
    predicted = _apply(quadratic(volume_statistics(xe)), weights)
    return {"constant": float((y.mean(0) - ye).abs().mean()), "closed_form": float((predicted - ye).abs().mean())}


def _deepcam(task, train, evaluation) -> dict[str, float | None]:
    (x, y), (xe, ye) = _tensors(train), _tensors(evaluation)
    classes = 3
    pixels = x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])  # (N*H*W, C)
    weights = _lstsq(pixels, torch.nn.functional.one_hot(y.flatten(), classes).float())
    predicted = _apply(xe.permute(0, 2, 3, 1).reshape(-1, xe.shape[1]), weights).argmax(dim=1)
    constant = max(mean_iou(confusion_counts(torch.full_like(ye, c), ye, classes)) for c in range(classes))
    return {"constant": constant, "closed_form": mean_iou(confusion_counts(predicted, ye.flatten(), classes))}


def _constant_detections(train_truth, eval_count: int, masks: bool):
    """Each class's mean training box (and that box filled, as a mask) in every eval image,
    scored by the class's frequency."""
    by_class: dict[int, list[torch.Tensor]] = {}
    for boxes, labels in train_truth:
        for box, label in zip(boxes, labels.tolist()):
            by_class.setdefault(label, []).append(box)
    classes = sorted(by_class)
    boxes = torch.stack([torch.stack(by_class[c]).mean(0) for c in classes])
    scores = torch.tensor([len(by_class[c]) for c in classes], dtype=torch.float32)
    labels = torch.tensor(classes)
    if masks is False:
        return [(boxes, scores, labels)] * eval_count
    size = masks
    coords = torch.arange(size, dtype=torch.float32)
    inside = ((coords.view(1, 1, -1) >= boxes[:, 0, None, None]) & (coords.view(1, 1, -1) < boxes[:, 2, None, None])
              & (coords.view(1, -1, 1) >= boxes[:, 1, None, None]) & (coords.view(1, -1, 1) < boxes[:, 3, None, None]))
    return [(inside, scores, labels)] * eval_count


def _ssd(task, train, evaluation) -> dict[str, float | None]:
    from dlbench.mlperf.tasks import detection  # the task's own geometry and draw

    gen = seeded_generator(task.data_seed)  # the same draw as the task's datasets()
    _, boxes, labels = detection_images(detection.TRAIN_SAMPLES, detection.IMAGE_SIZE, 3, gen, classes=detection.CLASSES)
    predictions = _constant_detections(list(zip(boxes, labels)), len(task.eval_truth), masks=False)
    return {"constant": mean_average_precision(predictions, task.eval_truth, COCO_IOU_THRESHOLDS), "closed_form": None}


def _maskrcnn(task, train, evaluation) -> dict[str, float | None]:
    from dlbench.mlperf.tasks.instance import IMAGE_SIZE  # imports torchvision: only for this task

    train_truth = [(t["boxes"], t["labels"]) for _, t in train]
    eval_truth = [(t["boxes"], t["labels"]) for _, t in evaluation]
    eval_masks = [(t["masks"].bool(), t["labels"]) for _, t in evaluation]
    boxes = _constant_detections(train_truth, len(evaluation), masks=False)
    masks = _constant_detections(train_truth, len(evaluation), masks=IMAGE_SIZE)
    box_map = mean_average_precision(boxes, eval_truth, COCO_IOU_THRESHOLDS)
    mask_map = mean_average_precision(masks, eval_masks, COCO_IOU_THRESHOLDS, iou=mask_iou)
    return {"constant": min(box_map, mask_map), "closed_form": None}


def _translation(task, train, evaluation) -> dict[str, float | None]:
    task.corpus = type(task.corpus)(task.data_seed)  # replay the task's draw: train pairs, then eval
    sources, targets = task.corpus.sample(len(train))
    counts: dict[str, Counter] = {}
    target_totals: Counter = Counter(w for sentence in targets for w in sentence)
    for src, tgt in zip(sources, targets):
        for s in set(src):
            counts.setdefault(s, Counter()).update(set(tgt))
    # the target word that co-occurs with s most often relative to its own frequency
    dictionary = {s: max(sorted(c), key=lambda t: c[t] / target_totals[t] ** 0.5) for s, c in counts.items()}
    eval_sources, _ = task.corpus.sample(len(evaluation))
    hypotheses = [" ".join(dictionary.get(w, "") for w in sentence) for sentence in eval_sources]
    common = Counter(" ".join(t) for t in targets).most_common(1)[0][0]
    return {"constant": corpus_bleu([common] * len(task.eval_references), task.eval_references),
            "closed_form": corpus_bleu(hypotheses, task.eval_references)}


_SPECIFIC = {"resnet": _classification, "cosmoflow": _cosmoflow, "deepcam": _deepcam, "ssd": _ssd,
             "maskrcnn": _maskrcnn, "transformer": _translation, "gnmt": _translation}


def untrained(task, evaluation, limit: int | None = None) -> float:
    """The task's quality with its model at random initialisation (seed 0), on the first ``limit``
    eval samples (all when None: an untrained detector's thousands of boxes make the full set slow)."""
    torch.manual_seed(0)
    model = task.build_model().eval()
    subset = evaluation if limit is None else Subset(evaluation, range(min(limit, len(evaluation))))
    loader = DataLoader(subset, batch_size=256, collate_fn=task.collate_fn)
    return task.evaluate(model, loader, torch.device("cpu"))


def measure(name: str, untrained_limit: int | None = None) -> dict[str, Any]:
    """Every baseline of task ``name`` (on the task's scale: BLEU 0-100) with the target beside it."""
    task = tasks.create(name)
    train, evaluation = task.datasets()
    scores = _SPECIFIC[name](task, train, evaluation) | {"untrained": untrained(task, evaluation, untrained_limit)}
    cls = type(task)
    return {"metric": cls.metric, "target": cls.target, "higher_is_better": cls.higher_is_better,
            "baselines": scores, "well_beyond": all(well_beyond(cls, v) for v in scores.values() if v is not None)}


@cache
def shipped() -> dict[str, dict[str, Any]]:
    """Task name → its measured baselines (``dlbench/data/mlperf_baselines.yaml``)."""
    return shipped_baselines()
