"""Outputs cut to size before they leave the kernel.

Loaded by ``boot.py`` inside the kernel process (standard library and
ipykernel only). A 50 MB exception message or repr would otherwise travel as
one 50 MB message, which the client decodes into several copies (the frame,
the JSON, the Python strings) before any cap of its own could apply. So the
kernel's session serializes every display, result, error and execute reply
through ``Capper``:

- a text value (each mimetype of a display, result or page) past
  ``max_output_bytes`` keeps its head and tail around a marker that names the
  file holding all of it;
- an image or PDF past ``max_image_bytes``, structured data (JSON) or
  metadata past ``max_output_bytes`` is left out and saved to such a file;
- an error keeps a quarter of ``max_output_bytes`` for its message and the
  rest for its traceback (whole lines from the head and the tail, an
  over-long line cut in its middle); one file holds the whole traceback;
- an output still past ``max_result_bytes`` has its biggest parts saved too.

The files are ``outputs/in<N>-<kind>.<ext>`` in the work dir (``<N>`` is the
cell's execution count; a name is never reused or followed if it is a link).
Each message says what was cut in its ``metadata["kernelexec"]["cut"]``
records, and a display's output metadata keeps them for the transcript.

kernelexec's reducer applies the same ``Capper`` to kernels it did not boot
(a gateway's, other kernelspecs), spilling to its own file instead: an
output is cut the same way wherever it is cut.
"""

from __future__ import annotations

import binascii
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

MAX_OUTPUT_BYTES = 1_000_000
MAX_IMAGE_BYTES = 10_000_000
MAX_RESULT_BYTES = 20_000_000
ENV = {
    "max_output_bytes": "KERNELEXEC_MAX_OUTPUT_BYTES",
    "max_image_bytes": "KERNELEXEC_MAX_IMAGE_BYTES",
    "max_result_bytes": "KERNELEXEC_MAX_RESULT_BYTES",
}
# Payloads sent as base64: all or nothing, there is no useful head of a PNG.
BINARY = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "application/pdf": "pdf"}
_EXTENSIONS = {
    **BINARY,
    "text/plain": "txt",
    "text/html": "html",
    "image/svg+xml": "svg",
    "text/markdown": "md",
    "text/latex": "tex",
    "application/javascript": "js",
    "application/json": "json",
    "metadata": "json",
    "traceback": "txt",
}
MARKER_ROOM = 512  # bytes a cut value leaves for its marker, path included
_ENAME_BYTES = 1_000  # an exception's class name
_TRANSIENT_BYTES = 10_000  # display_id and little else, by the protocol
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")  # the colours of IPython's tracebacks
_DISPLAYS = {"display_data": "display", "execute_result": "result", "update_display_data": "update"}
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._+-]")

if TYPE_CHECKING:  # the kernel's Python may be older than kernelexec's: no runtime aliases
    # One cut: {"part", "bytes", "kept", "path", "error"}; kept 0: the part was left out.
    Record = dict[str, Any]
    # save(kind, part, whole) -> (its path relative to the work dir, why it was not saved)
    Save = Callable[[str, str, str], tuple[str | None, str | None]]


class Caps(NamedTuple):
    """The byte caps, as ``Limits`` has them."""

    output: int = MAX_OUTPUT_BYTES
    image: int = MAX_IMAGE_BYTES
    result: int = MAX_RESULT_BYTES

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Caps:
        """The caps the session set in the kernel's environment; defaults for the rest."""
        values = []
        for name, default in cls._field_defaults.items():
            raw = environ.get(ENV[f"max_{name}_bytes"], "")
            values.append(int(raw) if raw.isdigit() and int(raw) >= 1_000 else default)
        return cls(*values)


class Cut(NamedTuple):
    """A message content within the caps: the same object when nothing was cut."""

    content: dict[str, Any]
    records: list[Record]
    size: int  # bytes the kept parts take


def size_of(text: str) -> int:
    """UTF-8 bytes of ``text``; free for ASCII (a flag CPython keeps)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def cut_text(text: str, budget: int, where: str) -> str:
    """Head and tail of ``text`` in at most ``budget`` bytes, around a marker."""
    size = size_of(text)
    if size <= budget:
        return text
    keep = max(budget - MARKER_ROOM, 0) // 2
    # Only the ends are encoded (no copy of a 50 MB whole); a character split
    # at either edge is dropped, not mangled.
    head = text[:keep].encode("utf-8", "surrogatepass")[:keep].decode("utf-8", "ignore")
    tail = text[max(len(text) - keep, 0) :].encode("utf-8", "surrogatepass") if keep else b""
    tail_text = tail[len(tail) - keep :].decode("utf-8", "ignore")
    return f"{head}\n[... kernelexec cut {size - 2 * keep:,} bytes{where} ...]\n{tail_text}"


def cut_lines(lines: list[str], budget: int, where: str) -> list[str]:
    """Whole lines from the head and the tail within ``budget`` bytes, a marker between.

    A line too long for its half of the budget is itself cut in its middle,
    so a traceback's last line (the exception message) is always shown.
    """
    half = max(budget - MARKER_ROOM, 0) // 2
    head = _take(lines, half, where)
    rest = lines[len(head) :]
    tail = _take(rest[::-1], half, where)[::-1]
    dropped = len(rest) - len(tail)
    if not dropped:
        return head + tail
    return [*head, f"[... kernelexec cut {dropped:,} lines{where} ...]", *tail]


def marker_where(path: str | None, error: str | None) -> str:
    """The end of a cut marker: where the whole is, or why nowhere."""
    if path:
        return f"; all of it is in {path}"
    if error:
        return f"; it could not be saved ({error[:200]})"
    return ""


class Capper:
    """Cuts message contents to the caps; ``save`` keeps what is cut.

    Args:
        caps: the byte caps.
        errors_twice: an error travels twice (the error message, then the
            execute reply) with the same traceback: cut and save it once.
            Keeps the last error until the reply.
    """

    def __init__(self, caps: Caps, *, errors_twice: bool = False) -> None:
        self.caps = caps
        self._errors_twice = errors_twice
        self._last_error: tuple[list[Any], str, dict[str, Any], list[Record]] | None = None

    def cut(self, msg_type: str, content: dict[str, Any], save: Save) -> Cut:
        """``content`` of a ``msg_type`` message, cut where it is over a cap.

        Raises:
            TypeError, ValueError, AttributeError: a malformed content.
        """
        kind = _DISPLAYS.get(msg_type)
        if kind is not None:
            return self._bundle(content, kind, save)
        if msg_type == "error":
            return self._error(content, save)
        if msg_type == "execute_reply":
            return self._reply(content, save)
        return Cut(content, [], 0)

    # -- displays

    def _bundle(self, content: dict[str, Any], kind: str, save: Save) -> Cut:
        data, metadata = content.get("data"), content.get("metadata") or {}
        if not isinstance(data, dict) or not isinstance(metadata, dict):
            raise TypeError("a display's data and metadata must be objects")
        sizes = {mime: _value_size(value) for mime, value in data.items()}
        meta_size = _json_size(metadata) if metadata else 0
        transient = content.get("transient")
        if not isinstance(transient, dict) or _json_size(transient) <= _TRANSIENT_BYTES:
            transient = None
        size = sum(sizes.values()) + meta_size
        over = [mime for mime, n in sizes.items() if n > self._cap(mime)]
        if not over and size <= self.caps.result and meta_size <= self.caps.output:
            if transient is None:
                return Cut(content, [], size)
        data, records = dict(data), []
        for mime in over:
            records.append(self._cut_value(data, mime, sizes, kind, save))
        if meta_size > self.caps.output:
            path, error = save(kind, "metadata", json.dumps(metadata, default=str))
            records.append(_record("metadata", meta_size, 0, path, error))
            metadata, meta_size = {}, 0
        # Several parts, each within its cap, can still make one huge output.
        for mime in sorted(sizes, key=sizes.__getitem__, reverse=True):
            if sum(sizes.values()) + meta_size <= self.caps.result:
                break
            records.append(self._leave_out(data, mime, sizes, kind, save))
        if records:
            metadata = {**metadata, "kernelexec": {"cut": records}}
        cut = {**content, "data": data, "metadata": metadata}
        if transient is not None:
            # Only display_id means anything in it; the rest is not kept.
            cut["transient"] = {"display_id": str(transient.get("display_id"))[:200]}
        return Cut(cut, records, sum(sizes.values()) + meta_size)

    def _cap(self, mime: str) -> int:
        return self.caps.image if mime in BINARY else self.caps.output

    def _cut_value(
        self, data: dict[str, Any], mime: str, sizes: dict[str, int], kind: str, save: Save
    ) -> Record:
        value = _as_text(data[mime])
        if mime in BINARY or value is None:
            return self._leave_out(data, mime, sizes, kind, save)
        path, error = save(kind, mime, value)
        data[mime] = cut_text(value, self.caps.output, marker_where(path, error))
        whole, sizes[mime] = sizes[mime], size_of(data[mime])
        return _record(mime, whole, sizes[mime], path, error)

    def _leave_out(
        self, data: dict[str, Any], mime: str, sizes: dict[str, int], kind: str, save: Save
    ) -> Record:
        value = data.pop(mime)
        whole = _as_text(value)
        if whole is None:
            whole = json.dumps(value, default=str, ensure_ascii=False)
        path, error = save(kind, mime, whole)
        return _record(mime, sizes.pop(mime), 0, path, error)

    # -- errors

    def _error(self, content: dict[str, Any], save: Save) -> Cut:
        ename, evalue = str(content.get("ename", "")), str(content.get("evalue", ""))
        traceback = content.get("traceback") or []
        if not isinstance(traceback, list):
            raise TypeError("a traceback must be a list of lines")
        parts = [size_of(ename), size_of(evalue), _lines_size(traceback, self.caps.output)]
        if sum(parts) <= self.caps.output:
            return Cut(content, [], sum(parts))
        last = self._last_error
        if last is not None and _same_error(last, traceback, evalue):
            fields, records = last[2], last[3]
        else:
            fields, records = self._cut_error(ename, evalue, traceback, save)
            if self._errors_twice:
                self._last_error = (traceback, evalue, fields, records)
        return Cut({**content, **fields}, records, records[0]["kept"])

    def _cut_error(
        self, ename: str, evalue: str, traceback: list[Any], save: Save
    ) -> tuple[dict[str, Any], list[Record]]:
        lines = [line if isinstance(line, str) else str(line) for line in traceback]
        whole = _CSI.sub("", "\n".join(lines))
        if evalue not in whole:
            whole = f"{ename}: {evalue}\n\n{whole}"
        path, error = save("error", "traceback", whole)
        where = marker_where(path, error)
        ename = cut_text(ename, _ENAME_BYTES, where)
        evalue = cut_text(evalue, self.caps.output // 4, where)
        budget = self.caps.output - size_of(ename) - size_of(evalue)
        lines = cut_lines(lines, budget, where)
        kept = size_of(ename) + size_of(evalue) + sum(map(_line_size, lines))
        record = _record("traceback", size_of(whole), kept, path, error)
        return {"ename": ename, "evalue": evalue, "traceback": lines}, [record]

    def _reply(self, content: dict[str, Any], save: Save) -> Cut:
        cut, size = content, 0
        records: list[Record] = []
        if content.get("status") == "error":
            cut, records, size = self._error(content, save)
        self._last_error = None  # the reply is an error's last trip
        payload = content.get("payload")
        if isinstance(payload, list) and payload:
            # Pages (``obj?``, ``%pdoc``) are display bundles too.
            pages = []
            for page in payload:
                if isinstance(page, dict) and isinstance(page.get("data"), dict):
                    bundle = self._bundle(page, "page", save)
                    page, size = bundle.content, size + bundle.size
                    records = records + bundle.records
                pages.append(page)
            if records:
                cut = {**cut, "payload": pages}
        return Cut(cut, records, size)


class KernelCaps:
    """The kernel's side: cuts each outgoing message, saving the rest in the work dir."""

    def __init__(self, caps: Caps) -> None:
        self.capper = Capper(caps, errors_twice=True)
        # The session's cwd is the work dir (the backend sets PWD, and a pooled
        # kernel's move updates it); the code may chdir anywhere later.
        self._boot_dir = os.getcwd()
        self._lock = threading.Lock()

    def message(self, msg: dict[str, Any]) -> dict[str, Any]:
        """``msg`` as it should be sent: the same object unless something was cut."""
        msg_type = msg["header"]["msg_type"]
        if msg_type not in _DISPLAYS and msg_type not in ("error", "execute_reply"):
            return msg
        content = msg["content"]

        def save(kind: str, part: str, whole: str) -> tuple[str | None, str | None]:
            return self._save(f"in{_execution_count(content)}-{kind}", part, whole)

        cut = self.capper.cut(msg_type, content, save)
        if not cut.records:
            return msg
        metadata = {**(msg.get("metadata") or {}), "kernelexec": {"cut": cut.records}}
        return {**msg, "content": cut.content, "metadata": metadata}

    def _save(self, stem: str, part: str, whole: str) -> tuple[str | None, str | None]:
        payload: bytes
        if part in BINARY:
            try:
                payload = binascii.a2b_base64(whole)
            except (binascii.Error, ValueError):
                payload, part = whole.encode("ascii", "replace"), "text/plain"
        else:
            payload = whole.encode("utf-8", "surrogatepass")
        ext = _EXTENSIONS.get(part) or ("json" if part.endswith("json") else "txt")
        try:
            return self._write(stem, ext, payload), None
        except OSError as exc:
            return None, exc.strerror or str(exc)

    def _write(self, stem: str, ext: str, payload: bytes) -> str:
        pwd = os.environ.get("PWD", "")
        work = pwd if os.path.isabs(pwd) and os.path.isdir(pwd) else self._boot_dir
        folder = os.path.join(work, "outputs")
        os.makedirs(folder, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        flags |= getattr(os, "O_CLOEXEC", 0)
        stem = _SAFE_NAME.sub("_", stem)
        with self._lock:  # threads of one cell may both cut an output
            for n in range(1, 10_000):
                name = f"{stem}.{ext}" if n == 1 else f"{stem}-{n}.{ext}"
                try:
                    fd = os.open(os.path.join(folder, name), flags, 0o644)
                except FileExistsError:
                    continue  # an earlier kernel's (after a restart), or anyone's
                break
            else:
                raise FileExistsError(f"outputs/{stem}-*.{ext}: no free name")
        with os.fdopen(fd, "wb") as file:
            file.write(payload)
        return f"outputs/{name}"


def install(session: Any, caps: Caps) -> KernelCaps:
    """Makes ``session`` (the kernel's one jupyter_client Session) cut what it sends.

    Every sender (the shell's replies, the display publisher, the display
    hook, the traceback) serializes through ``session.serialize``; a failure
    to cut sends the message as it was, and the client's own cap applies.
    """
    hook = KernelCaps(caps)
    serialize = session.serialize

    def capped_serialize(msg: dict[str, Any], ident: Any = None) -> Any:
        try:
            msg = hook.message(msg)
        except Exception:
            pass  # never lose a message to the cap
        return serialize(msg, ident)

    session.serialize = capped_serialize
    return hook


def capped_app(base: type) -> type:
    """``base`` (an IPKernelApp) whose session cuts outputs to the caps in the env."""

    class CappedKernelApp(base):  # type: ignore[misc]
        def init_kernel(self) -> None:
            super().init_kernel()
            install(self.session, Caps.from_env(os.environ))

    return CappedKernelApp


def _take(lines: Iterable[Any], budget: int, where: str) -> list[str]:
    taken: list[str] = []
    used = 0
    for line in lines:
        text = line if isinstance(line, str) else str(line)
        size = _line_size(text)
        if used + size > budget:
            if not taken:  # one line bigger than the whole half: its own head and tail
                taken.append(cut_text(text, budget, where))
            break
        taken.append(text)
        used += size
    return taken


def _line_size(line: str) -> int:
    # In a JSON list a short line's quotes, separator and escapes weigh a lot:
    # a traceback of a million 36-byte lines is 20% bigger as JSON.
    escapes = line.count('"') + line.count("\\") + line.count("\n") + 5 * line.count("\x1b")
    return size_of(line) + 4 + escapes


def _lines_size(lines: list[Any], cap: int) -> int:
    texts = [line if isinstance(line, str) else str(line) for line in lines]
    least = sum(map(len, texts)) + 4 * len(texts)
    if least > cap or least + 5 * (least - 4 * len(texts)) <= cap:
        return least  # over either way, or under either way: exact bytes do not matter
    return sum(map(_line_size, texts))


def _value_size(value: Any) -> int:
    if isinstance(value, str):
        return size_of(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sum(size_of(v) for v in value)  # nbformat's multiline strings
    return _json_size(value)


def _as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return None


def _json_size(value: Any) -> int:
    return size_of(json.dumps(value, default=str, ensure_ascii=False))


def _record(part: str, whole: int, kept: int, path: str | None, error: str | None) -> Record:
    return {"part": part, "bytes": whole, "kept": kept, "path": path, "error": error}


def _same_error(last: tuple[list[Any], str, Any, Any], traceback: list[Any], evalue: str) -> bool:
    seen, seen_evalue = last[0], last[1]
    if traceback is not seen and (
        len(traceback) != len(seen) or traceback[:1] != seen[:1] or traceback[-1:] != seen[-1:]
    ):
        return False
    return evalue == seen_evalue


def _execution_count(content: dict[str, Any]) -> str:
    count = content.get("execution_count")
    if isinstance(count, int):
        return str(count)
    try:
        from IPython.core.getipython import get_ipython

        shell = get_ipython()
        return str(shell.execution_count) if shell is not None else "0"
    except ImportError:
        return "0"
