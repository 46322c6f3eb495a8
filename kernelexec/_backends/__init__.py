"""Where kernels run. Each backend implements ``KernelBackend``."""

from ._base import KernelBackend, KernelMessage
from ._caps import DROPPED
from ._docker import DockerBackend
from ._gateway import GatewayBackend
from ._local import LocalBackend

__all__ = [
    "DROPPED",
    "DockerBackend",
    "GatewayBackend",
    "KernelBackend",
    "KernelMessage",
    "LocalBackend",
]
