from __future__ import annotations

from kernelexec._languages import normalize_language
from kernelexec._markdown import CodeBlock, extract_code_blocks


def test_blocks_in_order_with_languages() -> None:
    message = "Let me look.\n```python\nx = 1\n```\nthen\n~~~bash\nls\n~~~\n```\nplain\n```\n"
    assert extract_code_blocks(message) == [
        CodeBlock("python", "x = 1"),
        CodeBlock("bash", "ls"),
        CodeBlock("", "plain"),
    ]


def test_longer_fences_and_unclosed_block() -> None:
    message = "````py\n```\nnot a fence end\n````\n```sh\necho open"
    assert extract_code_blocks(message) == [
        CodeBlock("py", "```\nnot a fence end"),
        CodeBlock("sh", "echo open"),
    ]


def test_language_aliases() -> None:
    assert {normalize_language(x) for x in ("python", "py", "Python3", "ipython", "", None)} == {
        "python"
    }
    assert {normalize_language(x) for x in ("sh", "bash", "shell")} == {"bash"}
    assert normalize_language("ruby") is None
