"""Output limits: a flood is capped, spilled to a file, and costs our process no memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import rss_mb

from kernelexec import AsyncSession, KernelPool, Limits

FLOOD_200_MB = (
    "import sys\nline = 'x' * 99 + '\\n'\n"
    "print('FIRST')\nfor _ in range(2_000_000):\n    sys.stdout.write(line)\nprint('LAST')"
)


async def test_a_200_mb_flood_is_capped_spilled_and_bounded(session: AsyncSession) -> None:
    await session.execute("1")  # a warm kernel, so start-up is not counted
    before = rss_mb()
    result = await session.execute(FLOOD_200_MB, timeout=300)
    grown = rss_mb() - before
    assert result.ok, result.message
    assert grown < 50, f"our RSS grew {grown:.0f} MB"  # 20 MB here; 100+ without a receive limit
    assert len(result.text) <= Limits().max_text_chars + 500
    assert result.text.startswith("FIRST\n") and "LAST" in result.text[-300:]
    assert result.full_output is not None
    assert f"the full output is in {result.full_output}" in result.text
    full = session.work_dir / result.full_output
    assert full.stat().st_size == len("FIRST\n") + 200_000_000 + len("LAST\n")
    with full.open() as f:
        assert f.readline() == "FIRST\n"
    nxt = await session.execute("print('next')")
    assert nxt.ok and nxt.text == "next\n"


async def test_streams_and_outputs_respect_configured_caps(tmp_path: Path) -> None:
    limits = Limits(max_text_chars=2_000, max_stream_chars=4_000, max_outputs=3)
    async with AsyncSession(tmp_path, limits=limits) as s:
        result = await s.execute(
            "from IPython.display import display\n"
            "for i in range(10):\n    display(f'shown {i}')\n"
            "print('y' * 50_000)"
        )
    assert result.ok
    assert [o["data"]["text/plain"] for o in result.outputs if "data" in o] == [
        "'shown 0'",
        "'shown 1'",
        "'shown 2'",
    ]
    assert "7 display outputs past the limit of 3 were dropped" in result.text
    assert len(result.stdout) <= 4_000 + 100 and "characters cut" in result.stdout
    assert result.full_output is not None
    full = (tmp_path / result.full_output).read_text()
    assert "y" * 50_000 in full and "y" * 50_001 not in full
    assert all(f"'shown {i}'" in full for i in range(3, 10)), "dropped, never lost"


def test_byte_caps_are_checked_and_reach_the_kernel_only_when_not_default() -> None:
    assert Limits().kernel_env() == {}
    assert Limits(max_output_bytes=5_000, max_image_bytes=10_000_000).kernel_env() == {
        "KERNELEXEC_MAX_OUTPUT_BYTES": "5000"
    }
    with pytest.raises(ValueError, match="max_result_bytes must be at least"):
        Limits(max_output_bytes=2_000_000, max_result_bytes=1_000_000)
    with pytest.raises(ValueError, match="max_image_bytes must be at least 1000"):
        Limits(max_image_bytes=10)


async def test_a_session_with_its_own_caps_starts_its_own_kernel(tmp_path: Path) -> None:
    async with KernelPool(1) as pool:
        await pool.wait_ready(60)
        limits = Limits(max_output_bytes=5_000)
        with pytest.warns(UserWarning, match=r"other byte caps \(max_output_bytes\)"):
            s = AsyncSession(tmp_path, pool=pool, limits=limits)
        async with s:
            result = await s.execute("'c' * 20_000")
            assert pool.ready == 1, "the pool's kernel has the default caps"
        assert result.files == ["outputs/in1-result.txt"], result.message
        assert (tmp_path / "outputs/in1-result.txt").read_text() == repr("c" * 20_000)
        assert len(result.outputs[0]["data"]["text/plain"]) <= 5_000
