"""``kernelexec token``: a new token for a tenant, and the lines that give it to the tenant.

The token goes to stderr and the tenants file's lines (its hash and id) to
stdout, so ``kernelexec token alice >> tenants.toml`` adds the hash to the
file and shows the token only on the terminal: redirected the obvious way,
the secret never lands in the file.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .._exceptions import ConfigurationError
from .._tenants._config import NAME_RULE, is_tenant_name
from .._tenants._tokens import new_token, token_hash, token_id

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Adds ``kernelexec token``."""
    token = commands.add_parser(
        "token",
        help="make a tenant's token, and its lines for the tenants file",
        description="Makes a new token for a tenant of a server's tenants file. The token "
        "goes to stderr, once: give it to the tenant, kernelexec keeps no copy. The lines "
        "for the tenants file (its hash and id) go to stdout.",
        epilog="example:\n"
        "  kernelexec token alice >> tenants.toml   # the token on the terminal, "
        "its hash in the file\n",
    )
    token.add_argument("tenant", metavar="TENANT", help="the tenant's name in the tenants file")
    token.set_defaults(handler=_token)


def _token(args: argparse.Namespace) -> int:
    if not is_tenant_name(args.tenant):
        raise ConfigurationError(
            f"{args.tenant!r} cannot name a tenant: use {NAME_RULE} (the same in the file)"
        )
    token = new_token()
    hashed = token_hash(token)
    print(token, file=sys.stderr, flush=True)
    made = time.strftime("%Y-%m-%d", time.gmtime())
    print(
        f"# Tenant {args.tenant}'s token {token_id(hashed)}, made {made}. The token itself went\n"
        "# to stderr, once: give it to the tenant. Only its hash is kept here.\n"
        f"[[tenants.{args.tenant}.tokens]]\n"
        f'id = "{token_id(hashed)}"\n'
        f'hash = "{hashed}"'
    )
    return 0
