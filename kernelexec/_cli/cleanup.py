"""``kernelexec cleanup``: containers left behind by crashed processes."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Adds ``kernelexec cleanup``."""
    cleanup = commands.add_parser(
        "cleanup",
        help="remove kernel containers left by crashed processes",
        description="Removes kernelexec's containers whose owning process is gone.",
        epilog="example:\n"
        "  kernelexec cleanup          # after a crash; --all also stops running ones\n",
    )
    cleanup.add_argument(
        "--all", action="store_true", help="also remove containers of processes still running"
    )
    cleanup.set_defaults(handler=_cleanup)


def _cleanup(args: argparse.Namespace) -> int:
    from .._backends._docker import cleanup_containers

    removed = asyncio.run(cleanup_containers(everything=args.all))
    for name in removed:
        print(f"removed {name}")
    print(f"kernelexec cleanup: {len(removed)} container(s) removed")
    return 0
