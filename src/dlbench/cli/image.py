"""``dlbench image``: build the benchmark's container image (``dlbench.api.image``)."""

from __future__ import annotations

import typer

from dlbench.cli._common import JSON_OPTION, emit_json, info

image_app = typer.Typer(
    name="image", no_args_is_help=True,
    help="The container image of the benchmark: build it from this checkout (deploy/container/Containerfile).",
)


@image_app.command("build")
def build(
    tag: str = typer.Option(None, "--tag", help="The image's name \\[default: localhost/dlbench:VERSION]."),
    base: str = typer.Option(None, "--base", help="Base image with python3 (an NGC or site PyTorch image) \\[default: Debian bookworm, built offline with debootstrap]."),
    torch: str = typer.Option(None, "--torch", help="The torch requirement installed in the image \\[default: this host's torch, the same build], e.g. 'torch==2.13.0+cpu'."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Build an image holding this checkout's dlbench and a PyTorch; the base and the dependency layer are built
    once and reused (a rebuild after a code change takes seconds). Run benchmarks in it with --container TAG."""
    import logging

    from dlbench.api.image import build_image

    logging.getLogger("dlbench").setLevel(logging.INFO)  # the build's steps are long: say what is happening
    built = build_image(tag=tag, base=base, torch_requirement=torch)
    if as_json:
        emit_json(built.as_dict())
        return
    made = ", ".join(built.built)
    info(f"built {made} in {built.seconds:.0f} s" if built.built else "nothing to build")
    print(f"{built.tag}  {built.digest}  ({built.torch} on {built.base})")
