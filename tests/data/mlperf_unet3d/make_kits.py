"""Ours, not MLCommons' (README.md): tiny KiTS19-shaped volumes for MLPerf's unet3d reference, stored as its
preprocess_dataset.py stores them: case_NNNNN_x.npy (1, D, H, W) float32 and case_NNNNN_y.npy (1, D, H, W) uint8,
a bright sphere (label 1, 'kidney') holding a brighter one (label 2, 'tumour') on noise.

    make_kits.py OUT CASES D H W      (CASES: comma-separated case numbers; evaluation_cases.txt says which validate)
"""
import sys
import numpy as np
out, cases, shape = sys.argv[1], [int(c) for c in sys.argv[2].split(",")], tuple(int(v) for v in sys.argv[3:6])
rng = np.random.default_rng(0)
grid = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), axis=0).astype(np.float32)
small = min(shape)
for case in cases:
    centre = np.array([rng.uniform(s * 0.4, s * 0.6) for s in shape], np.float32)[:, None, None, None]
    dist = np.sqrt(((grid - centre) ** 2).sum(axis=0))
    outer, inner = rng.uniform(small * 0.25, small * 0.35), rng.uniform(small * 0.1, small * 0.15)
    y = np.zeros(shape, np.uint8)
    y[dist < outer] = 1
    y[dist < inner] = 2
    x = y.astype(np.float32) + rng.normal(0, 0.2, size=shape).astype(np.float32)
    np.save(f"{out}/case_{case:05d}_x.npy", x[None])
    np.save(f"{out}/case_{case:05d}_y.npy", y[None])
