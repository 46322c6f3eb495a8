"""The example notebooks run top to bottom as written, and are stored with current outputs.

They are committed with their outputs, so a reader browsing the repository
sees results; ``python tests/refresh_notebooks.py`` re-executes them. A
stored notebook must be a whole run (every code cell executed once, in order,
without an error), and a fresh run here must print what it stored (temporary
paths, ports and timings aside): otherwise the stored outputs are stale.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import nbformat
import pytest
from refresh_notebooks import NOTEBOOKS, comparable_stdout, errors, execute

PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
REFRESH = "python tests/refresh_notebooks.py"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_runs_as_written_and_prints_what_it_stored(path: Path, tmp_path: Path) -> None:
    stored = nbformat.read(path, as_version=4)
    fresh = execute(path, tmp_path)
    assert errors(fresh) == []
    expected, got = comparable_stdout(stored), comparable_stdout(fresh)
    assert any(got), "a notebook that prints nothing shows a reader nothing"
    diff = [
        f"cell {i + 1}:\n"
        + "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True)))
        for i, (old, new) in enumerate(zip(expected, got, strict=True))
        if old != new
    ]
    assert diff == [], f"{path.name}'s stored outputs are stale; run `{REFRESH}`:\n" + "\n".join(
        diff
    )


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_is_stored_as_one_whole_run(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    # Run top to bottom in one kernel, as the refresh does: In [1], In [2], ...
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), (
        f"{path.name} is not stored as one run from the top; run `{REFRESH}`"
    )
    assert errors(notebook) == []
    assert notebook.metadata.kernelspec.name == "python3"


def test_there_is_a_quickstart_with_a_chart() -> None:
    quickstart = nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4)
    assert any(
        "image/png" in output.get("data", {})
        for cell in quickstart.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
