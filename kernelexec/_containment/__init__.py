"""What keeps a kernel from reaching past it, on our side of the process boundary.

``_secrecy.py`` keeps this process's secrets from the kernels it starts
(non-dumpable, credentials starred out of the command line). The kernel's own
side is ``_kernel/guard.py`` (capabilities dropped, a supervisor that ends the
tree). A sandbox for local kernels belongs here too. Light on purpose:
``kernelexec/__init__.py`` imports ``_secrecy`` before anything slow.
"""

__all__: list[str] = []
