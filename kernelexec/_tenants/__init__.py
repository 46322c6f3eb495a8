"""Tenants: who holds tokens to a server, and what each may do there.

``_tokens.py`` makes tokens (``kx_`` and 256 random bits), hashes them and
checks one against a hash; ``_models.py`` is what a tenant is (its scopes,
quotas, session options and request rate); ``_config.py`` reads a tenants
file (TOML) into those values, or makes the one tenant of a server started
with ``--token`` alone, and ``_jwt_config.py`` its ``[jwt]`` table (both
with the guarded read and checks of ``_checks.py``); ``_jwt.py`` checks a
JWT from an identity provider against the keys that table names;
``_registry.py`` finds the tenant a bearer token belongs to, and reads the
file again when it changes. The doors (``_server``, ``_mcp``, ``_cli``) use
it; it uses nothing of theirs.
"""

__all__: list[str] = []
