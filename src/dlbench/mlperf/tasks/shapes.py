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
    """``n`` images with 1..max_objects (at most 4) shapes each, one per cell of a 2x2 grid so
    objects do not overlap; ``classes`` index :data:`SHAPES`.

    Returns images (N, 3, S, S), boxes per image (M_i, 4) as (x0, y0, x1, y1) in pixels (the tight
    box of the drawn pixels), and labels per image (M_i,) numbered 1.. (0 is a detector's background).
    """
    images, boxes, labels, _ = instance_images(n, image_size, max_objects, generator, noise, classes)
    return images, boxes, labels


def instance_images(
    n: int, image_size: int, max_objects: int, generator: torch.Generator, noise: float = 0.1,
    classes: tuple[int, ...] = (0, 1),
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """:func:`detection_images` plus each object's pixel mask: masks per image (M_i, S, S) bool."""
    cells = 4
    count = torch.randint(1, max_objects + 1, (n, 1), generator=generator)  # (N, 1)
    # a random subset of `count` cells: rank the cells by a random key, keep the first `count`
    present = torch.rand(n, cells, generator=generator).argsort(dim=1).argsort(dim=1) < count  # (N, 4)
    kind = torch.randint(0, len(classes), (n, cells), generator=generator)  # (N, 4) index into classes
    cell = image_size / 2
    r = cell * (0.2 + 0.25 * torch.rand(n, cells, generator=generator))  # (N, 4) shape "radius"
    origin = torch.tensor([[0.0, 0.0], [cell, 0.0], [0.0, cell], [cell, cell]])  # (4, 2) cell corners
    span = (cell - 2 * r - 1).unsqueeze(-1)  # (N, 4, 1): room left for the centre inside the cell
    centre = origin + r.unsqueeze(-1) + torch.rand(n, cells, 2, generator=generator) * span  # (N, 4, 2)
    coords = torch.arange(image_size, dtype=torch.float32)
    dx = coords.view(1, 1, 1, -1) - centre[..., 0].view(n, cells, 1, 1)  # (N, 4, 1, S)
    dy = coords.view(1, 1, -1, 1) - centre[..., 1].view(n, cells, 1, 1)  # (N, 4, S, 1)
    dx, dy = torch.broadcast_tensors(dx, dy)  # (N, 4, S, S)
    all_masks = shape_masks(dx.flatten(0, 1), dy.flatten(0, 1), r.view(-1, 1, 1))  # (K, N*4, S, S)
    shape_index = torch.tensor(classes)[kind].flatten()  # (N*4,)
    masks = all_masks[shape_index, torch.arange(n * cells)].view(n, cells, image_size, image_size)
    masks &= present.view(n, cells, 1, 1)
    background, _ = _contrasting_colours(n, generator)  # (N, 3, 1, 1)
    shift = 0.3 + 0.4 * torch.rand(n, cells, 3, 1, 1, generator=generator)
    colours = (background.unsqueeze(1) + shift) % 1.0  # (N, 4, 3, 1, 1)
    images = background.expand(n, 3, image_size, image_size).clone()
    for c in range(cells):  # cells never overlap, so the order does not matter
        images = torch.where(masks[:, c].unsqueeze(1), colours[:, c], images)
    images = images + noise * torch.randn(images.shape, generator=generator)
    boxes = _tight_boxes(masks)  # (N, 4, 4)
    labels = kind + 1
    return (images, [boxes[i][present[i]] for i in range(n)], [labels[i][present[i]] for i in range(n)],
            [masks[i][present[i]] for i in range(n)])


def _tight_boxes(masks: torch.Tensor) -> torch.Tensor:
    """(x0, y0, x1, y1) of the set pixels of each mask (..., S, S); x1, y1 exclusive."""
    size = masks.shape[-1]
    coords = torch.arange(size)
    cols, rows = masks.any(dim=-2), masks.any(dim=-1)  # (..., S) over x and over y
    x0 = torch.where(cols, coords, size).min(dim=-1).values
    x1 = torch.where(cols, coords, -1).max(dim=-1).values + 1
    y0 = torch.where(rows, coords, size).min(dim=-1).values
    y1 = torch.where(rows, coords, -1).max(dim=-1).values + 1
    return torch.stack((x0, y0, x1, y1), dim=-1).float()
