"""How a fenced block without a language is read: code to run, or output to skip.

LLMs leave a fence unlabelled for code and for what code prints alike ("Expected
output:" and a bare fence holding the printed text). Running the printed text
as Python fails the message (a ``SyntaxError``) and every block after it is not
run; so an unlabelled block is read, in this order:

1. **Output**, skipped: the line of prose just above the fence introduces
   output. It ends with a colon and is a label (``Output:``, ``Expected
   output:``, ``Result:``, ``Sample output:``, ``The output should be:``) or a
   sentence ending on a verb of showing (``This prints:``, ``which outputs:``,
   ``You should see:``, ``It returns something like:``).
2. **Shell**, run as bash: every command line starts with a common command
   (``pip``, ``python``, ``ls``, ``cd``, ``git``, ``mkdir``, ... see
   ``SHELL_COMMANDS``), a shell keyword, or a path to a program (``./run.sh``),
   optionally after ``VAR=value`` assignments or ``sudo``; and it is not an
   assignment or a call in Python (``ls = 3``, ``cat(x)``). ``pip install
   pandas`` in a bare fence is meant to be run, and is not Python.
3. **Printed values**, skipped: it compiles as Python but holds only literals
   and bare ``name: value`` lines (``42``, ``[1, 2, 3]``, ``total: 77``), which
   is what a program prints, not code anyone runs.
4. **Python**, run: it compiles as Python, IPython's ``%magic`` and ``!command``
   lines allowed.
5. **Not code**, skipped: anything else (prose, a table, a console session
   with ``$`` prompts).

``strict`` reads every unlabelled block as Python, as before this rule. A
labelled block is never guessed at: ```` ```python ```` after "Output:" runs.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["SHELL_COMMANDS", "Reading", "read_unlabelled"]

SHELL_COMMANDS = frozenset(
    {
        # Packages and environments.
        *("pip", "pip3", "python", "python3", "uv", "uvx", "conda", "mamba", "poetry", "pipx"),
        *("npm", "npx", "node", "yarn", "pnpm", "cargo", "go", "java", "javac", "ruby", "gem"),
        *("apt", "apt-get", "brew", "sudo", "jupyter", "pytest", "ruff", "mypy", "kernelexec"),
        # Files and text.
        *("ls", "cd", "pwd", "cat", "echo", "printf", "mkdir", "rmdir", "rm", "cp", "mv", "ln"),
        *("touch", "chmod", "chown", "head", "tail", "grep", "find", "wc", "sed", "awk", "tee"),
        *("tar", "zip", "unzip", "gzip", "gunzip", "du", "tree", "which", "env"),
        # Programs, network, version control.
        *("git", "curl", "wget", "ssh", "scp", "rsync", "docker", "make", "cmake", "bash", "sh"),
        *("zsh", "export", "source", "unset", "alias", "exit", "kill", "ps", "nohup", "xargs"),
    }
)
"""The commands that make an unlabelled line read as shell: common, and unlikely to
start a line of program output or prose (so not ``test``, ``time``, ``file``, ``date``)
or to be a Python name shown alone (``df``)."""

_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done"})
_KEYWORDS |= {"case", "esac", "function", "{", "}", "."}
# The last sentence before the colon, when it introduces output. A label: "Output",
# "Expected output", "The output should look like this", "Results", "Output of ls".
_KINDS = (
    r"(?:(?:the|its|and|an?|example|sample|expected|console|program|terminal|final|typical)\s+)*"
)
_OF = r"(?:\s+(?:of|from)(?:\s+\S+){1,4})?"  # "Output of ls", a few words at most
_LABEL = re.compile(
    rf"^{_KINDS}(?:output|outputs|result|results|stdout|response){_OF}"
    r"(?:\s+(?:is|was|will\s+be|would\s+be|should\s+be|looks\s+like|should\s+look\s+like))?"
    r"(?:\s+(?:this|something\s+like(?:\s+this)?|like\s+this|roughly|similar\s+to))?$"
)
# "Here's the output": but not "Here's the result", which as often shows fixed code.
_HERE = re.compile(rf"^here(?:'s|\s+is)\s+{_KINDS}(?:output|stdout){_OF}$")
# A sentence ending on a verb of showing: "This prints", "You should see", "which outputs".
_SHOWS = re.compile(
    r"(?:^|(?:(?P<before>\w+)\W*\s+))(?P<verb>prints?|printed|outputs?|displays|shows|returns|yields|"
    r"produces|gives|you(?:'ll|\s+will|\s+should|\s+would|'d)?\s+(?:see|get)|we\s+get)"
    r"(?:\s+(?:something|roughly|out))?(?:\s+like)?(?:\s+(?:this|the\s+following))?$"
)
# Before "output", these make it a noun: "format the output", code to run follows.
_DETERMINERS = frozenset({"the", "a", "an", "its", "your", "our", "my", "their", "his", "her"})
_SENTENCE_END = re.compile(r"[.!?;]\s+")
_EMPHASIS = re.compile(r"[*_`#>]+")
_LIST_ITEM = re.compile(r"^(?:[-*+]|\d{1,9}[.)])\s+")
_ASIDE = re.compile(r"\s*\([^()]*\)$")  # "Output (truncated):"
# A shell line: assignments, then the command word and what follows it.
_ASSIGNMENTS = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*")
_ONLY_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")  # "N=3", beside commands
_WORD = re.compile(r"^(?P<word>[A-Za-z0-9_./~+-]+|[{}.])(?P<rest>.*)$")
# After a Python name these make it Python (an assignment, a call, an attribute, an item).
_PYTHONIC = re.compile(r"^\s*(?:[-+*/%&|^@]?=(?!=)|[(.\[,:])")


@dataclass(frozen=True)
class Reading:
    """What kernelexec read an unlabelled block as.

    Attributes:
        language: "python" or "bash" to run it; None to skip it.
        reason: why, for a skipped block (said in its ``BlockResult.message``).
    """

    language: str | None
    reason: str = ""


def read_unlabelled(code: str, intro: str) -> Reading:
    """How to treat an unlabelled block (see the module's docstring).

    Args:
        code: the block's body.
        intro: the last line of prose before its opening fence ("" if none).
    """
    if _introduces_output(intro):
        return Reading(
            None,
            f"an unlabelled block after {_quote(intro)} reads as program output; "
            "label it ```python or ```bash to run it",
        )
    if _is_shell(code):
        return Reading("bash")
    tree = _python(code)
    if tree is not None and _only_values(tree):
        return Reading(
            None,
            "an unlabelled block of bare values (42, [1, 2], 'text', total: 77) reads as "
            "printed output; label it ```python to run it",
        )
    if tree is not None:
        return Reading("python")
    return Reading(
        None,
        "an unlabelled block that is neither Python nor shell commands reads as text; "
        "label it ```python or ```bash to run it",
    )


def _introduces_output(intro: str) -> bool:
    line = _LIST_ITEM.sub("", intro.strip())
    line = _EMPHASIS.sub("", line).strip().lower()
    if not line.endswith(":"):
        return False
    line = _ASIDE.sub("", re.sub(r"\s+", " ", line[:-1]).strip())
    sentence = _SENTENCE_END.split(line)[-1]
    if _LABEL.match(sentence) or _HERE.match(sentence):
        return True
    shows = _SHOWS.search(sentence)
    if shows is None:
        return False
    return not (shows["verb"].startswith("output") and shows["before"] in _DETERMINERS)


def _quote(intro: str) -> str:
    line = intro.strip()
    return repr(line if len(line) <= 60 else "..." + line[-57:])


def _command_lines(code: str) -> list[str]:
    """The lines a shell would run, continuations joined, blank and comment lines left out."""
    lines: list[str] = []
    carried = ""
    for raw in code.splitlines():
        line = carried + raw.strip()
        if line.endswith("\\"):
            carried = line[:-1] + " "
            continue
        carried = ""
        if line and not line.startswith("#"):
            lines.append(line)
    if carried.strip():
        lines.append(carried.strip())
    return lines


def _is_shell(code: str) -> bool:
    lines = [line for line in _command_lines(code) if not _ONLY_ASSIGNMENT.match(line)]
    return bool(lines) and all(_is_shell_line(line) for line in lines)


def _is_shell_line(line: str) -> bool:
    line = _ASSIGNMENTS.sub("", line, count=1)
    found = _WORD.match(line)
    if found is None:
        return False
    word, rest = found["word"], found["rest"]
    if rest and not rest[0].isspace() and rest[0] not in ";&|<>":
        return False  # "ls.append(x)", "cat(x)": the word runs on into Python
    if _PYTHONIC.match(rest):
        return False
    if word in _KEYWORDS or word in SHELL_COMMANDS:
        return True
    return word.startswith(("./", "../", "/", "~/")) and len(word) > 2


def _python(code: str) -> ast.Module | None:
    """The block parsed as the kernel's Python, or None when it is not."""
    if code.lstrip().startswith("%%"):
        return ast.Module(body=[ast.Pass()], type_ignores=[])  # a cell magic: the kernel's
    # IPython's line magics and shell escapes, which the kernel runs, are not Python.
    source = re.sub(r"^([ \t]*)[%!].*$", r"\1pass", code, flags=re.MULTILINE)
    try:
        # Top-level await: the kernel runs it.
        flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        tree: ast.Module = compile(source, "<block>", "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return tree


def _only_values(tree: ast.Module) -> bool:
    """Every statement is a literal (``42``, ``[1, 'a']``) or a bare ``name: value``:
    what a program prints, which nobody writes as code to run."""

    def printed(statement: ast.stmt) -> bool:
        if isinstance(statement, ast.AnnAssign):
            return statement.value is None and isinstance(statement.target, ast.Name)
        if isinstance(statement, ast.Expr):
            try:
                ast.literal_eval(statement.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return False
            return True
        return False

    return bool(tree.body) and all(printed(statement) for statement in tree.body)
