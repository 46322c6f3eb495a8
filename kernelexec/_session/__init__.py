"""What an agent holds: ``AsyncSession`` (``_async.py``) and its sync face, ``Session``.

``Session`` (``_sync.py``) wraps ``AsyncSession``. A session owns one kernel,
one work dir and one transcript (``_transcript.py``, replayed by
``_replay.py``); ``_pool.py`` keeps kernels started ahead of time. The class
keeps the public methods; their bodies are split by concern: one execution
(``_execute.py``), the kernel's life (``_lifecycle.py``), and its state
checkpointed, restored, forked or replayed (``_state.py``). It drives an
execution through ``kernelexec._execution`` and moves state through
``kernelexec._state``; neither imports it back.
"""

__all__: list[str] = []
