"""The ``kernelexec`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .._exceptions import KernelexecError
from .._secrecy import drop_capabilities, protect_process
from . import attach, cleanup, gateway, image, mcp, replay, run, serve

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a ``kernelexec`` command; ``argv`` defaults to this process's arguments.

    Run as the process's own command (``argv`` None), it first keeps its
    secrets from the kernels it will start: its ``--token`` hidden from
    /proc/<pid>/cmdline, the process non-dumpable, and the capabilities that
    would read it anyway dropped for good (see ``_secrecy``). Called with
    ``argv`` from another program, that program's process is left as it is.
    """
    if argv is None:
        drop_capabilities()
        protect_process()
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except KernelexecError as exc:
        print(f"kernelexec: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelexec", description="Stateful code execution on Jupyter kernels."
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    for command in (run, serve, mcp, gateway, replay, attach, image, cleanup):
        command.add_command(commands)
    return parser
