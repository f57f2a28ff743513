"""Quality metrics against hand-computed values."""

import pytest
import torch

from dlbench.mlperf.tasks.metrics import (
    COCO_IOU_THRESHOLDS,
    average_precision,
    box_iou,
    confusion_counts,
    corpus_bleu,
    mean_average_precision,
    mean_iou,
)


def test_box_iou():
    a = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
    b = torch.tensor([[0.0, 0.0, 10.0, 10.0], [5.0, 0.0, 15.0, 10.0], [20.0, 20.0, 30.0, 30.0], [0.0, 0.0, 0.0, 0.0]])
    assert box_iou(a, b)[0].tolist() == pytest.approx([1.0, 50 / 150, 0.0, 0.0])


def test_average_precision_all_point_interpolation():
    # detections by score: TP, FP, TP with 2 objects -> precision 1, 1/2, 2/3 at recall 1/2, 1/2, 1
    # envelope at recall 1/2 is 1, at recall 1 is 2/3: AP = 0.5 * 1 + 0.5 * 2/3
    ap = average_precision(torch.tensor([0.9, 0.8, 0.7]), torch.tensor([True, False, True]), 2)
    assert ap == pytest.approx(0.5 + 1 / 3)
    assert average_precision(torch.tensor([0.9]), torch.tensor([True]), 4) == pytest.approx(0.25)
    assert average_precision(torch.zeros(0), torch.zeros(0, dtype=torch.bool), 3) == 0.0


def _pred(boxes, scores, labels):
    return torch.tensor(boxes, dtype=torch.float32).view(-1, 4), torch.tensor(scores), torch.tensor(labels)


def test_map_perfect_shifted_duplicate_and_missed():
    truth = [(torch.tensor([[0.0, 0.0, 10.0, 10.0]]), torch.tensor([1])),
             (torch.tensor([[0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0]]), torch.tensor([1, 2]))]
    perfect = [_pred([0, 0, 10, 10], [0.9], [1]), _pred([[0, 0, 10, 10], [20, 20, 30, 30]], [0.8, 0.7], [1, 2])]
    assert mean_average_precision(perfect, truth) == pytest.approx(1.0)
    assert mean_average_precision(perfect, truth, COCO_IOU_THRESHOLDS) == pytest.approx(1.0)
    # shifted by 2 px: IoU 80/120 = 0.667 — a hit at 0.5, a miss from 0.7 on (COCO: 4 of 10 thresholds)
    shifted = [_pred([2, 0, 12, 10], [0.9], [1]), _pred([[2, 0, 12, 10], [22, 20, 32, 30]], [0.8, 0.7], [1, 2])]
    assert mean_average_precision(shifted, truth) == pytest.approx(1.0)
    assert mean_average_precision(shifted, truth, COCO_IOU_THRESHOLDS) == pytest.approx(0.4)
    # a duplicate of the first box scores below the true hits: one false positive after all TPs
    duplicate = [_pred([[0, 0, 10, 10], [0, 0, 10, 10]], [0.9, 0.1], [1, 1]), perfect[1]]
    assert mean_average_precision(duplicate, truth) == pytest.approx(1.0)
    # the class-2 object missed entirely: class 2 AP 0, class 1 AP 1
    missed = [perfect[0], _pred([0, 0, 10, 10], [0.8], [1])]
    assert mean_average_precision(missed, truth) == pytest.approx(0.5)
    # wrong label: the box is right but it is a false positive of class 2 and class 1 misses it
    wrong = [_pred([0, 0, 10, 10], [0.9], [2]), perfect[1]]
    assert mean_average_precision(wrong, truth) == pytest.approx((0.5 + 0.5) / 2)


def test_mean_iou_from_confusion():
    target = torch.tensor([[0, 0, 1, 1], [2, 2, 0, 0]])
    predicted = torch.tensor([[0, 1, 1, 1], [2, 0, 0, 0]])
    confusion = confusion_counts(predicted, target, 3)
    assert confusion.tolist() == [[3, 1, 0], [0, 2, 0], [1, 0, 1]]
    # IoU: class 0 3/(4+4-3)=0.6, class 1 2/(2+3-2)=2/3, class 2 1/(2+1-1)=0.5
    assert mean_iou(confusion) == pytest.approx((0.6 + 2 / 3 + 0.5) / 3)
    assert mean_iou(confusion_counts(target, target, 3)) == 1.0


def test_corpus_bleu_through_sacrebleu():
    refs = ["BADI FOGU HEJA PIZU", "ZUBA GUHE JAPI DIFO BADI"]
    assert corpus_bleu(refs, refs) == pytest.approx(100.0)
    assert corpus_bleu(["KAKA LOLO", "MIMI NENE RURU"], refs) == pytest.approx(0.0)
    partial = corpus_bleu(["BADI FOGU HEJA PIZU", "ZUBA GUHE JAPI DIFO GUGU"], refs)
    assert 0.0 < partial < 100.0
