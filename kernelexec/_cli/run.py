"""``kernelexec run``: a .py file as one block, or a .md file block by block."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from .._models import ExecutionResult
from .._session import AsyncSession

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Adds ``kernelexec run``."""
    run = commands.add_parser(
        "run",
        help="run a .py file as one block, or a .md file block by block",
        description="Runs a .py file as one block, or each fenced code block of a .md file "
        "in one session. Exits 0 if every block succeeded, 1 otherwise.",
    )
    run.add_argument("file", type=Path)
    run.add_argument(
        "--work-dir",
        type=Path,
        help="where files and the transcript go (default: a new temp dir, printed at the end)",
    )
    run.add_argument("--json", action="store_true", help="print one JSON result per line")
    run.add_argument("--timeout", type=float, default=60.0, help="seconds per block (default 60)")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    path: Path = args.file
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"kernelexec: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    results = asyncio.run(_run_file(text, path.suffix.lower() == ".md", args))
    return 0 if results and all(r.ok for r in results) else 1


async def _run_file(text: str, markdown: bool, args: argparse.Namespace) -> list[ExecutionResult]:
    async with AsyncSession(args.work_dir, timeout=args.timeout) as session:
        if markdown:
            results = await session.run_markdown(text)
        else:
            results = [await session.execute(text)]
        for result in results:
            if args.json:
                print(json.dumps(result.to_dict(), ensure_ascii=False))
            else:
                print(
                    result.text, end="" if result.text.endswith("\n") or not result.text else "\n"
                )
        if not args.json:
            print(f"[kernelexec] files and transcript in {session.work_dir}", file=sys.stderr)
    return results
