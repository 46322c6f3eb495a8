"""MCP: a client that asks for progress hears from a long execute_code while it runs."""

from __future__ import annotations

from pathlib import Path

from _mcpclient import stdio_mcp, texts


async def test_a_long_execution_sends_progress_notifications(tmp_path: Path) -> None:
    heard: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append((value, total, message))

    async with stdio_mcp(tmp_path / "root") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "ctx" not in tools["execute_code"].input_schema.get("properties", {})
        code = "import time\nfor i in range(4):\n    time.sleep(1)\nprint('done')"
        result = await client.call_tool(
            "execute_code", {"code": code, "timeout": 60}, progress_callback=progress
        )
        assert not result.is_error and "done" in texts(result)
        assert len(heard) >= 2, heard
        values = [value for value, _, _ in heard]
        assert values == sorted(values) and values[0] > 0
        assert all(total == 60 for _, total, _ in heard)
        assert heard[-1][2] is not None and "running" in heard[-1][2]
        # Without a progress token the call is as before.
        quick = await client.call_tool("execute_code", {"code": "print(1 + 1)"})
        assert "2" in texts(quick)
