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
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from .. import _workdir
from .._exceptions import ConfigurationError
from .._state._manifest import STAGING
from .._tenants._config import DEFAULT_TENANT, is_tenant_name

__all__ = [
    "FOLDER",
    "MAX_BYTES",
    "MAX_RECORDS",
    "Record",
    "RecordState",
    "Records",
    "claim",
    "records_key",
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
_RECORD = re.compile(r"(checkpoint-)?[0-9a-f]{32}")
_KEY_FILE = ".records-key"
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
    tenant: str = DEFAULT_TENANT  # whose it is: records from before tenants are the default's

    @classmethod
    def parse(cls, data: Any) -> Record:
        """A record from its JSON, every field checked; ValueError if one is wrong."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a record of this format")
        fields: dict[str, Any] = {k: data.get(k) for k in cls.__dataclass_fields__}
        if fields["tenant"] is None:
            fields["tenant"] = DEFAULT_TENANT
        if not (isinstance(fields["tenant"], str) and is_tenant_name(fields["tenant"])):
            raise ValueError("a bad tenant")
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
    """The records of the sessions under one work root, signed with the server's secret.

    The secret is its ``--token``, or for a server of many tenants the key
    ``records_key`` keeps in the work root. Each checkpoint of the store has a
    record too, ``.sessions/checkpoint-<id>.json``: the tenant it belongs to.
    """

    def __init__(self, work_root: Path, secret: str) -> None:
        self.work_root = work_root
        self._key = hashlib.sha256(b"kernelexec session record\0" + secret.encode()).digest()

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
        if not _RECORD.fullmatch(session_id):
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

    def write_owner(self, checkpoint_id: str, tenant: str) -> None:
        """Records which tenant a checkpoint of the store belongs to.

        Raises:
            OSError: it cannot be written.
        """
        body = {"format": FORMAT, "checkpoint": checkpoint_id, "tenant": tenant}
        data = json.dumps({"owner": body, "mac": self._mac(body)}, ensure_ascii=True)
        folder, _ = _workdir.own_folder(self.work_root, [FOLDER, "-"])
        os.close(folder)
        _workdir.write(self.work_root, f"{FOLDER}/checkpoint-{checkpoint_id}.json", data.encode())

    def owner(self, checkpoint_id: str) -> str | None:
        """The tenant a checkpoint belongs to; None when no valid record says (only an
        admin sees it then: one made before tenants, or a record a kernel forged)."""
        if not _ID.fullmatch(checkpoint_id):
            return None
        try:
            folder = _workdir.open_folder(self.work_root, [FOLDER])
        except OSError:
            return None
        try:
            with _workdir.open_in(folder, f"checkpoint-{checkpoint_id}.json") as file:
                raw = _read_most(file, 4096)
            signed = json.loads(raw or b"")
            body, mac = signed["owner"], signed["mac"]
            if not (isinstance(mac, str) and hmac.compare_digest(mac, self._mac(body))):
                return None
            tenant = body["tenant"]
            if body.get("checkpoint") != checkpoint_id or not isinstance(tenant, str):
                return None
            return tenant
        except (OSError, ValueError, TypeError, KeyError, RecursionError):
            return None
        finally:
            os.close(folder)

    def remove_owner(self, checkpoint_id: str) -> None:
        """Forgets whose a removed checkpoint was; absent is fine."""
        if _ID.fullmatch(checkpoint_id):
            self.remove(f"checkpoint-{checkpoint_id}")

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


def records_key(work_root: Path) -> str:
    """The secret that signs the records of a server of many tenants (it has no one token).

    Kept in ``<work_root>/.records-key`` (mode 0600), made on first use, so
    that a restarted server trusts the records it wrote. A contained kernel
    (the default) cannot read outside its work dir; an uncontained one runs
    as the server's user and could, as it could read anything of that user's.

    Raises:
        ConfigurationError: the key can be neither read nor made.
    """
    path = work_root / _KEY_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = -1
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path} ({exc.strerror}): remove it") from None
    if fd < 0:
        key = secrets.token_hex(32)
        try:
            made = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with open(made, "w") as file:
                file.write(key)
        except FileExistsError:
            return records_key(work_root)  # another start made it first
        except OSError as exc:
            raise ConfigurationError(
                f"cannot make {path} ({exc.strerror}): make the work root writable"
            ) from None
        return key
    with open(fd) as file:
        key = file.read().strip()
    if len(key) < 32:
        raise ConfigurationError(f"{path} holds no key: remove it, and a new one is made")
    return key
