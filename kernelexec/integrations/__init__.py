"""Drop-in code executors for agent frameworks.

Each framework has its own module, imported on demand so that kernelexec never
needs the framework installed::

    from kernelexec.integrations.autogen import KernelexecCodeExecutor  # the autogen extra
    from kernelexec.integrations.ag2 import KernelexecCodeExecutor      # the ag2-classic extra

Imported without its extra, a module raises ``ModuleNotFoundError`` naming the
extra and how to install it; an AG2 module also says which of them fits the
AG2 that is installed instead.

Function-calling agents get a tool whose calls share one kernel::

    PythonCodeExecutionTool(KernelexecCodeExecutor(...))  # AutoGen's own tool, our executor
    from kernelexec.integrations.ag2_code import KernelexecCodeEnvironment  # AG2 1.x: ag2
    from kernelexec.integrations.ag2_tools import KernelexecPythonTool      # ag2-classic
    from kernelexec.integrations.ag2_beta import KernelexecCodeEnvironment  # ag2-classic

Microsoft Agent Framework agents get a CodeAct provider, whose ``execute_code`` runs in
one kernel and whose code calls the agent's tools with ``call_tool``::

    from kernelexec.integrations.agent_framework import KernelexecCodeActProvider  # agent-framework

Both executors take an ``approval_func`` that sees the code blocks before they run and
may refuse them; it answers with a bool or an ``Approval``. The CodeAct provider's sees
each code and each tool call from it.
"""

from ._approval import Approval

__all__ = ["Approval"]
