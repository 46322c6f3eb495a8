"""Where kernels run. Each backend implements ``KernelBackend``."""

from ._base import KernelBackend, KernelMessage
from ._docker import DockerBackend
from ._gateway import GatewayBackend
from ._local import LocalBackend

__all__ = [
    "DockerBackend",
    "GatewayBackend",
    "KernelBackend",
    "KernelMessage",
    "LocalBackend",
]
