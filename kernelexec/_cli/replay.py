"""``kernelexec replay``: re-run a transcript into a new session and report differences."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from .._session._async import AsyncSession

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    replay = commands.add_parser(
        "replay",
        help="re-run a notebook's code cells in a new session",
        description="Re-runs the code cells of a kernelexec transcript (or any notebook) in a "
        "new session, skipping cells that failed when recorded, and reports every cell whose "
        "stdout or error now differs. Exits 0 when nothing differs, 1 otherwise.",
        epilog="example:\n  kernelexec replay old/transcript.ipynb --work-dir new --until 5\n",
    )
    replay.add_argument("notebook", type=Path)
    replay.add_argument(
        "--work-dir", type=Path, help="the new session's work dir (default: a new temp dir)"
    )
    replay.add_argument("--until", type=int, metavar="N", help="stop after code cell N (from 1)")
    replay.add_argument(
        "--include-failed", action="store_true", help="also run cells that failed when recorded"
    )
    replay.add_argument("--json", action="store_true", help="print the report as JSON")
    replay.add_argument("--timeout", type=float, default=60.0, help="seconds per cell (default 60)")
    replay.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace) -> int:
    return asyncio.run(_replay_async(args))


async def _replay_async(args: argparse.Namespace) -> int:
    session = await AsyncSession.from_transcript(
        args.notebook,
        args.work_dir,
        until=args.until,
        include_failed=args.include_failed,
        timeout=args.timeout,
    )
    try:
        report = session.replay_report
        assert report is not None
        if args.json:
            print(json.dumps({**report.to_dict(), "work_dir": str(session.work_dir)}))
        else:
            print(report.text, end="")
            print(f"[kernelexec] the replayed session is in {session.work_dir}", file=sys.stderr)
    finally:
        await session.close()
    return 0 if report.ok else 1
