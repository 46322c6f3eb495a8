"""Tenants files for the tests: tenants with fresh tokens, written as an operator would."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelexec._tenants._models import SCOPES
from kernelexec._tenants._tokens import new_token, token_hash

ALL_BUT_ADMIN = [s for s in SCOPES if s != "admin"]


def write_tenants(
    path: Path, tenants: Mapping[str, Mapping[str, Any]], tokens: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Writes a tenants file (replacing any, as an editor's save does); each tenant's token.

    ``tenants`` maps a name to its table (scopes, quotas, allow, rate_limit; scopes
    default to every one but admin); ``tokens`` keeps the given tenants' tokens.
    """
    made = dict(tokens or {})
    lines: list[str] = []
    for name, table in tenants.items():
        token = made.setdefault(name, new_token())
        lines.append(f"[tenants.{name}]")
        lines.append(f"scopes = {json.dumps(list(table.get('scopes', ALL_BUT_ADMIN)))}")
        for key in ("quotas", "rate_limit"):
            if key in table:
                inline = ", ".join(f"{k} = {v}" for k, v in table[key].items())
                lines.append(f"{key} = {{ {inline} }}")
        if "allow" in table:
            lines.append(f"allow = {json.dumps(list(table['allow']))}")
        lines += [f"[[tenants.{name}.tokens]]", f'hash = "{token_hash(token)}"', ""]
    staged = path.with_suffix(".staged")
    staged.write_text("\n".join(lines))
    staged.chmod(0o600)
    os.replace(staged, path)
    return {name: made[name] for name in tenants}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
