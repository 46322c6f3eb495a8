"""One execution, from the code sent to the ``ExecutionResult`` returned.

``_run.py`` drives it against a backend (deadlines, interrupts, stdin, a kernel
that dies); ``_reducer.py`` folds the kernel's messages into outputs, with no
I/O; ``_assemble.py`` turns those into an ``ExecutionResult`` (``_models.py``),
saving rich outputs (``_artifacts.py``) and reading tables and charts
(``_data.py``); ``_render.py`` writes its ``text`` for an LLM and ``_live.py``
the outputs seen as they happen; ``_background.py`` runs an execution as a task
of its own. Modules import what they need from each other by module; this
package re-exports nothing.
"""

__all__: list[str] = []
