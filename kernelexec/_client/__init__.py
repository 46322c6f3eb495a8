"""Clients of the execution server: ``Client`` (sync) and ``AsyncClient``."""

from ._async import AsyncClient, AsyncRemoteSession
from ._executions import AsyncRemoteExecution, RemoteExecution
from ._sync import Client, RemoteSession

__all__ = [
    "AsyncClient",
    "AsyncRemoteExecution",
    "AsyncRemoteSession",
    "Client",
    "RemoteExecution",
    "RemoteSession",
]
