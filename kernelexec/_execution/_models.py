"""The typed values kernelexec hands out and takes in.

``ExecutionResult.to_dict()`` is the one wire format: the library, the HTTP
server and the MCP server all serialize a result through it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from .._backends._caps import MAX_MESSAGE_BYTES
from ._data import Data, read_data

__all__ = ["ExecutionError", "ExecutionResult", "Limits", "Status", "Usage"]

Status = Literal["ok", "error", "timeout", "kernel_died", "cancelled", "quota_exceeded"]


@dataclass(frozen=True)
class ExecutionError:
    """Why an execution failed: the Python exception, or kernelexec's refusal.

    ``traceback`` holds plain lines, ANSI colour codes removed.
    """

    ename: str
    evalue: str
    traceback: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Usage:
    """What one execution cost, measured inside a kernel kernelexec booted.

    From just before the code ran to just before the kernel replied, so it
    leaves out the trip to and from the kernel (``ExecutionResult.duration``
    has it all).

    Attributes:
        wall_seconds: the time the kernel took to run the code.
        user_seconds, system_seconds: CPU time of the kernel (all its threads)
            and of the child processes it waited for during the execution
            (``subprocess.run``, ``!cmd``, ``%%bash``); a child still running
            when the execution ended, or never waited for, is not counted.
        peak_rss_bytes: the kernel process's peak resident memory during this
            execution. Exact where Linux lets the kernel reset its peak at the
            start (a root kernel) or the execution raised the kernel's
            lifetime peak; otherwise (a non-root kernel, which kernelexec
            makes non-dumpable, may not reset its own) the highest of RSS
            samples taken every 5 ms while the code ran, so a shorter spike
            may be missed. None where memory cannot be read (not Linux).
        children_user_seconds, children_system_seconds: the children's part
            of ``user_seconds`` and ``system_seconds``.
        children_max_rss_bytes: the largest peak resident memory of any child
            process the kernel has waited for since it started (0: none yet).
            Not per execution: the OS keeps only this running maximum, so it
            grew in this execution only if one of its children was bigger
            than every earlier one.
    """

    wall_seconds: float
    user_seconds: float
    system_seconds: float
    peak_rss_bytes: int | None
    children_user_seconds: float
    children_system_seconds: float
    children_max_rss_bytes: int


@dataclass(frozen=True)
class ExecutionResult:
    """What one execution did.

    Attributes:
        status: "ok", "error" (the code raised or was refused), "timeout"
            (the kernel was interrupted, or restarted when that failed),
            "kernel_died" (the kernel process ended) or "cancelled" (stopped by
            ``Execution.cancel()`` or by closing its session, or never run) or
            "quota_exceeded" (a server stopped it: its tenant passed a quota,
            which ``message`` names).
        execution_count: the kernel's ``In[n]`` number, None if it never ran.
        stdout, stderr: the streams, kept apart (long ones keep head and tail).
        outputs: nbformat v4 outputs in order, as a notebook would store them.
        error: the exception, for status "error" (and the interrupt of a timeout).
        files: files this execution saved, relative to the work dir.
        duration: seconds from sending the code to the result.
        text: a concise rendering for an LLM: streams, results, the error, one
            line per saved file; never base64; capped with head and tail kept.
        restarted: the kernel was restarted, so earlier state is gone.
        message: kernelexec's own account of anything beyond the code's output
            (timeout, kernel death, restart, truncation), or None.
        full_output: where the complete output was written when ``text`` or
            the streams were cut, relative to the work dir.
        language: the language the block ran as ("python" or "bash").
        usage: CPU time and peak memory of this execution, measured in the
            kernel (see ``Usage``); None for a kernel kernelexec did not boot
            (other kernelspecs, a gateway's) and when the kernel never replied.
        data: the DataFrames (``TableData``) and matplotlib figures
            (``ChartData``) the outputs showed, as data: schema, shape and
            first rows; kind, labels and series with their points; capped.
            Each names its output; a chart names its saved image. See
            ``kernelexec._execution._data`` for the shapes.
    """

    status: Status
    execution_count: int | None = None
    stdout: str = ""
    stderr: str = ""
    outputs: list[dict[str, Any]] = field(default_factory=list)
    error: ExecutionError | None = None
    files: list[str] = field(default_factory=list)
    duration: float = 0.0
    text: str = ""
    restarted: bool = False
    message: str | None = None
    full_output: str | None = None
    language: str = "python"
    usage: Usage | None = None
    data: list[Data] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict; ``from_dict`` reads it back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionResult:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("error") is not None:
            values["error"] = ExecutionError(**values["error"])
        if values.get("usage") is not None:
            values["usage"] = Usage(**values["usage"])
        values["data"] = read_data(values.get("data"))
        return cls(**values)


@dataclass(frozen=True)
class Limits:
    """Caps that keep one execution from swamping the caller or our memory.

    Byte caps count UTF-8 bytes (JSON escapes may add to them on the wire).
    Kernels that kernelexec boots (the default kernel, local or in Docker)
    apply them before an output leaves the kernel, and save the whole of a
    cut output to ``outputs/in<N>-<kind>.<ext>``; for other kernels (a
    gateway's, other kernelspecs) kernelexec applies them as each message
    arrives, and the whole goes to ``outputs/NNNN-output.txt`` (such a
    message is in memory once, briefly, whatever its size).

    Attributes:
        max_text_chars: ``text`` beyond this keeps its head and tail and names
            a file holding everything.
        max_stream_chars: stdout/stderr kept in the result and transcript;
            beyond it, head and tail are kept and the rest goes to a file.
        max_outputs: rich outputs (displays, results) kept per execution.
        max_code_chars: longer code is refused rather than sent to the kernel.
        max_output_bytes: one output's text: each mimetype of a display or
            result, an error's message and traceback together. Beyond it, head
            and tail are kept around a marker naming the file with all of it;
            structured data (JSON) and metadata beyond it are left out and
            saved to a file.
        max_image_bytes: one image or PDF (as base64); a bigger one is left
            out of the output and saved as a file.
        max_result_bytes: the rich outputs of one execution together, as its
            result and transcript cell hold them; outputs beyond it are left
            out (and written to ``outputs/NNNN-output.txt``). ``to_dict()``
            adds the stream copies (``stdout``, ``stderr``), ``text`` and
            ``error`` to it.
        max_message_bytes: one message from the kernel as it reaches our
            side (its frames together, JSON as sent and buffers), on every
            channel of every backend. A bigger one is dropped unread, before
            it is decoded or held whole, and the result says so: output may
            be missing, and a message dropped on the shell channel (where the
            reply comes) makes the execution an error. The caps above are the
            kernel's, which the kernel's own code can take off; this one is
            enforced by kernelexec's process. Keep it well above
            ``max_result_bytes`` and ``max_code_chars`` (the kernel echoes the
            code): an honest kernel's biggest messages carry those.
    """

    max_text_chars: int = 20_000
    max_stream_chars: int = 200_000
    max_outputs: int = 500
    max_code_chars: int = 16_000_000
    max_output_bytes: int = 1_000_000
    max_image_bytes: int = 10_000_000
    max_result_bytes: int = 20_000_000
    max_message_bytes: int = MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        for f in fields(self):
            least = self.least(f.name)
            if getattr(self, f.name) < least:
                raise ValueError(f"Limits.{f.name} must be at least {least}")
        if self.max_result_bytes < self.max_output_bytes:
            raise ValueError("Limits.max_result_bytes must be at least Limits.max_output_bytes")

    @staticmethod
    def least(name: str) -> int:
        """The lowest value the field ``name`` may take."""
        return _LEAST.get(name, 1_000)

    def kernel_env(self) -> dict[str, str]:
        """The byte caps a kernel kernelexec boots reads from its environment.

        Only those that differ from the defaults (which the kernel knows), so a
        session with default limits can take a kernel from a default pool.
        """
        default = Limits()
        return {
            f"KERNELEXEC_{name.upper()}": str(getattr(self, name))
            for name in _KERNEL_CAPS
            if getattr(self, name) != getattr(default, name)
        }


_KERNEL_CAPS = ("max_output_bytes", "max_image_bytes", "max_result_bytes")
# Below these a kernel's ordinary work fails: one output; a kernel_info reply or
# a 256 KB stream chunk dropped as over the message cap.
_LEAST = {"max_outputs": 1, "max_message_bytes": 1_000_000}
