"""Scientific workloads: CosmoFlow-style 3D convolutional regression on volumetric data."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.catalog._base import Batch, Param, Workload
from dlbench.errors import UsageError

# Keras' LeakyReLU default, which the TensorFlow reference uses unchanged.
_LEAKY_SLOPE = 0.3


def _same_conv(in_channels: int, out_channels: int, kernel_size: int) -> nn.Module:
    """Conv3d with Keras 'same' padding: for even kernels the extra zero goes after the data.

    Explicit, so PyTorch does not warn about the padded copy its own padding='same' makes.
    """
    before = (kernel_size - 1) // 2
    after = kernel_size - 1 - before
    conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=before)
    if before == after:
        return conv
    pad = nn.ConstantPad3d((0, after - before) * 3, 0.0)  # (W, H, D) ends of the volume
    return nn.Sequential(pad, conv)


class _CosmoFlowNet(nn.Module):
    """The MLPerf HPC CosmoFlow reference network (mlcommons/hpc, cosmoflow/models/cosmoflow.py).

    ``n_conv_layers`` blocks of Conv3d('same') + LeakyReLU + MaxPool3d(2) with 32, 64, 128, ...
    filters, then dense 128 -> 64 with dropout 0.5, then ``n_targets`` outputs through tanh scaled
    by 1.2 (the targets are normalised to [-1, 1]; 1.2 leaves headroom at the edges).
    """

    def __init__(
        self,
        in_channels: int,
        volume_size: int,
        n_conv_layers: int,
        kernel_size: int,
        n_targets: int,
        conv_size: int = 32,
        dropout: float = 0.5,
    ):
        super().__init__()
        blocks: list[nn.Module] = []
        channels = in_channels
        for i in range(n_conv_layers):
            out_channels = conv_size * 2**i  # the reference doubles the filters at every block
            blocks += [
                _same_conv(channels, out_channels, kernel_size),
                nn.LeakyReLU(_LEAKY_SLOPE),
                nn.MaxPool3d(2),
            ]
            channels = out_channels
        self.features = nn.Sequential(*blocks)
        side = volume_size // 2**n_conv_layers
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * side**3, 128),
            nn.LeakyReLU(_LEAKY_SLOPE),
            nn.Dropout(dropout),
            nn.Linear(128, 64),
            nn.LeakyReLU(_LEAKY_SLOPE),
            nn.Dropout(dropout),
            nn.Linear(64, n_targets),
            nn.Tanh(),
        )

    def forward(self, volumes: torch.Tensor) -> torch.Tensor:
        x = self.features(volumes)  # (B, 32*2**(L-1), V/2**L, V/2**L, V/2**L)
        return 1.2 * self.head(x)  # (B, n_targets)


class CNN3D(Workload):
    """CosmoFlow (Mathuriya et al. 2018; MLPerf HPC): regress cosmological parameters from
    4-channel dark-matter density volumes with a 3D CNN, trained with MSE."""

    name = "cnn3d"
    description = "CosmoFlow-style 3D CNN regressing cosmology parameters (MLPerf HPC)."
    domain = "science"
    # The reference trains 4 samples of 128^3 per GPU; a 64^3 sample is 8x smaller, so 32 samples
    # move the same number of voxels per step.
    default_batch_size = 32
    params = {
        # 64 (not the reference's 128) keeps the default runnable on small GPUs and CPUs;
        # volume_size=128 with --batch-size 4 is the MLPerf HPC configuration.
        "volume_size": Param(64, "edge length V of the cubic input volumes", minimum=2),
        "n_conv_layers": Param(5, "conv+pool blocks; each halves V (reference: 5)", minimum=1),
        "kernel_size": Param(2, "3D conv kernel edge (reference: 2, 'same' padding)", minimum=1),
        "in_channels": Param(4, "channels per voxel (reference: 4 redshifts)", minimum=1),
        "n_targets": Param(4, "regressed parameters (reference: 4)", minimum=1),
    }

    def __init__(self, **params: Any):
        super().__init__(**params)
        volume, layers = self.params["volume_size"], self.params["n_conv_layers"]
        if volume < 2**layers:
            raise UsageError(
                f"cnn3d volume_size={volume} is too small for n_conv_layers={layers}: each block "
                f"halves the volume, so volume_size must be at least 2**{layers} = {2**layers}; "
                f"raise volume_size or lower n_conv_layers."
            )

    def build_model(self) -> nn.Module:
        p = self.params
        return _CosmoFlowNet(
            p["in_channels"], p["volume_size"], p["n_conv_layers"], p["kernel_size"], p["n_targets"]
        )

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        p = self.params
        v = p["volume_size"]
        # (B, C, V, V, V)
        volumes = torch.randn(batch_size, p["in_channels"], v, v, v, generator=generator)
        # Targets uniform in [-1, 1], like the reference's normalised cosmological parameters.
        targets = torch.rand(batch_size, p["n_targets"], generator=generator) * 2 - 1  # (B, T)
        return volumes, targets

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        volumes, targets = batch
        return F.mse_loss(model(volumes), targets)
