"""What a person runs on an agent's kernel through the Jupyter channels, in its transcript.

A person attached with JupyterLab (``kernelexec attach --lab``) or a console
runs code in the agent's kernel: it changes the agent's variables, so the
agent's record must hold it, or a replay of the transcript would not give the
kernel the agent saw. Each ``execute_request`` the channels carry becomes a
code cell of the transcript, in the order the kernel ran it, marked as not the
agent's: its ``kernelexec`` metadata says ``"by": "attached"`` and who sent it
(the tenant: ``"default"`` on a server with one token), its timing metadata
when; a markdown note before it says so to a reader. The cell's
outputs are folded by the same reducer as the agent's, under the session's
caps; they are not saved as files (the person saw them live).

Only code sent to run is recorded: a ``silent`` request, one with no code,
and the bridge's own requests are not. One the kernel says it aborted (queued
behind an error) is recorded with ``"status": "aborted"``, which a replay
skips: the kernel's word is not taken to leave a cell out. A request whose reply never comes
(the person closed the tab first, the kernel died) is recorded with what came,
its status ``"detached"``.

Each execution waiting for its reply holds a reducer here, so a connection may
have at most ``MAX_WAITING`` of them: one more is refused with an error reply,
never sent on, rather than run unrecorded (a client that floods the kernel
with requests would otherwise grow the server's memory without bound).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .._execution._reducer import ExecutionReducer
from .._session._transcript import code_cell, note_cell
from ._registry import Entry

__all__ = ["MAX_WAITING", "AttachedCells"]

MAX_WAITING = 1_000  # a connection's executions sent on and not yet replied to


@dataclass
class _Running:
    code: str
    started: float
    reducer: ExecutionReducer


class AttachedCells:
    """The bridge's record of the executions a person sends; one per WebSocket.

    Args:
        entry: the session whose kernel the WebSocket is bridged to.
        who: the tenant's name (``"default"`` on a server with one token).
    """

    def __init__(self, entry: Entry, who: str) -> None:
        self.entry = entry
        self.who = who
        self._running: dict[str, _Running] = {}

    def refusal(self, channel: str, msg: dict[str, Any]) -> dict[str, Any] | None:
        """The content of the error reply to an execution past ``MAX_WAITING``; None to
        send the request on."""
        if self._execution(channel, msg) is None or len(self._running) < MAX_WAITING:
            return None
        evalue = (
            f"kernelexec: {MAX_WAITING:,} executions of this connection are waiting for the "
            "kernel; this one was not sent (wait for them, or interrupt the kernel)"
        )
        return {
            "status": "error",
            "ename": "TooManyWaiting",
            "evalue": evalue,
            "traceback": [evalue],
            "execution_count": None,
        }

    def sent(self, channel: str, msg: dict[str, Any]) -> None:
        """A request the bridge sent on to the kernel."""
        found = self._execution(channel, msg)
        if found is None:
            return
        msg_id, code = found
        reducer = ExecutionReducer(msg_id, limits=self.entry.session.limits)
        self._running[msg_id] = _Running(code, time.time(), reducer)

    @staticmethod
    def _execution(channel: str, msg: dict[str, Any]) -> tuple[str, str] | None:
        """The msg_id and code of a request that runs code to record; None for others."""
        header, content = msg.get("header"), msg.get("content")
        if channel != "shell" or not isinstance(header, dict) or not isinstance(content, dict):
            return None
        code, msg_id = content.get("code"), header.get("msg_id")
        if header.get("msg_type") != "execute_request" or not isinstance(msg_id, str):
            return None
        if not isinstance(code, str) or not code.strip() or content.get("silent"):
            return None
        return msg_id, code

    def heard(self, msg: dict[str, Any]) -> None:
        """A message from the kernel; a finished execution becomes a cell."""
        parent = msg.get("parent_header")
        msg_id = parent.get("msg_id") if isinstance(parent, dict) else None
        running = self._running.get(msg_id) if isinstance(msg_id, str) else None
        if running is None:
            return
        reducer = running.reducer
        reducer.feed(msg)
        # An aborted request's reply is all that comes of it: no busy, no idle. It is
        # recorded all the same, marked: the reply may be the kernel's forgery, to hide a
        # person's cell that did run.
        aborted = reducer.replied and reducer.error is not None and reducer.error.ename == "Aborted"
        if reducer.done or aborted:
            del self._running[reducer.msg_id]
            self._record(running, "aborted" if aborted else "ok")

    def close(self) -> None:
        """The WebSocket closed: what is still running is recorded with what came."""
        running, self._running = list(self._running.values()), {}
        for execution in running:
            self._record(execution, "detached")

    def _record(self, running: _Running, status: str) -> None:
        folded = running.reducer.finish()
        if status == "ok" and folded.error is not None:
            status = "error"
        when = time.strftime("%H:%M:%S UTC", time.gmtime(running.started))
        self.entry.session._record_cell(
            note_cell(
                f"*kernelexec: the next cell was run at {when} by {self.who!r}, attached "
                "through the Jupyter channels, not by the agent.*",
                kernelexec={"attached": self.who},
            )
        )
        self.entry.session._record_cell(
            code_cell(
                running.code,
                folded.outputs,
                execution_count=folded.execution_count,
                started=running.started,
                finished=time.time(),
                failed=status != "ok",
                usage=folded.usage,
                kernelexec={
                    "status": status,
                    "language": "python",
                    "by": "attached",
                    "who": self.who,
                },
            )
        )
