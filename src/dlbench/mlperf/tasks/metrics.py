"""Quality metrics of the time-to-train tasks, as pure functions on tensors.

* :func:`mean_average_precision` — detection mAP at one IoU threshold (PASCAL VOC's all-point
  interpolated AP, averaged over classes), over boxes or, with ``iou=mask_iou``, instance masks
  (COCO's segm mAP, Mask R-CNN's second metric);
* :func:`mean_iou` — segmentation IoU per class from a confusion count, averaged over classes
  (DeepCAM's quality metric);
* :func:`corpus_bleu` — BLEU of detokenised sentences through sacrebleu (both MLPerf translation
  benchmarks score with it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of every box in ``a`` (N, 4) with every box in ``b`` (M, 4), boxes as (x0, y0, x1, y1)."""
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])  # (N, M, 2)
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(dim=2)  # (N, M)
    area_a = (a[:, 2:] - a[:, :2]).clamp(min=0).prod(dim=1)
    area_b = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(dim=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return torch.where(union > 0, inter / union.clamp(min=1e-12), torch.zeros_like(inter))


def mask_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of every mask in ``a`` (N, H, W) with every mask in ``b`` (M, H, W), masks boolean."""
    a_flat, b_flat = a.flatten(1).float(), b.flatten(1).float()  # (N, HW), (M, HW)
    inter = a_flat @ b_flat.T  # (N, M)
    union = a_flat.sum(1)[:, None] + b_flat.sum(1)[None, :] - inter
    return torch.where(union > 0, inter / union.clamp(min=1e-12), torch.zeros_like(inter))


def average_precision(scores: torch.Tensor, matched: torch.Tensor, n_ground_truth: int) -> float:
    """All-point interpolated AP (VOC 2010+) of one class from its detections.

    ``scores`` (D,) and ``matched`` (D,) bool (the detection is a true positive) over every image;
    ``n_ground_truth`` counts the class's objects. No objects: AP is undefined, returned as NaN.
    """
    if n_ground_truth == 0:
        return float("nan")
    if scores.numel() == 0:
        return 0.0
    order = scores.argsort(descending=True, stable=True)
    tp = matched[order].double().cumsum(0)
    fp = (~matched[order]).double().cumsum(0)
    recall = tp / n_ground_truth
    precision = tp / (tp + fp)
    # precision envelope: the best precision at any recall at or above this one
    envelope = torch.flip(torch.cummax(torch.flip(precision, [0]), 0).values, [0])
    recall_steps = torch.diff(recall, prepend=torch.zeros(1, dtype=recall.dtype))
    return float((recall_steps * envelope).sum())


def _match_image(ious: list[list[float]], order: list[int], threshold: float) -> list[bool]:
    """Greedy matching by descending score: each ground-truth box is claimed by at most one
    detection, the one it overlaps most among those still free (as in VOC and COCO)."""
    matched = [False] * len(ious)
    taken: set[int] = set()
    for d in order:
        best, best_iou = -1, threshold
        for g, iou in enumerate(ious[d]):
            if g not in taken and iou >= best_iou:
                best, best_iou = g, iou
        if best >= 0:
            matched[d] = True
            taken.add(best)
    return matched


def mean_average_precision(
    predictions: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    ground_truth: Sequence[tuple[torch.Tensor, torch.Tensor]],
    iou_thresholds: Sequence[float] = (0.5,),
    iou: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = box_iou,
) -> float:
    """mAP over images, averaged over classes and over ``iou_thresholds`` (``(0.5,)``: VOC's
    mAP@0.5; ``0.5, 0.55, … 0.95``: COCO's mAP). ``predictions[i]`` is (boxes (D, 4), scores (D,),
    labels (D,)) and ``ground_truth[i]`` is (boxes (G, 4), labels (G,)); with ``iou=mask_iou`` the
    boxes are masks (D, H, W) and (G, H, W). Classes without objects are left out."""
    classes = sorted({int(c) for _, labels in ground_truth for c in labels.tolist()})
    per_class = []
    for c in classes:
        scores, n_gt = [], 0
        matched: dict[float, list[bool]] = {t: [] for t in iou_thresholds}
        for (p_boxes, p_scores, p_labels), (g_boxes, g_labels) in zip(predictions, ground_truth):
            p_sel, g_sel = p_labels == c, g_labels == c
            n_gt += int(g_sel.sum())
            image_scores = p_scores[p_sel]
            scores.append(image_scores)
            ious = iou(p_boxes[p_sel], g_boxes[g_sel]).tolist()  # (D, G) as lists: the loop is Python
            order = image_scores.argsort(descending=True).tolist()
            for t in iou_thresholds:
                matched[t] += _match_image(ious, order, t)
        all_scores = torch.cat(scores) if scores else torch.zeros(0)
        per_class.append(sum(
            average_precision(all_scores, torch.tensor(matched[t], dtype=torch.bool), n_gt) for t in iou_thresholds
        ) / len(iou_thresholds))
    return sum(per_class) / len(per_class) if per_class else 0.0


#: COCO's IoU thresholds 0.50:0.05:0.95, averaged by its headline mAP (MLPerf SSD's metric).
COCO_IOU_THRESHOLDS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))


def confusion_counts(predicted: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(num_classes, num_classes) counts, rows the true class, columns the predicted one."""
    index = target.flatten().long() * num_classes + predicted.flatten().long()
    return torch.bincount(index, minlength=num_classes**2).view(num_classes, num_classes)


def mean_iou(confusion: torch.Tensor) -> float:
    """IoU = TP / (TP + FP + FN) per class, averaged over the classes that occur (true or predicted)."""
    confusion = confusion.double()
    tp = confusion.diag()
    union = confusion.sum(0) + confusion.sum(1) - tp
    present = union > 0
    return float((tp[present] / union[present]).mean()) if bool(present.any()) else 0.0


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (0-100) of one reference per sentence, sacrebleu's default 13a tokenisation."""
    from dlbench.mlperf import require

    sacrebleu = require("sacrebleu", "sacrebleu")
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)
