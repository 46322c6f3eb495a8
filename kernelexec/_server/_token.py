"""The one token rule of ``serve``, ``gateway`` and ``mcp --http``, and fresh tokens.

A token travels in an HTTP header (``Authorization: Bearer <token>``, or
``token <token>`` from Jupyter clients), so it is held to what a bearer token
may carry (RFC 6750's b64token: letters, digits and ``- . _ ~ + /``, ``=`` at
the end): a space or a non-ASCII character would be cut or re-encoded on the
way and the right token refused. Eight characters at least, so that a
placeholder like ``abc`` is caught at start-up, not guessed later.
"""

from __future__ import annotations

import re
import secrets

from .._exceptions import ConfigurationError

__all__ = ["MIN_TOKEN_LENGTH", "check_token", "generate_token"]

MIN_TOKEN_LENGTH = 8
_B64TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_FIX = "pass another --token (or KERNELEXEC_TOKEN), or neither to have one generated"


def generate_token() -> str:
    """A fresh random token, 256 bits, URL-safe, never starting with ``-``.

    One in 64 URL-safe tokens starts with ``-``, and ``--token -abc...`` is then
    read as an option by every command-line parser that gets it.
    """
    while True:
        token = secrets.token_urlsafe(32)
        if not token.startswith("-"):
            return token


def check_token(token: str) -> str:
    """Returns ``token`` if servers may require it of their clients.

    Raises:
        ConfigurationError: it is shorter than 8 characters or holds a
            character a bearer token may not; the message never repeats it.
    """
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigurationError(
            f"the token has {len(token)} characters and needs at least {MIN_TOKEN_LENGTH}: {_FIX}"
        )
    if not _B64TOKEN.fullmatch(token):
        raise ConfigurationError(
            "the token may hold only letters, digits and - . _ ~ + / (= at its end), "
            f"with no spaces: {_FIX}"
        )
    return token
