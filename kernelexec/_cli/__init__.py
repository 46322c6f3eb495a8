"""The ``kernelexec`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .._containment._secrecy import drop_capabilities, protect_process
from .._exceptions import KernelexecError
from .._version import __version__
from . import attach, audit, cleanup, gateway, image, mcp, replay, run, serve, token
from ._suggest import Parser

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a ``kernelexec`` command; ``argv`` defaults to this process's arguments.

    Run as the process's own command (``argv`` None), it first keeps its
    secrets from the kernels it will start: its ``--token`` hidden from
    /proc/<pid>/cmdline, the process non-dumpable, and the capabilities that
    would read it anyway dropped for good (see ``_containment/_secrecy.py``). Called with
    ``argv`` from another program, that program's process is left as it is.
    """
    if argv is None:
        drop_capabilities()
        protect_process()
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        # Bare `kernelexec` is a question, not a mistake: the answer is the help.
        parser.print_help()
        return 0
    try:
        return int(args.handler(args))
    except KernelexecError as exc:
        print(f"kernelexec: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="kernelexec",
        description="Stateful code execution on Jupyter kernels.",
        epilog=_EXAMPLE,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kernelexec {__version__}")
    commands = parser.add_subparsers(metavar="COMMAND")
    for command in (run, serve, mcp, gateway, replay, attach, image, cleanup, token, audit):
        command.add_command(commands)
    _format_examples(parser)
    return parser


_EXAMPLE = """\
example:
  kernelexec run answer.md          # an LLM's message: its python and bash blocks, live
  kernelexec COMMAND --help         # each command's options, with an example
"""


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps descriptions as argparse does, but keeps an ``example:`` epilog as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("example"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _format_examples(parser: argparse.ArgumentParser) -> None:
    """Gives every (sub)command's help the formatter that keeps its example's lines."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                subparser.formatter_class = _HelpFormatter
                _format_examples(subparser)
