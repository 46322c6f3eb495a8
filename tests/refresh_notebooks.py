"""Re-executes the example notebooks and stores them with their outputs.

    python tests/refresh_notebooks.py              # every notebook in notebooks/
    python tests/refresh_notebooks.py quickstart   # some, by name

Each notebook runs top to bottom in a fresh kernel, in a temporary directory
(as tests/test_notebooks.py runs it), and is written back only if no cell
failed, so a reader browsing the repository sees real results. Run it after
changing a notebook or what its cells print: tests/test_notebooks.py fails
while the stored outputs differ from a fresh run's.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

__all__ = ["NOTEBOOKS", "comparable_stdout", "errors", "execute"]

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
_VOLATILE = [
    # Temporary paths, which differ at every run (and TMPDIR from machine to machine).
    (re.compile(rf"(?:{re.escape(tempfile.gettempdir())}|/tmp)/[^\s'\"\]),]+"), "<tmp>"),
    (re.compile(r"(127\.0\.0\.1|localhost):\d+"), r"\1:<port>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<id>"),
    (re.compile(r"\b\d+\.\d+ ?s\b"), "<seconds>"),
]


def execute(path: Path, cwd: Path, *, timeout: int = 300) -> nbformat.NotebookNode:
    """``path`` run top to bottom in a new kernel whose working directory is ``cwd``."""
    notebook: nbformat.NotebookNode = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        # Without timing metadata a refresh changes only what the cells print.
        record_timing=False,
        resources={"metadata": {"path": str(cwd)}},
    ).execute()
    return notebook


def errors(notebook: nbformat.NotebookNode) -> list[str]:
    """The error outputs of a notebook's code cells, as ``ename: evalue``."""
    return [
        f"{output.ename}: {output.evalue}"
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]


def comparable_stdout(notebook: nbformat.NotebookNode) -> list[str]:
    """Each code cell's stdout, with what changes from run to run masked."""
    texts = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        text = "".join(
            o.text
            for o in cell.get("outputs", [])
            if o.output_type == "stream" and o.name == "stdout"
        )
        for pattern, mask in _VOLATILE:
            text = pattern.sub(mask, text)
        texts.append(text)
    return texts


def main(names: list[str]) -> int:
    paths = [NOTEBOOKS / f"{name.removesuffix('.ipynb')}.ipynb" for name in names] or sorted(
        NOTEBOOKS.glob("*.ipynb")
    )
    failed = 0
    for path in paths:
        with tempfile.TemporaryDirectory(prefix="kernelexec-notebook-") as cwd:
            try:
                notebook = execute(path, Path(cwd))
            except CellExecutionError as exc:
                failed += 1
                print(f"{path.name}: not stored, a cell failed:\n{exc}")
                continue
        problems = errors(notebook)  # cells tagged raises-exception
        if problems:
            failed += 1
            print(f"{path.name}: not stored, a cell failed: {'; '.join(problems)}")
            continue
        nbformat.validate(notebook)
        nbformat.write(notebook, path)
        print(f"{path.name}: stored with its outputs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
