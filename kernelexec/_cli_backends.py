"""The backend commands: ``kernelexec gateway``, ``image build`` and ``cleanup``."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

__all__ = ["add_commands"]


def add_commands(commands: Any) -> None:
    """Adds the backend subcommands to ``kernelexec``'s subparsers."""
    gateway = commands.add_parser(
        "gateway",
        help="run a local Jupyter Kernel Gateway tuned for agents",
        description="Runs a Jupyter Kernel Gateway for GatewayBackend: token required, "
        "TCP_NODELAY on kernel WebSockets, no IOPub rate limit, no secrets in kernels.",
    )
    gateway.add_argument("--port", type=int, default=8888, help="TCP port (default 8888)")
    gateway.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    gateway.add_argument("--token", help="the clients' token (default: generated and printed)")
    gateway.add_argument(
        "--allow-env",
        nargs="*",
        default=[],
        metavar="NAME",
        help="more variable names clients may set in a kernel's env",
    )
    gateway.add_argument("--no-nodelay", action="store_true", help=argparse.SUPPRESS)
    gateway.set_defaults(handler=_gateway)

    image = commands.add_parser("image", help="build the Docker image for DockerBackend")
    image_commands = image.add_subparsers(required=True, metavar="ACTION")
    build = image_commands.add_parser(
        "build",
        help="build and tag the kernel image",
        description="Builds docker/Dockerfile; the tag is derived from every input, so "
        "building again with the same inputs does nothing. Prints the tag.",
    )
    build.add_argument("--base-image", help="FROM image (default python:3.12-slim)")
    build.add_argument(
        "--packages", nargs="*", default=[], metavar="P", help="extra pip packages for the kernel"
    )
    build.add_argument("--requirements", type=Path, help="a requirements file for the kernel")
    build.add_argument("--quiet", action="store_true", help="print only the tag")
    build.set_defaults(handler=_image_build)

    cleanup = commands.add_parser(
        "cleanup",
        help="remove kernel containers left by crashed processes",
        description="Removes kernelexec's containers whose owning process is gone.",
    )
    cleanup.add_argument(
        "--all", action="store_true", help="also remove containers of processes still running"
    )
    cleanup.set_defaults(handler=_cleanup)


def _gateway(args: argparse.Namespace) -> int:
    from ._gateway_app import run_gateway

    return run_gateway(
        port=args.port,
        token=args.token,
        host=args.host,
        nodelay=not args.no_nodelay,
        allow_env=tuple(args.allow_env),
    )


def _image_build(args: argparse.Namespace) -> int:
    from ._image import build_image

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


def _cleanup(args: argparse.Namespace) -> int:
    from ._backends._docker import cleanup_containers

    removed = asyncio.run(cleanup_containers(everything=args.all))
    for name in removed:
        print(f"removed {name}")
    print(f"kernelexec cleanup: {len(removed)} container(s) removed")
    return 0
