"""The execution server: an HTTP API over many sessions (``kernelexec serve``)."""

from ._app import create_app
from ._config import ServerConfig, generate_token, is_loopback
from ._serve import serve

__all__ = ["ServerConfig", "create_app", "generate_token", "is_loopback", "serve"]
