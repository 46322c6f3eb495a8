"""Loading a checkpoint into a kernel, and its files into a work dir.

``AsyncSession.restore`` and ``restart(keep_state=True)``
(``_session/_state.py``) take these steps: the files go into the new
work dir, the variable files into a staging folder there, and the kernel loads
them, first refusing a checkpoint made by another Python (major.minor) or with
other versions of the packages whose objects it holds.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path
from typing import Literal

from .. import _workdir
from .._backends import KernelBackend
from .._exceptions import CheckpointError, IncompatibleCheckpointError
from . import _disk
from ._kernel_calls import kernel_call, run_silently
from ._manifest import Checkpoint, RestoreReport, SkippedVariable, read_json

__all__ = ["copy_files_out", "load_into"]


def copy_files_out(checkpoint: Checkpoint, work_dir: Path) -> int:
    """Copies the checkpoint's ``files/`` into ``work_dir`` (same names replaced); how many.

    Refused before anything is written when the files, and the variable files
    the restore stages next, would not fit on the work dir's disk.

    Raises:
        DiskSpaceError: they would not fit (or the disk filled up meanwhile).
    """
    folder = checkpoint.path / "files"
    listing = _workdir.list_tree(folder, max_files=1_000_000).files if folder.is_dir() else []
    _disk.check(
        sum(e.size for e in listing) + checkpoint.size,
        work_dir,
        budget=None,
        what=f"restoring checkpoint {checkpoint.path.name} ({_disk.files(len(listing))} and "
        f"{len(checkpoint.variables)} variables)",
        setting="",
    )
    count = 0
    try:
        for entry in listing:
            _workdir.copy(folder, entry.path, work_dir)
            count += 1
    except OSError as exc:
        if _disk.is_full(exc):
            raise _disk.full(exc, "copying the checkpoint's files") from None
        raise
    return count


async def load_into(
    backend: KernelBackend,
    checkpoint: Checkpoint,
    *,
    work_dir: Path,
    kernel_dir: str,
    on_mismatch: Literal["refuse", "skip"],
    timeout: float,
    variable_timeout: float,
    files: int = 0,
) -> RestoreReport:
    """Loads a checkpoint's variables and modules into the running kernel.

    Raises:
        IncompatibleCheckpointError: another Python, or (``on_mismatch="refuse"``)
            other versions of its packages; nothing was loaded.
        CheckpointError: a variable file is damaged or missing, or the kernel
            failed, died or took longer than ``timeout``.
    """
    staging = f".kernelexec-restore-{secrets.token_hex(8)}"
    manifest = checkpoint.manifest
    try:
        await asyncio.to_thread(_stage, checkpoint, work_dir, staging)
        kernel_manifest = {
            "python": manifest["python"],
            "packages": manifest["packages"],
            "modules": manifest["modules"],
            "execution_count": manifest["execution_count"],
            "variables": [
                {**v, "file": v["file"].rsplit("/", 1)[-1].removesuffix(".pkl")}
                for v in manifest["variables"]
            ],
        }
        options = {
            "on_mismatch": on_mismatch,
            "variable_timeout": variable_timeout,
            "execution_count": True,
        }
        await run_silently(
            backend,
            kernel_call("load", f"{kernel_dir}/{staging}", kernel_manifest, options),
            timeout=timeout,
            what="the restore",
        )
        folder = _workdir.open_folder(work_dir, [staging])
        try:
            report = read_json(folder, "report.json", "the kernel's restore report")
        finally:
            os.close(folder)
    finally:
        await asyncio.to_thread(_workdir.remove_tree, work_dir / staging)
    try:
        refused = report["refused"]
        skipped = [SkippedVariable(**s) for s in report["skipped"]]
        restored, modules = list(report["restored"]), list(report["modules"])
    except (KeyError, TypeError) as exc:
        raise CheckpointError(f"the kernel's restore report is not readable ({exc})") from exc
    if refused:
        raise IncompatibleCheckpointError(f"cannot restore {checkpoint.path}: {refused}")
    return RestoreReport(
        checkpoint=str(checkpoint.path),
        restored=restored,
        modules=modules,
        skipped=[*checkpoint.skipped, *skipped],
        files=files,
    )


def _stage(checkpoint: Checkpoint, work_dir: Path, staging: str) -> None:
    """Copies the variable files into a new staging folder of ``work_dir``.

    Raises:
        DiskSpaceError: they would not fit there (nothing is written), or
            the disk filled up meanwhile.
    """
    _disk.check(
        checkpoint.size,
        work_dir,
        budget=None,
        what=f"staging the {len(checkpoint.variables)} variables of checkpoint "
        f"{checkpoint.path.name} for the kernel",
        setting="",
    )
    # Made even for a checkpoint without variables: the kernel writes its report there.
    os.close(_workdir.open_folder(work_dir, [staging], create=True))
    for variable in checkpoint.variables:
        for name in (variable.file, variable.buffers_file):
            try:
                source = _workdir.open_read(checkpoint.path, name)
            except OSError as exc:
                raise CheckpointError(
                    f"checkpoint {checkpoint.path} is damaged: {name} ({variable.name}): {exc}"
                ) from exc
            try:
                with source:
                    out, _ = _workdir.create(work_dir, f"{staging}/{name.rsplit('/', 1)[-1]}")
                    with out:
                        size = os.fstat(source.fileno()).st_size
                        _workdir.copy_data(source.fileno(), out.fileno(), size)
            except OSError as exc:
                if _disk.is_full(exc):
                    raise _disk.full(exc, "staging the checkpoint's variables") from None
                raise
