"""What keeps a kernel from reaching past it, on our side of the process boundary.

``_secrecy.py`` keeps this process's secrets from the kernels it starts
(non-dumpable, credentials starred out of the command line). A local kernel's
containment (``kernelexec.Sandbox``): ``_sandbox.py`` the policy,
``_platform.py`` whether this machine can contain a kernel and the policy a
caller's ``sandbox=`` means, ``_start.py`` one contained start's policy and
private dirs, ``_cgroups.py`` its memory and process limits, ``_hints.py`` the
note that names the option allowing what the containment refused. The kernel's
own side is ``_kernel/guard.py`` (a supervisor that ends the tree) and
``_kernel/contain.py`` (namespaces, mounts, Landlock, seccomp, limits). Light
on purpose: ``kernelexec/__init__.py`` imports ``_secrecy`` before anything
slow.
"""

__all__: list[str] = []
