"""Where kernels run. Each backend implements ``KernelBackend``."""

from ._base import KernelBackend, KernelMessage
from ._local import LocalBackend

__all__ = ["KernelBackend", "KernelMessage", "LocalBackend"]
