"""The execution server: an HTTP API over many sessions (``kernelexec serve``)."""

from ._app import create_app
from ._config import ServerConfig, is_loopback
from ._serve import serve
from ._token import check_token, generate_token

__all__ = ["ServerConfig", "check_token", "create_app", "generate_token", "is_loopback", "serve"]
