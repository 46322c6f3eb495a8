"""Drop-in code executors for agent frameworks.

Each framework has its own module, imported on demand so that kernelexec never
needs the framework installed::

    from kernelexec.integrations.autogen import KernelexecCodeExecutor  # the autogen extra
    from kernelexec.integrations.ag2 import KernelexecCodeExecutor      # the ag2 extra

Imported without its extra, a module raises ``ModuleNotFoundError`` naming the
extra and how to install it.

Function-calling agents get a tool whose calls share one kernel::

    PythonCodeExecutionTool(KernelexecCodeExecutor(...))  # AutoGen's own tool, our executor
    from kernelexec.integrations.ag2_tools import KernelexecPythonTool      # AG2 agents
    from kernelexec.integrations.ag2_beta import KernelexecCodeEnvironment  # autogen.beta

Both executors take an ``approval_func`` that sees the code blocks before they run and
may refuse them; it answers with a bool or an ``Approval``.
"""

from ._approval import Approval

__all__ = ["Approval"]
