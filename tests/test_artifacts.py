from __future__ import annotations

import base64
from pathlib import Path

from kernelexec._execution._artifacts import save_rich_outputs


def test_each_mimetype_gets_its_extension_and_bad_payloads_are_reported(tmp_path: Path) -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": "hi"},
        {
            "output_type": "display_data",
            "data": {"image/png": png, "image/svg+xml": ["<svg>", "</svg>"]},
        },
        {"output_type": "display_data", "data": {"image/jpeg": "not base64!"}},
        {"output_type": "display_data", "data": {"application/pdf": 42}},
    ]
    saved, problems = save_rich_outputs(outputs, tmp_path, "0007")
    assert saved == {
        1: [("image/png", "outputs/0007-1.png"), ("image/svg+xml", "outputs/0007-1.svg")]
    }
    assert (tmp_path / "outputs/0007-1.png").read_bytes() == b"\x89PNG fake"
    assert (tmp_path / "outputs/0007-1.svg").read_text() == "<svg></svg>"
    assert len(problems) == 2
