"""An audit log read back: its files oldest first, each line parsed or said to be damaged.

For ``kernelexec audit``, and for whoever checks a log in a test. A line
that does not parse (cut off by a crash, edited by hand, or not an audit
log at all) is an ``Entry`` with a ``problem`` instead of fields, so the
reader can say where it is and go on: one bad line must not hide the rest
of a log.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Entry", "Filters", "log_files", "read_entries"]


@dataclass(frozen=True)
class Entry:
    """One line of one file.

    Attributes:
        file: the file's path.
        number: the line's number in it, from 1.
        text: the line as written, without its end of line.
        fields: the parsed line; None when it does not parse.
        problem: why it does not parse; None when it does.
    """

    file: str
    number: int
    text: str
    fields: dict[str, Any] | None
    problem: str | None = None


@dataclass(frozen=True)
class Filters:
    """Which lines to keep; every filter given must match, and None matches any.

    Attributes:
        tenant: the tenant's name.
        session: the session's id, or its start (as a table shows it).
        kind: request, execution or server.
        since: the earliest time, written as the log writes times
            (``2025-06-02T10:15:30.123Z``), which sort as text.
        statuses: any of these matches: an HTTP status (``403``), a class
            of them (``4xx``), or an execution's outcome or a request's
            error code (``timeout``, ``quota_exceeded``).
    """

    tenant: str | None = None
    session: str | None = None
    kind: str | None = None
    since: str | None = None
    statuses: tuple[str, ...] = ()

    def match(self, fields: Mapping[str, Any]) -> bool:
        """Whether a line with ``fields`` passes every filter."""
        if self.tenant is not None and fields.get("tenant") != self.tenant:
            return False
        if self.kind is not None and fields.get("kind") != self.kind:
            return False
        if self.session is not None:
            session = fields.get("session")
            if not isinstance(session, str) or not session.startswith(self.session):
                return False
        if self.since is not None:
            moment = fields.get("time")
            if not isinstance(moment, str) or moment < self.since:
                return False
        return not self.statuses or any(_status_matches(s, fields) for s in self.statuses)


def _status_matches(wanted: str, fields: Mapping[str, Any]) -> bool:
    status = fields.get("status")
    if wanted.isdigit():
        return status == int(wanted)
    if re.fullmatch(r"[1-5]xx", wanted):
        return isinstance(status, int) and status // 100 == int(wanted[0])
    return wanted in (fields.get("outcome"), fields.get("error"))


def log_files(path: str | os.PathLike[str]) -> list[str]:
    """The files of the log at ``path``, oldest first: ``FILE.N`` ... ``FILE.1``, ``FILE``.

    Only those there now; none when there is no such log. The rotated files
    are found by their number, however many the writer kept, and named as
    ``path`` is (relative stays relative), so messages show what was typed.
    """
    path = os.fspath(path)
    folder, name = os.path.split(path)
    numbered = re.compile(re.escape(name) + r"\.([0-9]+)")
    try:
        names = os.listdir(folder or ".")
    except OSError:
        names = []
    rotated = sorted(
        ((int(found[1]), entry) for entry in names if (found := numbered.fullmatch(entry))),
        reverse=True,
    )
    files = [os.path.join(folder, entry) for _, entry in rotated]
    return [*files, path] if name in names else files


def read_entries(files: list[str]) -> Iterator[Entry]:
    """Every line of ``files``, in order.

    A file that has gone since it was listed (rotated out by a writer while
    this read) is passed over: what it held is in the next one, or gone.
    """
    for file in files:
        try:
            handle = open(file, "rb")
        except FileNotFoundError:
            continue
        with handle:
            for number, raw in enumerate(handle, 1):
                yield _entry(file, number, raw)


def _entry(file: str, number: int, raw: bytes) -> Entry:
    whole = raw.endswith(b"\n")
    text = raw.rstrip(b"\r\n").decode("ascii", "backslashreplace")
    try:
        fields = json.loads(raw)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        if not whole:
            problem = "cut off before its end (a torn line)"
        elif fields is None:
            problem = "not JSON (a torn or damaged line)"
        else:
            problem = "not a JSON object"
        return Entry(file, number, text, None, problem)
    return Entry(file, number, text, fields)
