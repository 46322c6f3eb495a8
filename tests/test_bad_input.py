"""Bad input gets a clear answer and never breaks the session."""

from __future__ import annotations

import pytest

from kernelexec import AsyncSession, Limits


async def test_empty_code_is_ok_with_no_outputs(session: AsyncSession) -> None:
    for code in ("", "   \n\n", "# only a comment"):
        result = await session.execute(code)
        assert result.ok and result.outputs == [] and result.text == ""


async def test_five_megabytes_of_code_runs(session: AsyncSession) -> None:
    # Data pasted into the code, as agents do; IPython's cost grows with
    # the number of tokens, so one long literal keeps the test quick.
    code = "blob = '" + "0123456789" * 520_000 + "'\nprint(len(blob), blob[-3:])"
    assert len(code) > 5_000_000
    result = await session.execute(code, timeout=120)
    assert result.ok, result.text
    assert result.stdout == "5200000 789\n"


async def test_code_over_the_limit_is_refused(tmp_path: object) -> None:
    async with AsyncSession(str(tmp_path), limits=Limits(max_code_chars=1_000)) as s:
        result = await s.execute("x = 1\n" * 1_000)
        assert result.status == "error" and result.error is not None
        assert "max_code_chars" in result.text and "nothing was run" in result.text
        assert (await s.execute("'x' in globals()")).text == "False\n"


@pytest.mark.parametrize(
    "code",
    [b"print('caf\xe9')", "print('\ud800')", b"\xff\xfe"],
    ids=["invalid-utf8", "lone-surrogate", "binary"],
)
async def test_text_that_is_not_unicode_is_refused(
    session: AsyncSession, code: str | bytes
) -> None:
    result = await session.execute(code)
    assert result.status == "error" and result.error is not None
    assert result.error.ename == "InvalidInput" and "nothing was run" in result.text
    assert (await session.execute("print('still fine')")).text == "still fine\n"


async def test_nul_bytes_are_a_python_error_not_a_broken_session(session: AsyncSession) -> None:
    result = await session.execute("x = 1\x00")
    assert result.status == "error" and result.error is not None
    assert (await session.execute("print('still fine')")).text == "still fine\n"
    valid = await session.execute("print('a\\x00b')")
    assert valid.ok and valid.stdout == "a\x00b\n"


async def test_code_of_the_wrong_type_is_refused(session: AsyncSession) -> None:
    result = await session.execute(42)  # type: ignore[arg-type]
    assert result.status == "error" and "must be text" in result.text
