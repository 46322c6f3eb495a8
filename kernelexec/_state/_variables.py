"""A kernel's variables, listed and inspected without running a cell.

The kernel answers on its control channel (``_kernel/variables.py``), on a
thread of its own: the answer comes while a cell runs, and no execution count,
``In``/``Out`` entry, history or transcript cell is made.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .._backends import KernelBackend
from .._exceptions import KernelexecError, KernelStartError
from .._kernel.variables import REPLY, REQUEST

__all__ = ["Variable", "VariableDetail", "ask_variables", "inspect_variable", "list_variables"]

ANSWER_TIMEOUT = 5.0  # seconds the kernel gets; its own budget is under one


@dataclass(frozen=True)
class Variable:
    """One name of the user namespace, briefly.

    Attributes:
        name: the variable's name.
        type: its type, qualified unless a builtin (``pandas.core.frame.DataFrame``).
        shape: an array's, DataFrame's or Series' shape.
        length: ``len()`` of anything else that has one.
        dtype: an array's or Series' dtype.
        bytes: approximate size in memory (shallow for containers).
        repr: ``repr()`` cut to about 100 characters (2,000 in ``inspect``).
        unavailable: why the facts are missing: the object's code raised, or
            did not answer within its time box, or the request's budget ran out.
    """

    name: str
    type: str
    shape: list[int] | None = None
    length: int | None = None
    dtype: str | None = None
    bytes: int | None = None
    repr: str | None = None
    unavailable: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Variable:
        return cls(**_pick(cls, data))


@dataclass(frozen=True)
class VariableDetail(Variable):
    """One variable in more detail.

    Attributes:
        columns: a DataFrame's columns, ``{"name", "dtype"}`` (at most 100).
        columns_truncated: the DataFrame has more columns than listed.
        head: a DataFrame's first rows (at most 5) as records.
        attributes: anything else's public attributes, ``{"name", "type"}`` (at most 50).
    """

    columns: list[dict[str, str]] | None = None
    columns_truncated: bool = False
    head: list[dict[str, Any]] | None = None
    attributes: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VariableDetail:
        return cls(**_pick(cls, data))


def _pick(cls: type[Variable], data: dict[str, Any]) -> dict[str, Any]:
    # Only the fields we know: a newer (or hostile) kernel's extras are dropped.
    names = set(cls.__dataclass_fields__)
    return {k: v for k, v in data.items() if k in names}


async def list_variables(backend: KernelBackend) -> list[Variable]:
    """The kernel's user namespace, briefly (see ``ask_variables`` for what it raises)."""
    listed = (await ask_variables(backend, None)).get("variables")
    if not isinstance(listed, list):
        return []
    return [Variable.from_dict(v) for v in listed if isinstance(v, dict)]


async def inspect_variable(backend: KernelBackend, name: str) -> VariableDetail | None:
    """One variable in more detail, None if unknown (see ``ask_variables`` for what it raises)."""
    found = (await ask_variables(backend, name)).get("variable")
    return VariableDetail.from_dict(found) if isinstance(found, dict) else None


async def ask_variables(backend: KernelBackend, name: str | None) -> dict[str, Any]:
    """The kernel's reply to a variables request (``name`` None: the listing).

    Raises:
        KernelexecError: the backend cannot be asked (a gateway's kernel), or
            the kernel did not answer.
    """
    ask = getattr(backend, "ask_control", None)
    if ask is None:
        raise KernelexecError(
            f"variables() and inspect() need a local or Docker kernel; "
            f"{type(backend).__name__} does not offer the kernel's control channel yet"
        )
    reply = await ask(REQUEST, {"name": name}, REPLY, ANSWER_TIMEOUT)
    if not isinstance(reply, dict):
        raise KernelStartError(
            f"the kernel did not answer a variables request within {ANSWER_TIMEOUT:g} s "
            "(an ipykernel older than 7 serves control requests only between cells)"
        )
    return reply
