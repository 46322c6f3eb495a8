"""The audit log: one JSON line per state-changing request and per execution.

``_fields.py`` is what a line may hold: a closed list of fields, checked on
the way in, so that code, outputs and tokens can never be logged by
mistake (``code_fields`` stands for code: its SHA-256 and size;
``execution_line`` is an execution's line, the same from every door).
``_log.py`` is ``AuditLog``, the writer: ``record`` returns at once, one
thread appends each line whole under a lock that other processes sharing
the file take too, and rotates the file by size. ``_read.py`` reads a log
and its rotated files back, oldest first, for ``kernelexec audit``. The
doors (``_server``, ``_mcp``) record; this package uses nothing of theirs.
"""

from ._fields import FIELDS, KINDS, code_fields, execution_line
from ._log import AuditLog

__all__ = ["FIELDS", "KINDS", "AuditLog", "code_fields", "execution_line"]
