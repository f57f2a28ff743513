"""Generative workloads: DCGAN, the one catalogue entry with two optimizers per step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dlbench.catalog._base import Batch, Param, StepContext, Workload
from dlbench.catalog._lazy import lazy_import

torch = lazy_import("torch")
F = lazy_import("torch.nn.functional")
nn = lazy_import("torch.nn")
networks = lazy_import("dlbench.catalog.networks")


def _generator(noise_dim: int, channels: int, features: int, n_up: int) -> nn.Sequential:
    """noise (B, Z, 1, 1) -> images (B, C, 4*2**n_up, 4*2**n_up) in [-1, 1]."""
    mult = 2 ** (n_up - 1)
    layers: list[nn.Module] = [
        nn.ConvTranspose2d(noise_dim, features * mult, 4, 1, 0, bias=False),  # (B, F*mult, 4, 4)
        nn.BatchNorm2d(features * mult),
        nn.ReLU(True),
    ]
    for _ in range(n_up - 1):  # each block doubles the side and halves the channels
        layers += [
            nn.ConvTranspose2d(features * mult, features * mult // 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(features * mult // 2),
            nn.ReLU(True),
        ]
        mult //= 2
    layers += [nn.ConvTranspose2d(features, channels, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers)


def _discriminator(channels: int, features: int, n_down: int) -> nn.Sequential:
    """images (B, C, S, S) -> logits (B,); no BatchNorm on the input layer (DCGAN paper)."""
    layers: list[nn.Module] = [
        nn.Conv2d(channels, features, 4, 2, 1, bias=False),  # (B, F, S/2, S/2)
        nn.LeakyReLU(0.2, inplace=True),
    ]
    mult = 1
    for _ in range(n_down - 1):  # each block halves the side and doubles the channels
        layers += [
            nn.Conv2d(features * mult, features * mult * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(features * mult * 2),
            nn.LeakyReLU(0.2, inplace=True),
        ]
        mult *= 2
    # The example ends in a Sigmoid + BCELoss; logits + BCEWithLogits is the autocast-safe form.
    layers += [nn.Conv2d(features * mult, 1, 4, 1, 0, bias=False), nn.Flatten(0)]  # (B,)
    return nn.Sequential(*layers)


def _dcgan_init(module: nn.Module) -> None:
    # DCGAN paper / PyTorch example: conv weights N(0, 0.02), BatchNorm gamma N(1, 0.02), beta 0.
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


def _d_loss(d: nn.Module, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    real_logits, fake_logits = d(real), d(fake)  # (B,) each; D sees real and fake separately
    return F.binary_cross_entropy_with_logits(
        real_logits, torch.ones_like(real_logits)
    ) + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))


def _g_loss(d: nn.Module, fake: torch.Tensor) -> torch.Tensor:
    # Non-saturating generator loss (Goodfellow et al. 2014): maximise log D(G(z)).
    logits = d(fake)  # (B,)
    return F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))


class DCGAN(Workload):
    """DCGAN (Radford et al. 2016) as in the PyTorch examples repository: a transposed-conv
    generator and a strided-conv discriminator trained alternately, one optimizer each."""

    name = "dcgan"
    description = "DCGAN generator + discriminator trained alternately on synthetic images."
    domain = "generative"
    default_batch_size = 128  # DCGAN paper and PyTorch example: mini-batches of 128
    params = {
        "image_size": Param(64, "side of the square images", choices=(32, 64, 128)),
        "noise_dim": Param(100, "length of the latent vector z (example: nz=100)", minimum=1),
        "channels": Param(3, "image channels", minimum=1),
        "features": Param(64, "base width of both networks (example: ngf = ndf = 64)", minimum=1),
    }

    def __init__(self, **params: Any):
        super().__init__(**params)
        # 4x4 after the first generator layer, doubled per block: 32 -> 3 blocks, 64 -> 4, 128 -> 5.
        self.n_blocks = self.params["image_size"].bit_length() - 3

    def build_model(self) -> nn.Module:
        p = self.params
        model = networks.GAN(
            _generator(p["noise_dim"], p["channels"], p["features"], self.n_blocks),
            _discriminator(p["channels"], p["features"], self.n_blocks),
        )
        model.apply(_dcgan_init)
        return model

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        p = self.params
        size = p["image_size"]
        # Real images live in the generator's Tanh range [-1, 1].
        real = torch.rand(batch_size, p["channels"], size, size, generator=generator) * 2 - 1
        noise = torch.randn(batch_size, p["noise_dim"], 1, 1, generator=generator)  # (B, Z, 1, 1)
        return real, noise

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Both losses in one forward (G once, D three times), as one training step computes."""
        real, noise = batch
        fake = model.generator(noise)  # (B, C, S, S)
        d = model.discriminator
        return _d_loss(d, real, fake.detach()) + _g_loss(d, fake)

    def inference(self, model: nn.Module, batch: Batch) -> Any:
        return model.generator(batch[1])  # noise -> images (B, C, S, S)

    def parameter_groups(self, model: nn.Module) -> list[Iterator[nn.Parameter]]:
        return [model.generator.parameters(), model.discriminator.parameters()]

    def distribute(self, model: nn.Module, wrap) -> nn.Module:
        # loss() and train_step() call the two networks directly, so each is wrapped on its own.
        model.generator = wrap(model.generator)
        model.discriminator = wrap(model.discriminator)
        return model

    def train_step(self, model: nn.Module, batch: Batch, ctx: StepContext) -> torch.Tensor:
        real, noise = batch
        g, d = model.generator, model.discriminator
        # Discriminator first, on real and detached fake images (PyTorch DCGAN example order).
        with ctx.autocast():
            fake = g(noise)  # (B, C, S, S)
            d_loss = _d_loss(d, real, fake.detach())
        ctx.backward_and_step(d_loss, ctx.optimizers[1])
        # Then the generator, through the freshly updated discriminator. This backward also fills
        # D's gradients, as in the example; D's optimizer clears them before its next step.
        with ctx.autocast():
            g_loss = _g_loss(d, fake)
        ctx.backward_and_step(g_loss, ctx.optimizers[0])
        ctx.end_step()
        return (d_loss + g_loss).detach()
