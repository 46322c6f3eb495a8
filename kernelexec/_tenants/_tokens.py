"""A tenant's bearer tokens: made here, stored only as hashes, told apart by an id.

A token is ``kx_`` and 256 random bits, URL-safe (``kx_3vQ...``, 46
characters): the prefix lets a reader, a log scrubber or a secret scanner
recognise one, and every character is one a bearer token may carry. The
tenants file holds its hash (``sha256:<64 hex digits>``), never the token,
so the file can be read by those who run the server without handing them
every tenant's access. A token's id is the first 12 hex digits of its hash:
short enough for a log line, stable across reloads, and as safe to show as
the hash itself.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

__all__ = [
    "HASH_PREFIX",
    "TOKEN_PREFIX",
    "is_token_hash",
    "new_token",
    "token_hash",
    "token_id",
    "verify_token",
]

TOKEN_PREFIX = "kx_"
HASH_PREFIX = "sha256:"
_ID_DIGITS = 12  # 48 bits: no two of a few thousand tokens share one (and a file is checked)
_HASH = re.compile(r"sha256:[0-9a-f]{64}")


def new_token() -> str:
    """A fresh token: ``kx_`` and 32 random bytes, URL-safe base64 (46 characters)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the tenants file stores for ``token``: ``sha256:`` and its hex digest.

    One unsalted SHA-256 is enough because the tokens are 256 random bits:
    no dictionary holds them, so a slow, salted password hash (scrypt,
    argon2) would add nothing but its cost to every request. A token a
    person chose (a ``--token`` like ``hunter2hunter2``) is as weak here as
    it is on the wire; ``kernelexec token`` makes ones that are not.
    """
    return HASH_PREFIX + hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_id(hashed: str) -> str:
    """The id logs show for the token whose hash is ``hashed``: its first 12 hex digits.

    Taken from the hash, not the token, so that the id of a token in the file
    can be read off the file, and nothing about the token is in it that the
    file does not already show.
    """
    return hashed.removeprefix(HASH_PREFIX)[:_ID_DIGITS]


def verify_token(token: str, hashed: str) -> bool:
    """Whether ``token`` is the one whose hash is ``hashed``.

    The digests are compared in the same time however many of their
    characters match, so a caller timing refusals learns nothing of the
    stored hash.
    """
    return hmac.compare_digest(token_hash(token).encode(), hashed.encode())


def is_token_hash(text: str) -> bool:
    """Whether ``text`` is a hash as ``token_hash`` writes it (lower-case hex)."""
    return _HASH.fullmatch(text) is not None
