"""What an agent holds: ``AsyncSession`` (``_async.py``) and its sync face, ``Session``.

``Session`` (``_sync.py``) wraps ``AsyncSession``. A session owns one kernel,
one work dir and one transcript (``_transcript.py``, replayed by
``_replay.py``); ``_pool.py`` keeps kernels started ahead of time. It drives
one execution through ``kernelexec._execution`` and moves state through
``kernelexec._state``; neither imports it back.
"""

__all__: list[str] = []
