"""Generated images of shapes, shared by the classification and detection tasks.

Every image is drawn from a seeded ``torch.Generator`` with vectorised masks (no Python loop over
pixels), so a data set of thousands of images takes milliseconds and is identical on every machine.
"""

from __future__ import annotations

import torch

#: Shape names in class order; each is a mask of the pixels within "radius" r of a centre.
SHAPES = ("square", "circle", "diamond", "ring", "plus", "triangle")


def shape_masks(dx: torch.Tensor, dy: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Boolean masks of every shape: ``dx, dy`` (N, H, W) offsets from the centre, ``r`` (N, 1, 1).

    Returns (len(SHAPES), N, H, W).
    """
    dist = torch.sqrt(dx**2 + dy**2)
    arm = r / 3
    return torch.stack([
        torch.maximum(dx.abs(), dy.abs()) <= r,  # square
        dist <= r,  # circle
        dx.abs() + dy.abs() <= r,  # diamond
        (dist <= r) & (dist >= r - 1.5),  # ring, 1.5 px thick
        ((dx.abs() <= arm) & (dy.abs() <= r)) | ((dy.abs() <= arm) & (dx.abs() <= r)),  # plus
        (dy <= r) & (dy >= -r) & (dx.abs() <= (dy + r) / 2),  # triangle, apex up
    ])


def _contrasting_colours(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Background and foreground RGB (N, 3, 1, 1): the foreground differs by 0.3-0.7 per channel,
    so a shape never vanishes into its background."""
    background = torch.rand(n, 3, 1, 1, generator=generator)
    shift = 0.3 + 0.4 * torch.rand(n, 3, 1, 1, generator=generator)
    return background, (background + shift) % 1.0


def classification_images(
    n: int, image_size: int, generator: torch.Generator, noise: float = 0.15
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images of one shape each, with random size, position and colours plus pixel noise.

    Returns images (N, 3, S, S) in [0, 1]-ish and labels (N,) indexing :data:`SHAPES`.
    """
    labels = torch.randint(0, len(SHAPES), (n,), generator=generator)
    r = (image_size * (0.18 + 0.14 * torch.rand(n, 1, 1, generator=generator)))  # (N, 1, 1)
    centre = r.squeeze(-1) + torch.rand(n, 2, generator=generator) * (image_size - 1 - 2 * r.squeeze(-1))  # (N, 2)
    coords = torch.arange(image_size, dtype=torch.float32)
    dx = coords.view(1, 1, -1) - centre[:, 0].view(-1, 1, 1)  # (N, 1, S)
    dy = coords.view(1, -1, 1) - centre[:, 1].view(-1, 1, 1)  # (N, S, 1)
    dx, dy = torch.broadcast_tensors(dx, dy)  # (N, S, S)
    masks = shape_masks(dx, dy, r)  # (K, N, S, S)
    mask = masks[labels, torch.arange(n)].unsqueeze(1).float()  # (N, 1, S, S)
    background, foreground = _contrasting_colours(n, generator)
    images = background * (1 - mask) + foreground * mask
    images = images + noise * torch.randn(images.shape, generator=generator)
    return images, labels


def detection_images(
    n: int, image_size: int, max_objects: int, generator: torch.Generator, noise: float = 0.1,
    classes: tuple[int, ...] = (0, 1),
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """``n`` images with 1..max_objects shapes each (classes index ``SHAPES``), drawn in order so
    later shapes cover earlier ones; objects are placed on a coarse grid so they rarely overlap.

    Returns images (N, 3, S, S), boxes per image (M_i, 4) as (x0, y0, x1, y1) in pixels, and labels
    per image (M_i,) numbered 1.. (0 is the background class of a detector).
    """
    images = torch.empty(n, 3, image_size, image_size)
    all_boxes: list[torch.Tensor] = []
    all_labels: list[torch.Tensor] = []
    coords = torch.arange(image_size, dtype=torch.float32)
    cell = image_size / 2  # a 2x2 grid of cells, at most one object per cell
    background, _ = _contrasting_colours(n, generator)
    for i in range(n):
        count = int(torch.randint(1, max_objects + 1, (1,), generator=generator))
        cells = torch.randperm(4, generator=generator)[:count]
        image = background[i].expand(3, image_size, image_size).clone()
        boxes, labels = [], []
        for c in cells.tolist():
            kind = classes[int(torch.randint(0, len(classes), (1,), generator=generator))]
            r = float(cell * (0.2 + 0.25 * torch.rand(1, generator=generator)))
            lo_x, lo_y = (c % 2) * cell + r, (c // 2) * cell + r
            span = cell - 2 * r - 1
            cx = lo_x + float(torch.rand(1, generator=generator)) * span
            cy = lo_y + float(torch.rand(1, generator=generator)) * span
            dx, dy = torch.broadcast_tensors(coords.view(1, 1, -1) - cx, coords.view(1, -1, 1) - cy)
            mask = shape_masks(dx, dy, torch.tensor([[[r]]]))[kind, 0]  # (S, S)
            shift = 0.3 + 0.4 * torch.rand(3, 1, 1, generator=generator)
            colour = (background[i] + shift) % 1.0
            image = torch.where(mask, colour.expand_as(image), image)
            ys, xs = torch.nonzero(mask, as_tuple=True)
            boxes.append([float(xs.min()), float(ys.min()), float(xs.max()) + 1, float(ys.max()) + 1])
            labels.append(classes.index(kind) + 1)
        images[i] = image + noise * torch.randn(image.shape, generator=generator)
        all_boxes.append(torch.tensor(boxes, dtype=torch.float32))
        all_labels.append(torch.tensor(labels, dtype=torch.int64))
    return images, all_boxes, all_labels
