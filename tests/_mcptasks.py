"""The client half of MCP Tasks (SEP-2663) for the tests, on the SDK's own client extension API.

The ``mcp`` SDK (2.3) has the hooks (``ClientExtension``, ``ResultClaim``) but
no tasks extension of its own: this one declares ``io.modelcontextprotocol/tasks``
on every request, and ``Client.call_tool`` hands it a ``resultType: "task"``
answer, which it follows with ``tasks/get`` until the task ends. It keeps
what it saw, so a test can tell a task from a result that came at once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict, Field

IDENTIFIER = "io.modelcontextprotocol/tasks"


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId")


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"  # over HTTP, SEP-2663 puts the id in the Mcp-Name header too


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class UpdateTask(Request[dict[str, Any], Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class ResultForTask(Request[TaskParams, Literal["tasks/result"]]):
    """The 2025-11-25 draft's method, which SEP-2663 removed."""

    method: Literal["tasks/result"] = "tasks/result"


class Task(Result):
    """A task as the server describes it (``CreateTaskResult`` and ``tasks/get``'s answer)."""

    model_config = ConfigDict(extra="allow")
    task_id: str = Field(alias="taskId")
    status: str
    status_message: str | None = Field(default=None, alias="statusMessage")
    created_at: str = Field(alias="createdAt")
    last_updated_at: str = Field(alias="lastUpdatedAt")
    ttl_ms: int | None = Field(alias="ttlMs")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class CreatedTask(Task):
    result_type: Literal["task"] = Field(alias="resultType")


class Empty(Result):
    model_config = ConfigDict(extra="allow")


async def get_task(session: ClientSession, task_id: str) -> Task:
    return await session.send_request(GetTask(params=TaskParams(taskId=task_id)), Task)


async def cancel_task(session: ClientSession, task_id: str) -> Empty:
    return await session.send_request(CancelTask(params=TaskParams(taskId=task_id)), Empty)


@dataclass
class Tasks(ClientExtension):
    """Declares the extension; follows each task ``call_tool`` gets to its result.

    Attributes:
        created: every task a ``call_tool`` was answered with.
        polled: every ``tasks/get`` answer while following them.
    """

    identifier = IDENTIFIER
    created: list[CreatedTask] = field(default_factory=list)
    polled: list[Task] = field(default_factory=list)

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._follow)]

    async def _follow(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        self.created.append(created)
        with anyio.fail_after(600):
            while True:
                task = await get_task(ctx.session, created.task_id)
                self.polled.append(task)
                if task.status == "completed":
                    assert task.result is not None, task
                    return CallToolResult.model_validate(task.result)
                assert task.status == "working", task
                await anyio.sleep((task.poll_interval_ms or 1000) / 1000)


@asynccontextmanager
async def stdio_tasks_client(
    work_root: Path, *options: str, tasks: ClientExtension | None = None, token: str | None = None
) -> AsyncIterator[Client]:
    """``kernelexec mcp`` over stdio, with the SDK's ``Client`` (protocol 2026-07-28 if it can).

    Its stderr goes beside ``work_root``. ``tasks``: the extension to declare,
    if any. ``token``: a ``kernelexec serve``'s, for ``--server``.
    """
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kernelexec", "mcp", "--work-root", str(work_root), *options],
        env=None if token is None else {**os.environ, "KERNELEXEC_TOKEN": token},
    )
    with (work_root.parent / "mcp-stderr.log").open("a") as errlog:
        transport = stdio_client(params, errlog=errlog)
        async with Client(transport, extensions=[tasks] if tasks else None) as client:
            yield client


@asynccontextmanager
async def http_tasks_client(url: str, token: str, tasks: ClientExtension) -> AsyncIterator[Client]:
    """``kernelexec mcp --http`` at ``url``, as the tenant whose token this is."""
    http = httpx2.AsyncClient(
        trust_env=False,
        timeout=httpx2.Timeout(30, read=120),
        headers={"Authorization": f"Bearer {token}"},
    )
    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, extensions=[tasks]) as client:
            yield client
