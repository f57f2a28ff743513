"""The fixed task of bench/hpo_asha.py: softmax regression trained with SGD (numpy) on a fixed synthetic
data set, steered by flags, printing its validation loss after every epoch (``FoM[e]: …``) and at the
end (``FoM: …``): the Cray HPO contract. Lower is better.

Flags: --lr (log scale; too small learns nothing in time, too large diverges), --momentum, --l2,
--epochs (81 in bench/hpo_asha.py). Too small a learning rate learns little in time and too large a one
diverges, so most random points are clearly worse than the best (see bench/RESULTS.md for values).
"""

import argparse

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--momentum", type=float, default=0.0)
parser.add_argument("--l2", type=float, default=0.0)
parser.add_argument("--epochs", type=int, default=27)
args = parser.parse_args()

data = np.random.default_rng(1234)  # the same data set for every trial
n, d, k = 1500, 30, 6
w_true = data.normal(size=(d, k)) * 1.5
x = data.normal(size=(n, d))
y = np.argmax(x @ w_true + data.gumbel(size=(n, k)), axis=1)  # noisy labels: the best loss is above 0
x_train, y_train, x_val, y_val = x[:1000], y[:1000], x[1000:], y[1000:]

rng = np.random.default_rng(0)
w, velocity = np.zeros((d, k)), np.zeros((d, k))


def loss_of(w, xs, ys):
    logits = xs @ w
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(ys)), ys].mean())


for epoch in range(1, args.epochs + 1):
    order = rng.permutation(len(y_train))
    for start in range(0, len(order), 50):
        idx = order[start:start + 50]
        logits = x_train[idx] @ w
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(idx)), y_train[idx]] -= 1.0
        grad = x_train[idx].T @ p / len(idx) + args.l2 * w
        velocity = args.momentum * velocity - args.lr * grad
        w = w + velocity
    val = loss_of(w, x_val, y_val)
    if not np.isfinite(val) or val > 50:
        val = 50.0  # diverged: a bad, finite figure (the grammar takes finite numbers only)
    print(f"FoM[{epoch}]: {val:.6f}", flush=True)
print(f"FoM: {val:.6f}", flush=True)
