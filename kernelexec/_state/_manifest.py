"""The checkpoint format: what a checkpoint directory holds, read back and checked.

::

    <checkpoint>/
        manifest.json        versions, parent, variables (name, type, size, file), skipped
        vars/0001.pkl        one pickle per variable ...
        vars/0001.buf        ... and its out-of-band buffers (array data), back to back
        files/...            the work dir's files when the checkpoint was made
        transcript.ipynb     the parent's transcript at that moment

``manifest.json`` is written last (``_checkpoint.py``): a directory without
one is not a checkpoint. Everything read back (the manifest, the kernel's
reports) is held to a size and a shape before it is used: the kernel wrote
some of it, and a person may have edited the rest.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import _times, _workdir
from .._exceptions import CheckpointError
from .._version import __version__

__all__ = [
    "CAUSES",
    "DEFAULT_FOLDER",
    "MANIFEST",
    "STAGING",
    "Checkpoint",
    "CheckpointVariable",
    "RestoreReport",
    "SkippedVariable",
    "build_manifest",
    "check_report",
    "dump_json",
    "note",
    "read_json",
    "read_manifest",
]

MANIFEST = "manifest.json"
FORMAT = 1
DEFAULT_FOLDER = "checkpoints"  # under the work dir; left out of the files copied
_STEM = re.compile(r"^\d{4}$")
_MAX_JSON = 64 * 1024 * 1024  # a report or manifest beyond this is not ours
# The staging folders a checkpoint and a restore make in a work dir (a crash may leave them).
STAGING = re.compile(r"\.kernelexec-(checkpoint|restore)-[0-9a-f]{16}")
# Why a variable was left out (``manifest["skipped"][i]["cause"]``): the object itself
# could not be pickled, or something that may pass (see _kernel/checkpoint.py).
CAUSES = ("object", "disk", "io", "timeout", "memory")


@dataclass(frozen=True)
class CheckpointVariable:
    """A variable a checkpoint holds: ``size`` bytes in ``file`` (and ``buffers_file``)."""

    name: str
    type: str
    size: int
    file: str
    buffers_file: str


@dataclass(frozen=True)
class SkippedVariable:
    """A variable a checkpoint or a restore could not carry, and why."""

    name: str
    type: str
    reason: str


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint directory, as its manifest describes it.

    Attributes:
        path: the directory.
        created: when it was made (ISO 8601, UTC).
        variables: what it holds, in restore order.
        modules: module aliases (``{"np": "numpy"}``), re-imported by name.
        skipped: variables that could not be carried, with the reason.
        files: how many work-dir files it holds under ``files/``.
        packages: versions of the packages whose objects it holds (and of
            cloudpickle), which a restoring kernel must have.
        python: the Python that made it ("cpython 3.11.7").
        manifest: the whole manifest, as read.
    """

    path: Path
    created: str
    variables: list[CheckpointVariable]
    modules: dict[str, str]
    skipped: list[SkippedVariable]
    files: int
    packages: dict[str, str]
    python: str
    manifest: dict[str, Any] = field(repr=False)

    @classmethod
    def open(cls, path: str | Path) -> Checkpoint:
        """Reads and checks a checkpoint directory's manifest and variable files.

        Raises:
            CheckpointError: no such directory, no manifest, or a manifest or
                variable file that is damaged (the message says which).
        """
        root = Path(path).expanduser().resolve()
        manifest = read_manifest(root)
        return cls._of(root, manifest)

    @classmethod
    def _of(cls, root: Path, manifest: dict[str, Any]) -> Checkpoint:
        python = manifest["python"]
        return cls(
            path=root,
            created=manifest["created"],
            variables=[
                CheckpointVariable(v["name"], v["type"], v["size"], v["file"], v["buffers_file"])
                for v in manifest["variables"]
            ],
            modules=dict(manifest["modules"]),
            skipped=[
                SkippedVariable(s["name"], s["type"], s["reason"]) for s in manifest["skipped"]
            ],
            files=int(manifest["files"]["count"]),
            packages=dict(manifest["packages"]),
            python=f"{python['implementation']} {'.'.join(map(str, python['version']))}",
            manifest=manifest,
        )

    @property
    def size(self) -> int:
        """Bytes of variable data."""
        return sum(v.size for v in self.variables)

    @property
    def text(self) -> str:
        """What was carried and what was not, for an LLM or a person."""
        lines = [
            f"Checkpoint {self.path}: {len(self.variables)} variables "
            f"({_bytes(self.size)}), {len(self.modules)} modules, {self.files} files."
        ]
        if self.variables:
            lines.append("Variables: " + ", ".join(f"{v.name} ({v.type})" for v in self.variables))
        if self.modules:
            lines.append("Modules: " + ", ".join(_alias(a, m) for a, m in self.modules.items()))
        lines.extend(_skipped_lines(self.skipped, "Not carried"))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The manifest, with the directory's path."""
        return {"path": str(self.path), **self.manifest}


@dataclass(frozen=True)
class RestoreReport:
    """What a restore brought back into the kernel, and what it did not.

    Attributes:
        checkpoint: the checkpoint's directory (a temporary one for
            ``restart(keep_state=True)``, removed since).
        restored: the variables back in the kernel.
        modules: the module aliases imported again.
        skipped: what did not come back (not carried by the checkpoint, or
            failed to load), with the reason.
        files: work-dir files copied from the checkpoint.
        message: anything else worth saying, or None.
    """

    checkpoint: str
    restored: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    skipped: list[SkippedVariable] = field(default_factory=list)
    files: int = 0
    message: str | None = None

    @property
    def text(self) -> str:
        lines = [
            f"Restored {len(self.restored)} variables and {len(self.modules)} modules"
            + (f" and {self.files} files" if self.files else "")
            + "."
        ]
        if self.restored:
            lines.append("Variables: " + ", ".join(self.restored))
        if self.modules:
            lines.append("Modules: " + ", ".join(self.modules))
        lines.extend(_skipped_lines(self.skipped, "Not restored"))
        if self.message:
            lines.append(self.message)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_manifest(
    report: dict[str, Any],
    work_dir: Path,
    notebook: Path,
    cells: int,
    copied: int,
    left_out: list[str],
) -> dict[str, Any]:
    """The manifest of a checkpoint made from the kernel's ``report``."""
    return {
        "kernelexec_checkpoint": FORMAT,
        "kernelexec_version": __version__,
        "created": _times.now(),
        "python": report["python"],
        "serializer": "cloudpickle",
        "packages": report["packages"],
        "parent": {"work_dir": str(work_dir), "transcript": str(notebook), "cells": cells},
        "execution_count": report["execution_count"],
        "variables": [
            {
                "name": v["name"],
                "type": v["type"],
                "size": v["size"],
                "file": f"vars/{v['file']}.pkl",
                "buffers_file": f"vars/{v['file']}.buf",
                "buffers": v["buffers"],
                "packages": v["packages"],
            }
            for v in report["variables"]
        ],
        "modules": report["modules"],
        "skipped": report["skipped"],
        "files": {"folder": "files", "count": copied, "left_out": left_out},
    }


def read_json(folder: int, name: str, what: str) -> dict[str, Any]:
    """A JSON object kernelexec or the kernel wrote, read from ``folder`` with no link followed."""
    try:
        with _workdir.open_in(folder, name) as file:
            data = file.read(_MAX_JSON + 1)
    except OSError as exc:
        raise CheckpointError(f"{what} is missing or unreadable ({exc})") from exc
    if len(data) > _MAX_JSON:
        raise CheckpointError(f"{what} is over {_MAX_JSON:,} bytes; not a kernelexec file")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{what} is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise CheckpointError(f"{what} is not a JSON object")
    return value


def check_report(report: dict[str, Any]) -> None:
    try:
        for entry in report["variables"]:
            _check_variable(entry, stem=True)
        _check_common(report)
    except (KeyError, TypeError, ValueError, AssertionError) as exc:
        raise CheckpointError(f"the kernel's checkpoint report is malformed ({exc!r})") from exc


def read_manifest(root: Path) -> dict[str, Any]:
    """A checkpoint directory's manifest, checked, and its variable files' sizes against it."""
    if not root.is_dir():
        raise CheckpointError(f"{root} is not a directory; give a checkpoint's directory")
    try:
        folder = _workdir.open_folder(root, [])
    except OSError as exc:
        raise CheckpointError(f"cannot open checkpoint {root}: {exc}") from exc
    try:
        try:
            manifest = read_json(folder, MANIFEST, f"{root / MANIFEST}")
        except CheckpointError as exc:
            raise CheckpointError(
                f"{root} is not a usable kernelexec checkpoint: {exc} (a checkpoint that "
                "was interrupted has no manifest)"
            ) from exc
    finally:
        os.close(folder)
    try:
        assert manifest.get("kernelexec_checkpoint") == FORMAT, "an unknown format"
        assert isinstance(manifest["created"], str)
        for entry in manifest["variables"]:
            _check_variable(entry, stem=False)
        _check_common(manifest)
        assert isinstance(manifest["files"]["count"], int)
    except (KeyError, TypeError, ValueError, AssertionError) as exc:
        raise CheckpointError(
            f"the manifest of checkpoint {root} is damaged ({_why(exc)}); it cannot be restored"
        ) from exc
    for entry in manifest["variables"]:
        sizes = []
        for name in (entry["file"], entry["buffers_file"]):
            try:
                sizes.append((root / name).lstat().st_size)
            except OSError as exc:
                raise CheckpointError(
                    f"checkpoint {root} is damaged: {name} (variable {entry['name']!r}) "
                    f"is missing ({exc.strerror})"
                ) from exc
        if sizes[1] != sum(entry["buffers"]) or sum(sizes) != entry["size"]:
            raise CheckpointError(
                f"checkpoint {root} is damaged: the files of variable {entry['name']!r} "
                f"hold {sum(sizes):,} bytes, the manifest says {entry['size']:,}"
            )
    return manifest


def _check_variable(entry: Any, *, stem: bool) -> None:
    assert isinstance(entry, dict), "a variable is not an object"
    assert isinstance(entry["name"], str) and entry["name"].isidentifier(), "a bad name"
    assert isinstance(entry["type"], str)
    assert type(entry["size"]) is int and entry["size"] >= 0, "a bad size"
    buffers = entry["buffers"]
    assert isinstance(buffers, list) and all(type(b) is int and b >= 0 for b in buffers)
    assert isinstance(entry["packages"], list)
    if stem:
        assert isinstance(entry["file"], str) and _STEM.match(entry["file"]), "a bad file"
    else:
        for key, suffix in (("file", ".pkl"), ("buffers_file", ".buf")):
            name = entry[key]
            assert isinstance(name, str), "a bad file"
            folder, _, base = name.partition("/")
            assert folder == "vars" and _STEM.match(base.removesuffix(suffix)), "a bad file"
            assert base.endswith(suffix), "a bad file"


def _check_common(data: dict[str, Any]) -> None:
    python = data["python"]
    assert isinstance(python["version"], list) and len(python["version"]) >= 2
    assert isinstance(python["implementation"], str)
    assert type(data["execution_count"]) is int
    assert isinstance(data["modules"], dict)
    assert all(
        isinstance(k, str) and k.isidentifier() and isinstance(v, str)
        for k, v in data["modules"].items()
    ), "a bad module"
    assert isinstance(data["packages"], dict)
    assert all(isinstance(v, str) for v in data["packages"].values())
    for skipped in data["skipped"]:
        assert {"name", "type", "reason"} <= set(skipped)
        assert all(isinstance(skipped[k], str) for k in ("name", "type", "reason"))
        assert skipped.get("cause", "object") in CAUSES, "a bad cause"


def _why(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r}"
    return str(exc) or type(exc).__name__


def dump_json(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=False) + "\n").encode("utf-8")


def _bytes(size: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return ""


def _alias(alias: str, module: str) -> str:
    return module if alias == module else f"{module} as {alias}"


def _skipped_lines(skipped: Sequence[SkippedVariable], heading: str) -> list[str]:
    if not skipped:
        return []
    return [f"{heading}:"] + [f"- {s.name} ({s.type}): {s.reason}" for s in skipped]


def note(report: RestoreReport, *, how: str) -> str:
    """The transcript note of a restore: where from, what came back, what did not."""
    body = report.text.replace("\n", "\n\n")
    return f"*kernelexec: {how}.*\n\n{body}"
