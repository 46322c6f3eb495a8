"""A kernel's state, taken out and put back: variables, checkpoints, restores, forks.

These work on a backend and a work dir, never on a session: the session
(``_session/_state.py``) holds its lock and transcript and calls them.
``_variables.py`` lists the namespace without a cell; ``_checkpoint.py`` takes
a checkpoint, ``_manifest.py`` is its format, read back and checked, and
``_kernel_calls.py`` runs the kernel's side of both; ``_restore.py`` loads one
into a kernel; ``_fork.py`` is a fork's report and its copy of the work dir;
``_disk.py`` holds all of them to a disk budget.
"""

__all__: list[str] = []
