"""Scientific workloads: CosmoFlow-style 3D convolutional regression on volumetric data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlbench.catalog._base import Batch, Param, Workload
from dlbench.catalog._lazy import lazy_import
from dlbench.errors import UsageError

torch = lazy_import("torch")
F = lazy_import("torch.nn.functional")
networks = lazy_import("dlbench.catalog.networks")

if TYPE_CHECKING:  # annotations only: nn is imported when a model is built
    from torch import nn

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
        return networks.CosmoFlowNet(
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
