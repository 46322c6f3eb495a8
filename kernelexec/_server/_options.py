"""Session options a client may ask for, held to what the server's operator allows.

One model for every door: ``POST /sessions`` and the MCP servers' ``create_session``
take the options the library's ``AsyncSession`` takes (an interpreter, a venv
with packages, preload code, ``Limits``, a Docker container with its limits, a
gateway) as JSON, and ``parse_options`` checks them against the operator's
``SessionPolicy``. Anything that makes the server run another interpreter,
install packages, start containers or reach another machine needs an operator's
flag (``--allow-python``, ``--allow-packages``, ``--allow-docker``,
``--allow-gateway``); preload code and lower limits are always allowed, since
they only do what the session's own code could.

Two kinds of refusal, each an ``OptionError`` whose message names the fix:
403 ``option_not_allowed`` (the option is well formed, the operator has not
allowed it: the message names the flag) and 422 ``invalid_option`` (the value
cannot be used: wrong type, unknown key, over a cap, a venv name that is a path).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._backends import DockerBackend, GatewayBackend, KernelBackend
from .._containment._sandbox import MIN_MEMORY as MIN_SANDBOX_MEMORY
from .._containment._sandbox import Sandbox
from .._exceptions import ConfigurationError
from .._execution._models import Limits
from .._session._async import AsyncSession
from .._venvs._venv import ARCHIVES, check_packages
from ._ray_options import RayPolicy, ray_backend, ray_schema

__all__ = [
    "OPTION_FIELDS",
    "OptionError",
    "SessionOptions",
    "SessionPolicy",
    "library_has",
    "options_schema",
    "parse_memory",
    "parse_options",
]

OPTION_FIELDS = (
    "python",
    "venv",
    "packages",
    "python_version",
    "preload",
    "limits",
    "docker",
    "gateway",
    "sandbox",
    "ray",
    "checkpoint_every",
)
# A session's recovery checkpoints: at most one a second (each is a pickle of its
# variables, written by the server's disk), at least one a day.
MIN_CHECKPOINT_EVERY = 1
MAX_CHECKPOINT_EVERY = 86_400
_VENV_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
# A requirement as pip reads one: a name, extras, a version spec; no URL, path or option,
# and no name that pip would take for an archive's file name (x-1.0.zip, X.WHL).
_SPEC = r"[<>=!~]=?[A-Za-z0-9.*+!-]+"
_ARCHIVE = "|".join(
    "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in suffix)
    for suffix in ARCHIVES
)
_PACKAGE = (
    rf"^(?![A-Za-z0-9._-]*({_ARCHIVE})([\[<>=!~]|$))"
    rf"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?({_SPEC}(,{_SPEC})*)?$"
)
_PYTHON_VERSION = r"^3\.[0-9]{1,2}(\.[0-9]{1,2})?$"
_NETWORK = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_MEMORY = re.compile(r"([0-9]{1,15})([bkmg]?)", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
MIN_MEMORY = 32 << 20  # a kernel does not start in less
_DOCKER_KEYS = ("memory", "cpus", "pids_limit", "network")
_SANDBOX_KEYS = ("network", "memory", "processes", "open_files")
# The least of each limit a client may ask for (memory in bytes).
_SANDBOX_LEAST = {"memory": MIN_SANDBOX_MEMORY, "processes": 16, "open_files": 64}
_MAX_PACKAGES = 64
_MAX_PRELOAD = 100_000


class OptionError(Exception):
    """A session option refused; ``status`` is 403 (not allowed) or 422 (unusable)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _invalid(message: str) -> OptionError:
    return OptionError(422, "invalid_option", message)


def _refused(option: str, flag: str) -> OptionError:
    return OptionError(
        403,
        "option_not_allowed",
        f"this server does not allow {option}: its operator must start it with {flag}",
    )


def parse_memory(text: str) -> int:
    """Bytes in a Docker memory size ("512m", "2g", "1073741824").

    Raises:
        ValueError: it is not a whole number with an optional b, k, m or g.
    """
    found = _MEMORY.fullmatch(text.strip())
    if not found:
        raise ValueError(f"{text[:40]!r} is not a memory size such as 512m or 2g")
    return int(found.group(1)) * _UNITS[found.group(2).lower()]


@dataclass(frozen=True)
class SessionPolicy:
    """What the operator lets a client ask of a session (``kernelexec serve``'s flags).

    Attributes:
        pythons: interpreters a session may name with ``python`` (``--allow-python``).
        packages: sessions may ask for ``packages``, ``python_version`` and a
            named ``venv`` (``--allow-packages``): the server makes the env.
        venv_root: where named venvs are made (``--venv-root``); a venv is
            named, never given as a path.
        docker: sessions may run in a container (``--allow-docker``).
        docker_image: the image those containers run (``--docker-image``);
            None: DockerBackend's default.
        docker_networks: networks a container may join besides "none"
            (``--allow-docker-network``).
        docker_memory, docker_cpus, docker_pids: each container's caps, and
            what it gets when the client asks for no limit
            (``--docker-max-memory``, ``--docker-max-cpus``, ``--docker-max-pids``).
        gateways: gateway URLs a session may run its kernel on (``--allow-gateway``).
        gateway_token: those gateways' token (``$KERNELEXEC_GATEWAY_TOKEN``).
        limits: the highest ``Limits`` a client may ask for.
        sandbox: the containment of local kernels: a ``Sandbox`` (``--sandbox-read``,
            ``--sandbox-memory``...; its limits are the highest a client may ask
            for), False for none (``--no-sandbox``), None for the library's default.
        network: sessions may ask for ``sandbox.network`` (``--allow-network``).
        ray: every kernel runs on this Ray cluster, within its caps (``--ray``);
            None: kernels run here.
    """

    pythons: tuple[Path, ...] = ()
    packages: bool = False
    venv_root: Path | None = None
    docker: bool = False
    docker_image: str | None = None
    docker_networks: tuple[str, ...] = ()
    docker_memory: str = "2g"
    docker_cpus: float = 2.0
    docker_pids: int = 512
    gateways: tuple[str, ...] = ()
    gateway_token: str | None = field(default=None, repr=False)
    limits: Limits = field(default_factory=Limits)
    sandbox: Sandbox | bool | None = None
    network: bool = False
    ray: RayPolicy | None = None

    def __post_init__(self) -> None:
        wrong = None if self.ray is None else self.ray.check()
        if wrong is not None:
            raise ConfigurationError(wrong)
        try:
            memory = parse_memory(self.docker_memory)
        except ValueError as exc:
            raise ConfigurationError(f"--docker-max-memory: {exc}") from None
        if memory < MIN_MEMORY:
            raise ConfigurationError("--docker-max-memory must be at least 32m")
        if not (math.isfinite(self.docker_cpus) and self.docker_cpus > 0):
            raise ConfigurationError("--docker-max-cpus must be a positive number")
        if self.docker_pids < 16:
            raise ConfigurationError("--docker-max-pids must be at least 16")
        for python in self.pythons:
            if not python.is_absolute():
                raise ConfigurationError(f"--allow-python {python}: give an absolute path")
        object.__setattr__(self, "gateways", tuple(url.rstrip("/") for url in self.gateways))


@dataclass(frozen=True)
class SessionOptions:
    """What a client asked of a new session, checked; ``session_kwargs`` turns it into
    ``AsyncSession``'s arguments. None (or empty) means "the server's default"."""

    python: str | None = None
    venv: str | None = None
    packages: tuple[str, ...] = ()
    python_version: str | None = None
    preload: str | None = None
    limits: Limits | None = None
    docker: Mapping[str, Any] | None = None
    gateway: str | None = None
    sandbox: Mapping[str, Any] | None = None
    ray: Mapping[str, Any] | None = None  # the resources held on the server's Ray cluster
    checkpoint_every: float | None = None  # seconds between recovery checkpoints

    @property
    def local(self) -> bool:
        """The kernel is a local process (a warm pool's kernel may serve it)."""
        return self.docker is None and self.gateway is None and self.ray is None

    def to_dict(self) -> dict[str, Any]:
        """The options given, as JSON (for a session's description)."""
        out: dict[str, Any] = {}
        for name in OPTION_FIELDS:
            value = getattr(self, name)
            if name == "limits" and value is not None:
                value = dataclasses.asdict(value)
            elif name == "packages":
                value = list(value) or None
            elif name in ("docker", "sandbox", "ray") and value is not None:
                value = dict(value)
            if value is not None:
                out[name] = value
        return out

    def session_kwargs(self, policy: SessionPolicy, kernel_name: str) -> dict[str, Any]:
        """Keyword arguments for ``AsyncSession`` (``backend`` among them when not local)."""
        kwargs: dict[str, Any] = {}
        if self.python is not None:
            kwargs["python"] = self.python
        if self.venv is not None:
            assert policy.venv_root is not None
            kwargs["venv"] = str(policy.venv_root / self.venv)
        if self.packages:
            kwargs["packages"] = list(self.packages)
        if self.python_version is not None:
            kwargs["python_version"] = self.python_version
        if self.preload is not None:
            kwargs["preload"] = self.preload
        if self.limits is not None:
            kwargs["limits"] = self.limits
        if self.checkpoint_every is not None:
            kwargs["checkpoint_every"] = self.checkpoint_every
        backend: KernelBackend | None = None
        if policy.ray is not None:  # every kernel on the cluster, asked or not (an MCP session)
            asked = self.ray if self.ray is not None else policy.ray.parse(None)
            backend = ray_backend(policy.ray, asked, self._sandbox(policy.sandbox))
        elif self.docker is not None:
            backend = DockerBackend(image=policy.docker_image, **self.docker)
        elif self.gateway is not None:
            backend = GatewayBackend(
                self.gateway, token=policy.gateway_token, kernel_name=kernel_name
            )
        if backend is not None:
            kwargs["backend"] = backend
        elif policy.sandbox is not None or self.sandbox:
            kwargs["sandbox"] = self._sandbox(policy.sandbox)
        return kwargs

    def _sandbox(self, base: Sandbox | bool | None) -> Sandbox | bool:
        """The operator's sandbox with the client's choices (network, lower limits)."""
        if base is False or not self.sandbox:
            return True if base is None else base
        chosen = base if isinstance(base, Sandbox) else Sandbox()
        return dataclasses.replace(chosen, **self.sandbox)


def library_has(name: str) -> bool:
    """``AsyncSession`` takes the argument ``name`` (venvs and packages are new)."""
    return name in inspect.signature(AsyncSession).parameters


def parse_options(data: Mapping[str, Any], policy: SessionPolicy) -> SessionOptions:
    """The session options in ``data`` (other keys are ignored), checked.

    Raises:
        OptionError: 403 naming the flag that would allow an option, or 422
            naming what is wrong with a value.
    """
    python = _python(data.get("python"), policy)
    venv = _venv(data.get("venv"), policy)
    packages = _packages(data.get("packages"), policy)
    version = _python_version(data.get("python_version"), policy)
    preload = _preload(data.get("preload"))
    limits = _limits(data.get("limits"), policy.limits)
    docker = _docker(data.get("docker"), policy)
    gateway = _gateway(data.get("gateway"), policy)
    sandbox = _sandbox(data.get("sandbox"), policy)
    local_env = {"python": python, "venv": venv, "packages": packages, "python_version": version}
    asked = sorted(name for name, value in local_env.items() if value)
    if docker is not None and gateway is not None:
        raise _invalid("ask for docker or gateway, not both: each says where the kernel runs")
    if asked and (docker is not None or gateway is not None):
        where = "a container" if docker is not None else "a gateway"
        raise _invalid(
            f"{', '.join(asked)} choose a local interpreter, but the kernel runs in {where}; "
            "leave them out"
        )
    if sandbox is not None and (docker is not None or gateway is not None):
        raise _invalid(
            "sandbox contains a local kernel; a container has its own limits (docker), "
            "and a gateway's kernel is its operator's"
        )
    ray = _ray(data.get("ray"), policy)
    if ray is not None:
        elsewhere = sorted(
            name
            for name, value in (*local_env.items(), ("docker", docker), ("gateway", gateway))
            if value
        )
        if elsewhere:
            raise _invalid(
                f"this server runs every kernel on its Ray cluster (--ray): leave out "
                f"{', '.join(elsewhere)}"
            )
    every = _checkpoint_every(data.get("checkpoint_every"))
    if every is not None and policy.ray is not None and not policy.ray.shared_work_dirs:
        raise _invalid(
            "checkpoint_every needs a kernel that can be checkpointed: on this server's Ray "
            "cluster its files are on its node's disk alone (the operator's "
            "--ray-shared-work-root puts work dirs on storage every node mounts)"
        )
    return SessionOptions(
        python,
        venv,
        packages,
        version,
        preload,
        limits,
        docker,
        gateway,
        sandbox,
        ray,
        every,
    )


def _checkpoint_every(value: Any) -> float | None:
    """Seconds between a session's recovery checkpoints; None: it takes none."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not MIN_CHECKPOINT_EVERY <= value <= MAX_CHECKPOINT_EVERY
    ):
        raise _invalid(
            f"checkpoint_every is seconds from {MIN_CHECKPOINT_EVERY:g} to "
            f"{MAX_CHECKPOINT_EVERY:,}, not {str(value)[:40]!r}"
        )
    return float(value)


def _ray(value: Any, policy: SessionPolicy) -> dict[str, Any] | None:
    """The resources a session holds on the server's Ray cluster; None without ``--ray``."""
    if policy.ray is None:
        if value is not None:
            raise _refused("kernels on a Ray cluster (ray)", "--ray ADDRESS")
        return None
    try:
        return policy.ray.parse(value)
    except ValueError as exc:
        raise _invalid(str(exc)) from None


def _string(value: Any, name: str, *, longest: int = 4096) -> str:
    if not isinstance(value, str):
        raise _invalid(f"{name} must be a string")
    if not value or len(value) > longest or "\0" in value:
        raise _invalid(f"{name} must be 1 to {longest:,} characters, without NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid(f"{name} is not valid Unicode text (a lone surrogate)") from None
    return value


def _python(value: Any, policy: SessionPolicy) -> str | None:
    if value is None:
        return None
    given = _string(value, "python")
    if not policy.pythons:
        raise _refused("choosing the interpreter (python)", "--allow-python PATH")
    # The file that would run, compared with each allowed one's: a link or
    # "../" spelling of an allowed interpreter is that interpreter, anything else is not.
    try:
        resolved = Path(given).resolve() if Path(given).is_absolute() else None
    except (OSError, RuntimeError):
        resolved = None
    for allowed in policy.pythons:
        if given == str(allowed) or (resolved is not None and resolved == allowed.resolve()):
            return str(allowed)  # the operator's spelling is what runs
    raise OptionError(
        403,
        "option_not_allowed",
        f"python {given[:200]!r} is not an interpreter this server allows; allowed: "
        f"{', '.join(map(str, policy.pythons))} (the operator's --allow-python)",
    )


def _venv(value: Any, policy: SessionPolicy) -> str | None:
    if value is None:
        return None
    name = _string(value, "venv")
    if not re.fullmatch(_VENV_NAME, name):
        raise _invalid(
            f"venv {name[:64]!r} must be a name (1-64 letters, digits, '_' or '-', starting "
            "with a letter or digit), not a path: the server keeps venvs in its --venv-root"
        )
    if not policy.packages or policy.venv_root is None:
        raise _refused("making venvs (venv)", "--allow-packages")
    _need_library("venv")
    return name


def _packages(value: Any, policy: SessionPolicy) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > _MAX_PACKAGES:
        raise _invalid(f"packages must be a list of at most {_MAX_PACKAGES} requirement strings")
    packages = tuple(_string(p, "each package", longest=200) for p in value)
    for package in packages:
        if not re.fullmatch(_PACKAGE, package):
            raise _invalid(
                f"package {package[:200]!r} is not a requirement for a package of the index "
                "such as 'rich' or 'pandas>=2.0' (no paths, archives, URLs or pip options)"
            )
    if packages and not policy.packages:
        raise _refused("installing packages (packages)", "--allow-packages")
    try:
        # As pip parses them: what the pattern (the schema's too) cannot say.
        packages = check_packages(packages)
    except ConfigurationError as exc:
        raise _invalid(str(exc)) from None
    if packages:
        _need_library("packages")
    return packages


def _python_version(value: Any, policy: SessionPolicy) -> str | None:
    if value is None:
        return None
    version = _string(value, "python_version", longest=10)
    if not re.fullmatch(_PYTHON_VERSION, version):
        raise _invalid(f"python_version {version!r} must look like '3.12' or '3.12.4'")
    if not policy.packages:
        raise _refused("making an environment for a Python version", "--allow-packages")
    _need_library("python_version")
    return version


def _need_library(name: str) -> None:
    if not library_has(name):
        raise OptionError(
            501,
            "not_implemented",
            f"this kernelexec cannot make environments yet (AsyncSession has no {name}=)",
        )


def _preload(value: Any) -> str | None:
    if value is None:
        return None
    # Code the session's own code could run: allowed, within a size.
    if not isinstance(value, str):
        raise _invalid("preload must be a string of code")
    if len(value) > _MAX_PRELOAD or "\0" in value:
        raise _invalid(f"preload must be at most {_MAX_PRELOAD:,} characters, without NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid("preload is not valid Unicode text (a lone surrogate)") from None
    return value


def _limits(value: Any, caps: Limits) -> Limits | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _invalid('limits must be an object, e.g. {"max_text_chars": 5000}')
    names = [f.name for f in dataclasses.fields(Limits)]
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise _invalid(f"unknown limit(s) {', '.join(unknown)}; known: {', '.join(names)}")
    chosen: dict[str, int] = {}
    for name, item in value.items():
        low, high = _limit_range(name, caps)
        if isinstance(item, float) and item.is_integer():
            item = int(item)  # 3000.0 is the whole number JSON Schema's "integer" allows
        if isinstance(item, bool) or not isinstance(item, int) or not low <= item <= high:
            raise _invalid(
                f"limits.{name} must be a whole number from {low:,} to {high:,} (the server's cap)"
            )
        chosen[name] = item
    # One output is never bigger than all of them together: a lower total lowers it.
    total = chosen.get("max_result_bytes", caps.max_result_bytes)
    if chosen.get("max_output_bytes", caps.max_output_bytes) > total:
        chosen["max_output_bytes"] = total
    return dataclasses.replace(caps, **chosen)


def _limit_range(name: str, caps: Limits) -> tuple[int, int]:
    return Limits.least(name), int(getattr(caps, name))


def _docker(value: Any, policy: SessionPolicy) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _invalid('docker must be an object, e.g. {"memory": "512m"} ({} for the caps)')
    unknown = sorted(set(value) - set(_DOCKER_KEYS))
    if unknown:
        raise _invalid(
            f"unknown docker option(s) {', '.join(unknown)}; known: {', '.join(_DOCKER_KEYS)}"
        )
    if not policy.docker:
        raise _refused("Docker sessions (docker)", "--allow-docker")
    # Never unlimited: what the client leaves out is the operator's cap.
    memory = value.get("memory", policy.docker_memory)
    cap = parse_memory(policy.docker_memory)
    if not isinstance(memory, str):
        raise _invalid("docker.memory must be a string such as '512m'")
    try:
        size = parse_memory(memory)
    except ValueError as exc:
        raise _invalid(f"docker.memory: {exc}") from None
    if not MIN_MEMORY <= size <= cap:
        raise _invalid(
            f"docker.memory must be from 32m to {policy.docker_memory} "
            "(the server's --docker-max-memory)"
        )
    cpus = value.get("cpus", policy.docker_cpus)
    if (
        isinstance(cpus, bool)
        or not isinstance(cpus, (int, float))
        or not (math.isfinite(cpus) and 0.01 <= cpus <= policy.docker_cpus)
    ):
        raise _invalid(
            f"docker.cpus must be a number from 0.01 to {policy.docker_cpus:g} "
            "(the server's --docker-max-cpus)"
        )
    pids = value.get("pids_limit", policy.docker_pids)
    if isinstance(pids, bool) or not isinstance(pids, int) or not 16 <= pids <= policy.docker_pids:
        raise _invalid(
            f"docker.pids_limit must be a whole number from 16 to {policy.docker_pids} "
            "(the server's --docker-max-pids)"
        )
    network = value.get("network", "none")
    if not isinstance(network, str) or not re.fullmatch(_NETWORK, network):
        raise _invalid("docker.network must be a network's name, such as 'none'")
    if network != "none" and network not in policy.docker_networks:
        raise _refused(
            f"containers on the network {network!r}", f"--allow-docker-network {network}"
        )
    return {"memory": str(size), "cpus": float(cpus), "pids_limit": pids, "network": network}


def _gateway(value: Any, policy: SessionPolicy) -> str | None:
    if value is None:
        return None
    url = _string(value, "gateway", longest=2048).rstrip("/")
    if url not in policy.gateways:
        if not policy.gateways:
            raise _refused("kernels on a gateway (gateway)", "--allow-gateway URL")
        raise OptionError(
            403,
            "option_not_allowed",
            f"gateway {url[:200]!r} is not one this server allows; allowed: "
            f"{', '.join(policy.gateways)} (the operator's --allow-gateway)",
        )
    return url


def _sandbox(value: Any, policy: SessionPolicy) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _invalid('sandbox must be an object, e.g. {"network": true}')
    unknown = sorted(set(value) - set(_SANDBOX_KEYS))
    if unknown:
        raise _invalid(
            f"unknown sandbox option(s) {', '.join(unknown)}; known: {', '.join(_SANDBOX_KEYS)}"
        )
    if policy.sandbox is False:
        raise OptionError(
            403,
            "option_not_allowed",
            "this server's kernels are not contained (its operator passed --no-sandbox): "
            "leave sandbox out",
        )
    caps = policy.sandbox if isinstance(policy.sandbox, Sandbox) else Sandbox()
    chosen: dict[str, Any] = {}
    network = value.get("network", False)
    if not isinstance(network, bool):
        raise _invalid("sandbox.network must be true or false")
    if network and not policy.network:
        raise _refused("kernels with a network (sandbox.network)", "--allow-network")
    if network:
        chosen["network"] = True
    for name, least in _SANDBOX_LEAST.items():
        if name in value:
            chosen[name] = _within(name, value[name], least, getattr(caps, name))
    return chosen


def _within(name: str, value: Any, least: int, cap: int | None) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < least
        or (cap is not None and value > cap)
    ):
        most = (
            "" if cap is None else f" to {cap:,} (the server's --sandbox-{name.replace('_', '-')})"
        )
        raise _invalid(f"sandbox.{name} must be a whole number from {least:,}{most}")
    return value


def options_schema(policy: SessionPolicy) -> dict[str, dict[str, Any]]:
    """The JSON Schema of each option, for ``CreateSession`` and the MCP tool."""
    text = {"type": "string", "minLength": 1, "pattern": "^[^\\x00]*$"}
    caps = policy.limits
    limits = {
        f.name: {
            "type": "integer",
            "minimum": _limit_range(f.name, caps)[0],
            "maximum": _limit_range(f.name, caps)[1],
        }
        for f in dataclasses.fields(Limits)
    }
    return {
        "python": {
            **text,
            "maxLength": 4096,
            "description": "an interpreter to host the kernel (it needs ipykernel); "
            "only those the operator allows (--allow-python), else 403",
        },
        "venv": {
            "type": "string",
            "pattern": _VENV_NAME,
            "description": "a venv's name: made (or reused) in the server's --venv-root with "
            "ipykernel and packages; needs --allow-packages, else 403",
        },
        "packages": {
            "type": "array",
            "maxItems": _MAX_PACKAGES,
            "items": {"type": "string", "maxLength": 200, "pattern": _PACKAGE},
            "description": "requirements installed in the session's venv (cached by content "
            "when no venv is named); needs --allow-packages, else 403",
        },
        "python_version": {
            "type": "string",
            "pattern": _PYTHON_VERSION,
            "description": "the venv's Python version; needs --allow-packages, else 403",
        },
        "preload": {
            "type": "string",
            "maxLength": _MAX_PRELOAD,
            "pattern": "^[^\\x00]*$",
            "description": "code the kernel runs before the first execution and after every "
            "restart; replaces the server's --preload; a failing preload is a 422",
        },
        "limits": {
            "type": "object",
            "additionalProperties": False,
            "properties": limits,
            "description": "output caps (kernelexec.Limits), at most the server's; "
            "max_output_bytes above max_result_bytes is lowered to it",
        },
        "docker": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "memory": {"type": "string", "pattern": "^[0-9]{1,15}[bkmgBKMG]?$"},
                "cpus": {"type": "number", "minimum": 0.01, "maximum": policy.docker_cpus},
                "pids_limit": {"type": "integer", "minimum": 16, "maximum": policy.docker_pids},
                "network": {"type": "string", "pattern": _NETWORK},
            },
            "description": "run the kernel in a container (needs --allow-docker, else 403); "
            f"limits left out are the server's caps (memory {policy.docker_memory}, "
            f"cpus {policy.docker_cpus:g}, pids_limit {policy.docker_pids}); network "
            "'none' unless the operator allows another (--allow-docker-network)",
        },
        "gateway": {
            **text,
            "maxLength": 2048,
            "description": "a Jupyter gateway's URL to run the kernel on; only those the "
            "operator allows (--allow-gateway), else 403",
        },
        "ray": ray_schema(policy.ray),
        "checkpoint_every": {
            "type": "number",
            "minimum": MIN_CHECKPOINT_EVERY,
            "maximum": MAX_CHECKPOINT_EVERY,
            "description": "seconds: after an execution, once this long has passed since the "
            "last, the session's variables are checkpointed (privately, on the server); a "
            "kernel that dies (a crash, its memory limit, a lost Ray node) is replaced at the "
            "next execution by one holding them, and the result's message says so. 422 where "
            "the kernel cannot be checkpointed (a Ray node without shared work dirs)",
        },
        "sandbox": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"network": {"type": "boolean"}, **_sandbox_limits(policy)},
            "description": "the local kernel's containment (kernelexec.Sandbox): network "
            "(needs --allow-network, else 403) and lower limits than the server's, memory "
            "in bytes (--sandbox-memory, --sandbox-processes, --sandbox-open-files); 403 "
            "where the operator passed --no-sandbox",
        },
    }


def _sandbox_limits(policy: SessionPolicy) -> dict[str, dict[str, Any]]:
    caps = policy.sandbox if isinstance(policy.sandbox, Sandbox) else Sandbox()
    found: dict[str, dict[str, Any]] = {}
    for name, least in _SANDBOX_LEAST.items():
        cap = getattr(caps, name)
        found[name] = {"type": "integer", "minimum": least}
        if cap is not None:
            found[name]["maximum"] = cap
    return found
