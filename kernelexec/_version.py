"""kernelexec's version, in a module of its own.

The package's ``__init__`` imports every room, so a module that needs the
version (a checkpoint's manifest, a tracer's name, the server's health answer)
reads it here rather than from the package, which would import it back.
pyproject.toml reads it here too, without importing kernelexec.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
