"""``kernelexec audit``: an audit log's lines, its rotated files first, filtered.

Read-only and safe to run while servers write the log: a damaged line is
named on stderr (file and line number) and passed over, so an operator
reading a log after a crash sees every line that is whole. The table is for
a person; ``--json`` gives the lines as written, for ``jq`` or a script.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from .._audit._fields import KINDS
from .._audit._read import Filters, log_files, read_entries
from .._exceptions import ConfigurationError
from .._times import iso

__all__ = ["add_command"]

_COLUMNS = (
    ("TIME", 24),
    ("KIND", 9),
    ("TENANT", 10),
    ("TOKEN", 12),
    ("SESSION", 12),
    ("STATUS", 18),
)
_HEADER = "  ".join([*(name.ljust(width) for name, width in _COLUMNS), "WHAT"])


def add_command(commands: Any) -> None:
    """Adds ``kernelexec audit``."""
    audit = commands.add_parser(
        "audit",
        help="read an audit log, filtered",
        description="Prints the lines of an audit log, its rotated files (FILE.N ... FILE.1) "
        "first, that pass every filter given: as a table, or with --json as written. A "
        "damaged line is named on stderr and passed over.",
        epilog="example:\n"
        "  kernelexec audit audit.log --tenant alice --status 4xx   # alice's refused requests\n"
        "  kernelexec audit audit.log --kind execution --json | jq .usage\n",
    )
    audit.add_argument("file", metavar="FILE", help="the audit log (as given to the server)")
    audit.add_argument("--tenant", metavar="NAME", help="this tenant's lines")
    audit.add_argument(
        "--session", metavar="ID", help="this session's lines (its id, or the start of it)"
    )
    audit.add_argument("--kind", choices=KINDS, help="requests, executions or the server's own")
    audit.add_argument(
        "--since",
        metavar="TIME",
        type=_since,
        help="lines from this time on: 2025-06-02, 2025-06-02T10:00 or 2025-06-02T10:00:00+02:00 "
        "(UTC unless it says otherwise)",
    )
    audit.add_argument(
        "--status",
        metavar="STATUS",
        action="append",
        type=_statuses,
        default=[],
        help="an HTTP status (403), a class (4xx), an execution's outcome (timeout) or an error "
        "code; several, comma-separated or repeated, match any",
    )
    audit.add_argument("--json", action="store_true", help="the lines as written, one per line")
    audit.set_defaults(handler=_audit)


def _audit(args: argparse.Namespace) -> int:
    files = log_files(args.file)
    if not files:
        raise ConfigurationError(
            f"no audit log at {args.file}: give the file the server's --audit-log names"
        )
    filters = Filters(
        tenant=args.tenant,
        session=args.session,
        kind=args.kind,
        since=args.since,
        statuses=tuple(status for group in args.status for status in group),
    )
    try:
        if not args.json:
            print(_HEADER)
        for entry in read_entries(files):
            if entry.fields is None:
                print(
                    f"kernelexec audit: {entry.file}:{entry.number}: {entry.problem}, skipped",
                    file=sys.stderr,
                )
            elif filters.match(entry.fields):
                print(entry.text if args.json else _row(entry.fields))
        sys.stdout.flush()
    except BrokenPipeError:
        # `kernelexec audit FILE | head`: the reader had enough, which is no error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read {exc.filename or args.file} ({exc.strerror}): run this as a user "
            "who may read the log (it is made mode 0600, for the server's user)"
        ) from None
    return 0


def _row(fields: Mapping[str, Any]) -> str:
    cells = [
        _text(fields.get("time")),
        _text(fields.get("kind")),
        _text(fields.get("tenant")),
        _text(fields.get("token_id")),
        _text(fields.get("session"))[:12],
        " ".join(_text(fields[name]) for name in ("status", "outcome", "error") if name in fields)
        or "-",
    ]
    padded = [cell.ljust(width) for cell, (_, width) in zip(cells, _COLUMNS, strict=True)]
    return "  ".join([*padded, _what(fields)]).rstrip()


def _what(fields: Mapping[str, Any]) -> str:
    """What the line is about, in a few words: a request's route, an execution's code."""
    if fields.get("kind") == "server":
        return " ".join(_text(fields[name]) for name in ("event", "count") if name in fields)
    parts = []
    if fields.get("kind") == "request":
        parts.append(
            f"{_text(fields.get('method'))} {_text(fields.get('route', fields.get('path')))}"
        )
    else:
        parts.append(_text(fields.get("execution_id")))
    if "code_sha256" in fields:
        code = _text(fields["code_sha256"])[:12]
        parts.append(f"code {code} ({_text(fields.get('code_bytes'))} B)")
    if "bytes_out" in fields:
        parts.append(f"{_text(fields['bytes_out'])} B out")
    if "message" in fields:
        parts.append(_text(fields["message"]))
    return ", ".join(parts)


def _text(value: Any) -> str:
    # Every field as one line of plain text, whatever a hand-edited line holds.
    return "-" if value is None else re.sub(r"[\x00-\x1f\x7f]", "?", str(value))


def _since(text: str) -> str:
    """``--since``'s time, written as the log writes times, so that they compare as text."""
    written = text.strip()
    if written[-1:] in ("Z", "z"):  # Python 3.10's fromisoformat reads no Z
        written = written[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(written)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: write 2025-06-02, 2025-06-02T10:00 or 2025-06-02T10:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return iso(moment.timestamp())


def _statuses(text: str) -> list[str]:
    wanted = [part.strip() for part in text.split(",") if part.strip()]
    if not wanted:
        raise argparse.ArgumentTypeError("give a status: 403, 4xx, ok, timeout, ...")
    return wanted
