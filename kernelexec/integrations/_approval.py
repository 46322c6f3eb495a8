"""The approval hook: a person (or a policy) sees the code before it runs."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["Approval", "ApprovalLike", "Verdict", "ask", "read_verdict", "refusal_text"]


@runtime_checkable
class ApprovalLike(Protocol):
    """Anything with ``approved`` and ``reason``, such as AutoGen's ``ApprovalResponse``."""

    @property
    def approved(self) -> bool: ...

    @property
    def reason(self) -> str: ...


@dataclass(frozen=True)
class Approval:
    """An approval hook's answer.

    Attributes:
        approved: run the blocks (True) or run none of them (False).
        reason: why; a refusal's reason is what the agent reads.
    """

    approved: bool
    reason: str = ""


Verdict = bool | ApprovalLike
"""What an approval hook returns: a bool, an ``Approval``, or the like."""


def read_verdict(verdict: object) -> Approval:
    """The hook's answer as an ``Approval``.

    Raises:
        TypeError: the hook returned something else, so neither reading is safe.
    """
    if isinstance(verdict, bool):
        return Approval(approved=verdict)
    if isinstance(verdict, ApprovalLike) and isinstance(verdict.approved, bool):
        return Approval(approved=verdict.approved, reason=str(verdict.reason or ""))
    raise TypeError(
        "an approval_func must return a bool or an object with 'approved' and 'reason' "
        f"(such as kernelexec.integrations.Approval), not {type(verdict).__name__}"
    )


async def ask(approval_func: Callable[[Any], Any] | None, subject: object) -> Approval:
    """What a hook, sync or async, says of ``subject``; no hook approves everything."""
    if approval_func is None:
        return Approval(approved=True)
    verdict = approval_func(subject)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return read_verdict(verdict)


def refusal_text(approval: Approval, what: str = "Code execution") -> str:
    """The output an agent reads when its code (or ``what`` else) was refused."""
    why = f": {approval.reason}" if approval.reason else ""
    return f"{what} was refused by the approval function{why}. Nothing was run."
