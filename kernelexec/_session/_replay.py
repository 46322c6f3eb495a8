"""Replaying a transcript (or any notebook) into a session, and saying what changed."""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .._exceptions import ConfigurationError
from .._execution._models import ExecutionResult

__all__ = ["CellReplay", "ReplayReport", "read_code_cells", "replay_into"]


class Executes(Protocol):
    """What a replay needs of a session (so this module need not import it)."""

    async def execute(self, code: str) -> ExecutionResult: ...


@dataclass(frozen=True)
class CellReplay:
    """One code cell of the notebook and what replaying it did.

    Attributes:
        index: the cell's position among the notebook's code cells, from 1.
        action: "ran", or "skipped" (it failed when recorded).
        status: the replay's status, None when skipped.
        differs: its stdout or error is not what the notebook recorded.
        diff: a unified diff, recorded then replayed, when it differs.
    """

    index: int
    action: str
    status: str | None = None
    differs: bool = False
    diff: str = ""


@dataclass(frozen=True)
class ReplayReport:
    """What a replay did, cell by cell."""

    notebook: str
    cells: list[CellReplay] = field(default_factory=list)

    @property
    def differences(self) -> list[CellReplay]:
        return [c for c in self.cells if c.differs]

    @property
    def ok(self) -> bool:
        """Every replayed cell matched its recording."""
        return not self.differences

    @property
    def text(self) -> str:
        ran = sum(c.action == "ran" for c in self.cells)
        skipped = sum(c.action == "skipped" for c in self.cells)
        lines = [
            f"replayed {ran} cells of {self.notebook} ({skipped} skipped: failed when recorded)"
        ]
        for cell in self.differences:
            lines.append(f"cell {cell.index} differs ({cell.status}):\n{cell.diff}")
        if self.ok:
            lines.append("no differences")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Cell:
    index: int
    source: str
    failed: bool
    stdout: str
    error: str


def read_code_cells(path: Path) -> list[_Cell]:
    """The code cells of a notebook file, with what each printed when recorded.

    Raises:
        ConfigurationError: the file is not a notebook nbformat can read.
    """
    # Imported here, not with kernelexec: nbformat imports jsonschema, whose
    # format checkers build a grammar at import (rfc3987-syntax, which
    # jupyter_server's dependencies install): most of a second that every
    # program importing kernelexec paid, replay or not.
    import nbformat

    try:
        notebook = nbformat.read(path, as_version=4)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(f"cannot read {path} as a notebook: {exc}") from exc
    cells: list[_Cell] = []
    for cell in notebook.cells:
        if cell.get("cell_type") != "code":
            continue
        outputs = cell.get("outputs") or []
        errors = [o for o in outputs if o.get("output_type") == "error"]
        status = (cell.get("metadata", {}).get("kernelexec") or {}).get("status", "ok")
        cells.append(
            _Cell(
                index=len(cells) + 1,
                source=_text(cell.get("source", "")),
                failed=bool(errors) or status != "ok",
                stdout=_stream(outputs, "stdout"),
                error=_error_line(errors[-1]) if errors else "",
            )
        )
    return cells


async def replay_into(
    session: Executes,
    path: Path,
    cells: list[_Cell],
    *,
    until: int | None = None,
    include_failed: bool = False,
) -> ReplayReport:
    """Runs the notebook's code cells in ``session``, in order, and compares outputs.

    Args:
        session: where to run them; its transcript records the replay.
        path: the notebook (a kernelexec transcript or any .ipynb).
        cells: its code cells, as ``read_code_cells`` read them.
        until: stop after the code cell with this index (from 1).
        include_failed: also run the cells that failed when recorded.
    """
    report = ReplayReport(notebook=str(path))
    for cell in cells:
        if until is not None and cell.index > until:
            break
        if cell.failed and not include_failed:
            report.cells.append(CellReplay(cell.index, "skipped"))
            continue
        result = await session.execute(cell.source)
        report.cells.append(_compare(cell, result))
    return report


def _compare(cell: _Cell, result: ExecutionResult) -> CellReplay:
    recorded = cell.stdout + (f"{cell.error}\n" if cell.error else "")
    error = f"{result.error.ename}: {result.error.evalue}\n" if result.error else ""
    replayed = result.stdout + error
    if recorded == replayed:
        return CellReplay(cell.index, "ran", result.status)
    diff = "".join(
        difflib.unified_diff(
            recorded.splitlines(keepends=True),
            replayed.splitlines(keepends=True),
            fromfile="recorded",
            tofile="replayed",
        )
    )
    return CellReplay(cell.index, "ran", result.status, differs=True, diff=diff)


def _text(value: object) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _stream(outputs: list[dict[str, Any]], name: str) -> str:
    return "".join(
        _text(o.get("text", ""))
        for o in outputs
        if o.get("output_type") == "stream" and o.get("name") == name
    )


def _error_line(output: dict[str, Any]) -> str:
    return f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
