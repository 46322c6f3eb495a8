"""What a server keeps on disk about each session, so that a restart knows them again.

One small file per session, ``<work-root>/.sessions/<id>.json``, beside the
sessions' work dirs and never inside one: what the session was made with
(kernel, timeout, env, options), whether it is live, suspended (and in which
checkpoint of the store) or culled. It is rewritten whole (a temp file
renamed over it, in a folder held with no link followed) whenever that
changes, and removed with the session. At start the server reads them back
(``Records.load``): a suspended session is suspended again and resumes on
its next execution; one that was live lost its kernel with the old server,
and says so (HTTP 410) instead of being unknown.

A kernel must not be able to use these files against the server. A Docker
kernel sees only its own work dir, but a local kernel runs as the server's
user and can write anywhere the server can, so nothing read back is trusted
as it stands:

- each record carries an HMAC-SHA256 of its content, keyed by a hash of the
  server's token, which no kernel sees (it is never in a kernel's
  environment, and the server's ``/proc`` files are closed to kernels). A
  record a kernel wrote or changed, or one moved from another session's
  name, fails the check and is ignored (left on disk, counted in the log). A
  server restarted with another token trusts none of them: sessions survive
  a restart with the same token;
- the session id is the file's name and must equal the record's; its work
  dir is ``<work-root>/<id>``, never a path from the record, and a
  checkpoint is named by id only, looked up in the store, and must have been
  made from that very work dir and be claimed by no other record
  (``Registry.recover`` checks);
- at most ``MAX_RECORDS`` are read, each at most ``MAX_BYTES``, opened with
  no link followed; every field is checked for its type.

``claim`` holds a lock on the work root for the server's lifetime, so that
a second server on the same root is refused at start rather than sweeping
what the first one is writing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from .. import _workdir
from .._exceptions import ConfigurationError
from .._state._manifest import STAGING

__all__ = [
    "FOLDER",
    "MAX_BYTES",
    "MAX_RECORDS",
    "Record",
    "RecordState",
    "Records",
    "claim",
    "sweep_staging",
]

log = logging.getLogger("kernelexec.server")

FOLDER = ".sessions"
LOCK = ".kernelexec-serve.lock"
FORMAT = 1
MAX_RECORDS = 10_000
MAX_BYTES = 16 * 1024 * 1024  # env and preload code can be long; nothing else is
_NAME = re.compile(r"([0-9a-f]{32})\.json")
_ID = re.compile(r"[0-9a-f]{32}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RecordState = Literal["live", "suspended", "culled"]


@dataclass(frozen=True)
class Record:
    """One session as the server keeps it on disk."""

    id: str
    state: RecordState
    kernel_name: str
    timeout: float
    created: float
    env: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # SessionOptions.to_dict()
    checkpoint: str | None = None  # suspended: the checkpoint holding its state
    idle_for: float = 0.0
    why_culled: str | None = None

    @classmethod
    def parse(cls, data: Any) -> Record:
        """A record from its JSON, every field checked; ValueError if one is wrong."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a record of this format")
        fields: dict[str, Any] = {k: data.get(k) for k in cls.__dataclass_fields__}
        if not (isinstance(fields["id"], str) and _ID.fullmatch(fields["id"])):
            raise ValueError("a bad id")
        if fields["state"] not in ("live", "suspended", "culled"):
            raise ValueError("a bad state")
        if not isinstance(fields["kernel_name"], str) or not fields["kernel_name"]:
            raise ValueError("a bad kernel name")
        for name in ("timeout", "created", "idle_for"):
            value = fields[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"a bad {name}")
        env = fields["env"]
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(v, str) and "\0" not in v
            for k, v in env.items()
        ):
            raise ValueError("a bad env")
        if not isinstance(fields["options"], dict):
            raise ValueError("bad options")
        checkpoint = fields["checkpoint"]
        if checkpoint is not None and not (
            isinstance(checkpoint, str) and _ID.fullmatch(checkpoint)
        ):
            raise ValueError("a bad checkpoint id")
        if (checkpoint is None) == (fields["state"] == "suspended"):
            raise ValueError("a suspended session names its checkpoint, and only it")
        if fields["why_culled"] is not None and not isinstance(fields["why_culled"], str):
            raise ValueError("a bad reason")
        return cls(**fields)


class Records:
    """The records of the sessions under one work root, signed with the server's token."""

    def __init__(self, work_root: Path, token: str) -> None:
        self.work_root = work_root
        self._key = hashlib.sha256(b"kernelexec session record\0" + token.encode()).digest()

    def write(self, record: Record) -> None:
        """Writes (or replaces) the session's record whole.

        Raises:
            OSError: it cannot be written (a full disk among others).
        """
        body = {"format": FORMAT, **asdict(record)}
        signed = {"record": body, "mac": self._mac(body)}
        data = json.dumps(signed, ensure_ascii=True, allow_nan=False).encode("ascii")
        folder, _ = _workdir.own_folder(self.work_root, [FOLDER, "-"])
        os.close(folder)
        with contextlib.suppress(OSError):
            os.chmod(self.work_root / FOLDER, 0o700)
        _workdir.write(self.work_root, f"{FOLDER}/{record.id}.json", data)

    def remove(self, session_id: str) -> None:
        """Removes the session's record; absent is fine."""
        if not _ID.fullmatch(session_id):
            return
        try:
            folder = _workdir.open_folder(self.work_root, [FOLDER])
        except OSError:
            return
        try:
            with contextlib.suppress(OSError):
                os.unlink(f"{session_id}.json", dir_fd=folder)
        finally:
            os.close(folder)

    def load(self) -> tuple[list[Record], int]:
        """The records whose signature and content check out, and how many did not."""
        try:
            folder = _workdir.open_folder(self.work_root, [FOLDER])
        except OSError:
            return [], 0
        found: list[Record] = []
        refused = 0
        try:
            with os.scandir(folder) as entries:
                names = [e.name for e in entries if _NAME.fullmatch(e.name)]
            if len(names) > MAX_RECORDS:
                log.warning(
                    "%d session records in %s; only the first %d are read",
                    len(names),
                    self.work_root / FOLDER,
                    MAX_RECORDS,
                )
            for name in sorted(names)[:MAX_RECORDS]:
                record = self._read(folder, name)
                if record is None:
                    refused += 1
                else:
                    found.append(record)
        finally:
            os.close(folder)
        return found, refused

    def _read(self, folder: int, name: str) -> Record | None:
        try:
            with _workdir.open_in(folder, name) as file:
                raw = _read_most(file, MAX_BYTES)
        except OSError:
            return None
        if raw is None:
            return None
        try:
            signed = json.loads(raw)
            body, mac = signed["record"], signed["mac"]
            if not (isinstance(mac, str) and hmac.compare_digest(mac, self._mac(body))):
                return None
            record = Record.parse(body)
        except (ValueError, TypeError, KeyError, RecursionError):
            return None
        match = _NAME.fullmatch(name)
        return record if match is not None and match.group(1) == record.id else None

    def _mac(self, body: Any) -> str:
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hmac.new(self._key, canonical.encode("ascii"), hashlib.sha256).hexdigest()


def _read_most(file: IO[bytes], most: int) -> bytes | None:
    data = file.read(most + 1)
    return None if len(data) > most else data


def sweep_staging(work_root: Path, session_id: str) -> int:
    """Removes the checkpoint and restore staging folders a crash left in a session's work dir.

    Only folders named as kernelexec names its staging, at the top of the
    work dir, reached with no link followed; how many were removed.
    """
    try:
        folder = _workdir.open_folder(work_root, [session_id])
    except OSError:
        return 0
    removed = 0
    try:
        with os.scandir(folder) as entries:
            names = [
                e.name
                for e in entries
                if STAGING.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
            ]
        for name in names:
            _workdir.remove_in(folder, name)
            removed += 1
    finally:
        os.close(folder)
    return removed


def claim(work_root: Path) -> IO[bytes]:
    """Locks the work root for this server; keep the returned file open while serving.

    Raises:
        ConfigurationError: another server holds it, or it cannot be locked (one
            line naming the fix).
    """
    try:
        work_root.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(work_root / LOCK, flags, 0o600)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot lock the work root ({work_root / LOCK}: {exc.strerror or exc}); remove "
            "what is at that name, or pass another --work-root"
        ) from None
    handle = os.fdopen(fd, "r+b")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        handle.close()
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise ConfigurationError(
                f"another kernelexec serve uses the work root {work_root}; stop it first, "
                "or pass another --work-root"
            ) from None
        raise
    return handle
