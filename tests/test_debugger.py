"""JupyterLab's debugger and variable explorer on an agent's kernel, through the server.

JupyterLab's debugger speaks the Debug Adapter Protocol in ``debug_request``
messages on the control channel, and hears ``debug_event`` on IOPub; the
server's channels WebSocket carries them as it carries any message. Here a
person does what JupyterLab's panel does, message for message, on the kernel
of a session of a server as it starts by default: a contained kernel forked
from the zygote. The person's own cells land in the agent's transcript, marked
(``_attached``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
import websocket
from _serverproc import ServerProcess, jupyter_message

AGENT_CODE = "def grow(a):\n    b = a * 2\n    return b + 1\n\nagent_total = 41"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("debugger") / "root")
    yield proc
    proc.stop()


def _from_zygote(pid: int) -> bool:
    """Whether a process of the zygote's (its ``zygote.py``) is among ``pid``'s ancestors."""
    while pid > 1:
        try:
            if b"zygote.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def forked_session(server: ServerProcess, within: float = 90) -> str:
    """A new session whose kernel was forked from the server's zygote (the first ones
    start cold while the zygote starts)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        session_id = server.create()
        if _from_zygote(server.kernel_pid(session_id)):
            return session_id
        server.http.delete(f"/sessions/{session_id}")
        time.sleep(0.5)
    raise AssertionError(f"no session's kernel came from the zygote within {within:g} s")


class Person:
    """A JupyterLab's traffic on one kernel's channels WebSocket."""

    def __init__(self, server: ServerProcess, session_id: str) -> None:
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{server.port}/api/kernels/{session_id}/channels",
            header=[f"Authorization: token {server.token}"],
            timeout=60,
        )
        self.seq = 0
        self.heard: list[dict[str, Any]] = []  # what came while waiting for something else

    def send(self, msg_type: str, content: dict[str, Any], channel: str) -> str:
        msg = jupyter_message(msg_type, content, channel)
        self.ws.send(json.dumps(msg))
        return str(msg["header"]["msg_id"])

    def wait(self, want: Any, timeout: float = 60) -> dict[str, Any]:
        """The first message (heard before, or next) for which ``want(msg)`` is true."""
        for msg in self.heard:
            if want(msg):
                self.heard.remove(msg)
                return msg
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if want(msg):
                return msg
            self.heard.append(msg)
        raise AssertionError(f"nothing wanted came in {timeout} s: {self.heard[-5:]}")

    def debug(self, command: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """A DAP request on the control channel; its response's content."""
        self.seq += 1
        request = {"type": "request", "seq": self.seq, "command": command}
        msg_id = self.send("debug_request", {**request, "arguments": arguments or {}}, "control")
        reply = self.wait(
            lambda m: m["msg_type"] == "debug_reply" and m["parent_header"]["msg_id"] == msg_id
        )
        content: dict[str, Any] = reply["content"]
        assert content.get("success"), content
        return content

    def execute(self, code: str) -> str:
        content = {"code": code, "silent": False, "store_history": True}
        content |= {"user_expressions": {}, "allow_stdin": False}
        return self.send("execute_request", content, "shell")

    def event(self, name: str) -> dict[str, Any]:
        msg = self.wait(
            lambda m: m["msg_type"] == "debug_event" and m["content"].get("event") == name
        )
        return dict(msg["content"])

    def reply(self, msg_id: str) -> dict[str, Any]:
        """The execution's reply, once its outputs are all in too: they come on IOPub,
        which may trail the reply on the shell channel, and end with its idle status."""
        msg = self.wait(
            lambda m: m["msg_type"] == "execute_reply" and m["parent_header"]["msg_id"] == msg_id
        )
        idle = self.wait(
            lambda m: (
                m["msg_type"] == "status"
                and m["parent_header"].get("msg_id") == msg_id
                and m["content"].get("execution_state") == "idle"
            )
        )
        self.heard.append(idle)  # kept with the outputs, for what reads them
        return dict(msg["content"])

    def stdout(self, msg_id: str) -> str:
        return "".join(
            m["content"]["text"]
            for m in self.heard
            if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == msg_id
        )

    def close(self) -> None:
        self.ws.close()


def test_jupyterlabs_debugger_stops_a_persons_call_in_an_agents_function(
    server: ServerProcess,
) -> None:
    session_id = forked_session(server)
    assert server.http.get(f"/sessions/{session_id}").json()["sandbox"] is not None  # contained
    assert server.execute(session_id, AGENT_CODE)["status"] == "ok"
    person = Person(server, session_id)
    try:
        # What JupyterLab's panel sends when the person turns the debugger on.
        person.debug("initialize", {"clientID": "jupyterlab", "adapterID": "python"})
        person.debug("attach")
        info = person.debug("debugInfo")["body"]
        assert info["isStarted"], info
        # The variable explorer: the agent's variables, as the kernel holds them.
        variables = person.debug("inspectVariables")["body"]["variables"]
        by_name = {v["name"]: v for v in variables}
        assert by_name["agent_total"]["value"] == "41", variables
        assert "function variables" in by_name, variables  # grow, folded there

        # The agent's function came from the agent's cell: the kernel named its code by
        # the cell's source, as it names every cell, and the person's breakpoint there
        # (JupyterLab first writes the cell's source to that name: dumpCell).
        where = person.execute("print(grow.__code__.co_filename)")
        assert person.reply(where)["status"] == "ok"
        source = person.stdout(where).strip()
        dumped = person.debug("dumpCell", {"code": AGENT_CODE})["body"]["sourcePath"]
        assert dumped == source, (dumped, source)
        set_at = person.debug(
            "setBreakpoints",
            {"source": {"path": source}, "breakpoints": [{"line": 3}], "sourceModified": False},
        )["body"]["breakpoints"]
        assert set_at and set_at[0]["verified"], set_at
        person.debug("configurationDone")

        # The person's call stops in the agent's function, with its locals to read.
        call = person.execute("print('grown:', grow(1))")
        stopped = person.event("stopped")["body"]
        frames = person.debug("stackTrace", {"threadId": stopped["threadId"]})["body"]
        top = frames["stackFrames"][0]
        assert (top["name"], top["line"], top["source"]["path"]) == ("grow", 3, source), top
        scopes = person.debug("scopes", {"frameId": top["id"]})["body"]["scopes"]
        local = next(s for s in scopes if s["name"] == "Locals")
        named = person.debug("variables", {"variablesReference": local["variablesReference"]})
        seen = {v["name"]: v["value"] for v in named["body"]["variables"]}
        assert (seen["a"], seen["b"]) == ("1", "2"), seen

        # Continuing finishes the person's call.
        person.debug("continue", {"threadId": stopped["threadId"]})
        assert person.reply(call)["status"] == "ok"
        assert person.stdout(call) == "grown: 3\n"

        # Turning the debugger off (JupyterLab's toggle) clears the breakpoints: the
        # agent's next execution, through the function, runs straight through.
        person.debug("setBreakpoints", {"source": {"path": source}, "breakpoints": []})
        person.debug("disconnect", {"restart": False, "terminateDebuggee": False})
    finally:
        person.close()
    ran = server.execute(session_id, "print(grow(5))", timeout=60)
    assert (ran["status"], ran["stdout"]) == ("ok", "11\n"), ran
    # The person's cells are in the agent's transcript, marked as theirs.
    notebook = nbformat.reads(server.http.get(f"/sessions/{session_id}/notebook").text, 4)
    code = [c for c in notebook.cells if c.cell_type == "code"][1:]  # after kernel_pid's
    assert [c.source for c in code] == [
        AGENT_CODE,
        "print(grow.__code__.co_filename)",
        "print('grown:', grow(1))",
        "print(grow(5))",
    ]
    assert [c.metadata["kernelexec"].get("by") for c in code] == [
        None,
        "attached",
        "attached",
        None,
    ]
    assert code[2].outputs[0]["text"] == "grown: 3\n"
