"""An LLM's message read into code blocks, run in order.

``_blocks.py`` finds the fenced blocks and runs them (``run_markdown``,
``kernelexec run`` and the AutoGen and AG2 executors share its ``run_blocks``);
``_unlabelled.py`` decides what a fence without a language is.
"""

__all__: list[str] = []
