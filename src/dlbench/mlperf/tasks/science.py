"""The MLPerf HPC pair: CosmoFlow-style 3D regression to an MAE target and DeepCAM-style climate
segmentation to an IoU target, both on generated fields.

* CosmoFlow: a 3D CNN (the catalogue's CosmoFlow network at 16^3) regresses the four parameters
  that generated a volume — mean level, fluctuation amplitude, correlation length and a gradient
  along an axis drawn per volume — normalised to [-1, 1] like the reference's cosmological
  parameters. Quality is the mean absolute error; the target is MLPerf HPC's own, 0.124. The axis is
  random so that the target needs the network: with the gradient always along z, a quadratic
  least-squares fit on four summary statistics (mean, std, lag-1 autocorrelation, z-gradient)
  reached MAE 0.122 without any network; now it gets 0.19 (``dlbench.mlperf.baselines``).
* DeepCAM: a small U-Net labels every pixel of 4-channel 32x32 "climate" fields as background,
  atmospheric river (long thin bands of high water vapour) or tropical cyclone (discs of low
  pressure ringed by wind). Quality is the IoU averaged over the three classes; the target is
  MLPerf HPC's, 0.82.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from dlbench.mlperf.tasks._base import Batch, Optimizer, Task, seeded_generator
from dlbench.mlperf.tasks.metrics import confusion_counts, mean_iou

VOLUME = 16
FIELD = 32


def _smooth_noise(shape: tuple[int, ...], sigma_px: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """White noise low-passed with a Gaussian of ``sigma_px`` (N,) per sample, via FFT over the
    trailing dims, normalised to unit standard deviation per sample."""
    noise = torch.randn(shape, generator=generator)
    dims = tuple(range(1, len(shape)))
    freqs = [torch.fft.fftfreq(n) for n in shape[1:-1]] + [torch.fft.rfftfreq(shape[-1])]
    k2 = sum(f.view([-1 if i == j else 1 for j in range(len(freqs))]) ** 2 for i, f in enumerate(freqs))
    sigma = sigma_px.view(-1, *([1] * len(freqs)))
    spectrum = torch.fft.rfftn(noise, dim=dims) * torch.exp(-2 * math.pi**2 * k2 * sigma**2)
    field = torch.fft.irfftn(spectrum, s=shape[1:], dim=dims)
    return field / field.flatten(1).std(dim=1).view(-1, *([1] * len(freqs)))


def cosmology_volumes(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Volumes (N, 1, V, V, V) and the parameters that made them (N, 4), each in [-1, 1]."""
    params = torch.rand(n, 4, generator=generator) * 2 - 1
    mean_level, amplitude, correlation, gradient = params.unbind(dim=1)
    field = _smooth_noise((n, VOLUME, VOLUME, VOLUME), 0.8 + 0.6 * (correlation + 1), generator)
    axis = torch.randint(0, 3, (n,), generator=generator)  # the gradient runs along z, y or x
    line = torch.linspace(-1, 1, VOLUME)
    ramps = torch.stack([line.view(shape).expand(VOLUME, VOLUME, VOLUME)
                         for shape in ((-1, 1, 1), (1, -1, 1), (1, 1, -1))])  # (3, V, V, V)
    volumes = (
        mean_level.view(-1, 1, 1, 1)
        + (0.6 + 0.4 * amplitude).view(-1, 1, 1, 1) * field
        + 0.5 * gradient.view(-1, 1, 1, 1) * ramps[axis]
        + 0.05 * torch.randn(field.shape, generator=generator)
    )
    return volumes.unsqueeze(1), params


class CosmoFlow(Task):
    name = "cosmoflow"
    benchmark = "cosmoflow"
    usage = "hpc"
    description = "CosmoFlow 3D CNN regressing the 4 parameters of generated volumes, MAE target."
    mlperf_reference = "CosmoFlow on N-body simulation volumes (128^3 x 4), MAE 0.124"
    metric = "MAE"
    target = 0.124
    higher_is_better = False
    eval_key = "eval_error"  # MLPerf HPC logs CosmoFlow's quality as an error
    max_epochs = 30
    batch_size = 32
    train_samples = 2048
    eval_samples = 512
    base_lr = 2e-3
    decay_boundary_epochs = (6, 12)
    decay_factors = (0.25, 0.125)

    def datasets(self) -> tuple[Dataset, Dataset]:
        gen = seeded_generator(self.data_seed)
        train = TensorDataset(*cosmology_volumes(self.train_samples, gen))
        return train, TensorDataset(*cosmology_volumes(self.eval_samples, gen))

    def build_model(self) -> nn.Module:
        from dlbench.catalog.networks import CosmoFlowNet as _CosmoFlowNet

        # The reference network: 'same' conv + LeakyReLU + max-pool blocks, dense head, 1.2*tanh.
        # Dropout off: at this size it only slows convergence. Kernel 3 and 16 channels: with the
        # reference's kernel 2 (or 8 channels) the net plateaus near MAE 0.127 on these volumes.
        return _CosmoFlowNet(1, VOLUME, n_conv_layers=3, kernel_size=3, n_targets=4, conv_size=16, dropout=0.0)

    def build_optimizer(self, model: nn.Module, steps_per_epoch: int) -> Optimizer:
        optimizer = torch.optim.Adam(model.parameters(), lr=self.base_lr)
        # The reference decays the learning rate twice, at boundary epochs (factors 0.25, 0.125).
        boundaries, factors = self.decay_boundary_epochs, self.decay_factors

        def factor(step: int) -> float:
            epoch = step / steps_per_epoch
            passed = [f for b, f in zip(boundaries, factors) if epoch >= b]
            return passed[-1] if passed else 1.0

        hyperparameters = {
            "opt_name": "adam",
            "opt_base_learning_rate": self.base_lr,
            "opt_learning_rate_warmup_epochs": 0,
            "opt_learning_rate_warmup_factor": 1.0,
            "opt_learning_rate_decay_boundary_epochs": list(boundaries),
            "opt_learning_rate_decay_factor": list(factors),
            "opt_weight_decay": 0.0,
        }
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor), hyperparameters

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        volumes, params = batch
        return F.mse_loss(model(volumes), params)  # the reference trains with MSE

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device) -> float:
        error = count = 0.0
        for volumes, params in loader:
            error += float((model(volumes.to(device)).cpu() - params).abs().sum())
            count += params.numel()
        return error / max(count, 1)


def climate_fields(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Fields (N, 4, H, W) — water vapour, pressure, wind speed, temperature — and labels (N, H, W):
    0 background, 1 atmospheric river, 2 tropical cyclone (cyclones win where both are present)."""
    coords = torch.arange(FIELD, dtype=torch.float32)
    x, y = coords.view(1, 1, -1), coords.view(1, -1, 1)
    fields = 0.5 * torch.stack([_smooth_noise((n, FIELD, FIELD), torch.full((n,), 3.0), generator) for _ in range(4)], 1)
    labels = torch.zeros(n, FIELD, FIELD, dtype=torch.int64)
    for _ in range(2):  # up to two rivers: bands along a segment
        present = (torch.rand(n, generator=generator) < 0.7).view(-1, 1, 1)
        start = torch.rand(n, 2, generator=generator) * FIELD
        angle = torch.rand(n, generator=generator) * math.pi
        length = 14 + 14 * torch.rand(n, generator=generator)
        width = 1.5 + 1.0 * torch.rand(n, generator=generator)
        ux, uy = torch.cos(angle).view(-1, 1, 1), torch.sin(angle).view(-1, 1, 1)
        px, py = x - start[:, 0].view(-1, 1, 1), y - start[:, 1].view(-1, 1, 1)
        along = (px * ux + py * uy).clamp(min=0).minimum(length.view(-1, 1, 1))
        dist = torch.sqrt((px - along * ux) ** 2 + (py - along * uy) ** 2)  # to the segment
        band = present & (dist <= width.view(-1, 1, 1))
        fields[:, 0] += present * 2.0 * torch.exp(-(dist**2) / (2 * width.view(-1, 1, 1) ** 2))
        labels[band] = 1
    for _ in range(2):  # up to two cyclones: low-pressure discs with a wind ring
        present = (torch.rand(n, generator=generator) < 0.6).view(-1, 1, 1)
        centre = 4 + torch.rand(n, 2, generator=generator) * (FIELD - 8)
        radius = (2.5 + 2.0 * torch.rand(n, generator=generator)).view(-1, 1, 1)
        dist = torch.sqrt((x - centre[:, 0].view(-1, 1, 1)) ** 2 + (y - centre[:, 1].view(-1, 1, 1)) ** 2)
        fields[:, 1] -= present * 2.0 * torch.exp(-(dist**2) / (2 * radius**2))
        fields[:, 2] += present * 2.0 * (dist / radius) * torch.exp(0.5 - dist**2 / (2 * radius**2))
        labels[present & (dist <= radius)] = 2
    fields += 0.2 * torch.randn(fields.shape, generator=generator)
    return fields, labels


def _double_conv(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
    )


class SmallUNet(nn.Module):
    """Encoder-decoder with skip connections (DeepCAM's reference is DeepLabv3+, also an
    encoder-decoder with a skip from the early features), two poolings deep."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 16):
        super().__init__()
        self.enc1 = _double_conv(in_channels, width)
        self.enc2 = _double_conv(width, 2 * width)
        self.middle = _double_conv(2 * width, 4 * width)
        self.up2 = nn.ConvTranspose2d(4 * width, 2 * width, 2, stride=2)
        self.dec2 = _double_conv(4 * width, 2 * width)
        self.up1 = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.dec1 = _double_conv(2 * width, width)
        self.classifier = nn.Conv2d(width, num_classes, 1)

    def forward(self, fields: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(fields)  # (B, w, H, W)
        e2 = self.enc2(F.max_pool2d(e1, 2))  # (B, 2w, H/2, W/2)
        m = self.middle(F.max_pool2d(e2, 2))  # (B, 4w, H/4, W/4)
        d2 = self.dec2(torch.cat((self.up2(m), e2), dim=1))  # (B, 2w, H/2, W/2)
        d1 = self.dec1(torch.cat((self.up1(d2), e1), dim=1))  # (B, w, H, W)
        return self.classifier(d1)  # (B, classes, H, W)


class DeepCAM(Task):
    name = "deepcam"
    benchmark = "deepcam"
    usage = "hpc"
    description = "U-Net segmenting rivers and cyclones in generated climate fields, IoU target."
    mlperf_reference = "DeepCAM (DeepLabv3+) on CAM5+TECA climate data, IoU 0.82"
    metric = "IoU"
    target = 0.82
    max_epochs = 20
    batch_size = 32
    train_samples = 2048
    eval_samples = 512
    base_lr = 2e-3
    betas = (0.9, 0.999)
    epsilon = 1e-6  # the value MLPerf HPC fixes for DeepCAM's Adam
    weight_decay = 1e-4

    def __init__(self, data_seed: int = 0, data_dir: str | None = None):
        super().__init__(data_seed, data_dir)
        self.class_weights = torch.ones(3)

    def datasets(self) -> tuple[Dataset, Dataset]:
        gen = seeded_generator(self.data_seed)
        fields, labels = climate_fields(self.train_samples, gen)
        # DeepCAM weights the loss against class imbalance (the reference: 1/sqrt(frequency)).
        frequency = torch.bincount(labels.flatten(), minlength=3).double() / labels.numel()
        weights = frequency.clamp(min=1e-6).rsqrt()
        self.class_weights = (weights / weights.sum() * 3).float()
        return TensorDataset(fields, labels), TensorDataset(*climate_fields(self.eval_samples, gen))

    def build_model(self) -> nn.Module:
        return SmallUNet(4, 3)

    def build_optimizer(self, model: nn.Module, steps_per_epoch: int) -> Optimizer:
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=self.base_lr, betas=self.betas, eps=self.epsilon, weight_decay=self.weight_decay
        )
        hyperparameters = {
            "opt_name": "adamw",
            "opt_lr": self.base_lr,
            "opt_betas": list(self.betas),
            "opt_eps": self.epsilon,
            "opt_weight_decay": self.weight_decay,
            "scheduler_type": "none",
            "scheduler_lr_warmup_steps": 0,
            "scheduler_lr_warmup_factor": 1.0,
            "gradient_accumulation_frequency": 1,
        }
        return optimizer, None, hyperparameters

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        fields, labels = batch
        return F.cross_entropy(model(fields), labels, weight=self.class_weights.to(fields.device))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device) -> float:
        confusion = torch.zeros(3, 3, dtype=torch.int64)
        for fields, labels in loader:
            predicted = model(fields.to(device)).argmax(dim=1).cpu()
            confusion += confusion_counts(predicted, labels, 3)
        return mean_iou(confusion)
