"""Virtual environments made for a kernel (``packages=``, ``venv=``, ``python_version=``).

``_venv.py`` makes or finds one, cached by its inputs; ``_installer.py``
installs into it with uv or pip and says why an install failed.
"""

__all__: list[str] = []
