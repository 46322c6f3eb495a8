"""``kernelexec image build``: the kernel image for DockerBackend."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Adds ``kernelexec image build``."""
    image = commands.add_parser(
        "image",
        help="build the Docker image for DockerBackend",
        epilog="example:\n  kernelexec image build --packages pandas matplotlib\n",
    )
    image_commands = image.add_subparsers(required=True, metavar="ACTION")
    build = image_commands.add_parser(
        "build",
        help="build and tag the kernel image",
        description="Builds kernelexec's Dockerfile; the tag is derived from every input, so "
        "building again with the same inputs does nothing. Prints the tag.",
        epilog="example:\n  kernelexec image build --packages pandas matplotlib\n",
    )
    build.add_argument("--base-image", help="FROM image (default python:3.12-slim)")
    build.add_argument(
        "--packages", nargs="*", default=[], metavar="P", help="extra pip packages for the kernel"
    )
    build.add_argument("--requirements", type=Path, help="a requirements file for the kernel")
    build.add_argument("--quiet", action="store_true", help="print only the tag")
    build.set_defaults(handler=_image_build)


def _image_build(args: argparse.Namespace) -> int:
    from .._backends._image import build_image

    tag = asyncio.run(
        build_image(
            base_image=args.base_image,
            packages=tuple(args.packages),
            requirements=args.requirements,
            quiet=args.quiet,
        )
    )
    print(tag)
    return 0
