"""The kernels that JupyterLab starts in ``review``: in the grading sandbox, like every other.

An instructor reviewing a class may run a submission's cells in JupyterLab (the server that
``python -m autograder review OUT`` starts: ``autograder/formgrader.py``). That is student
code: :class:`ReviewKernelManager` starts such a kernel in the sandbox that grading uses
(``autograder/sandbox.py``), with OUT hidden, the environment from the allowlist (the
gradebook's URL, which the server holds, stays out) and no chapter's grading material
(``autograder/kernel_view.py``: a kernel JupyterLab starts grades nothing). Only the server
imports this module (``formgrader.REVIEW_KERNELS`` names it): it is the one place the
grader depends on jupyter_server.
"""

from jupyter_server.services.kernels.kernelmanager import ServerKernelManager

from autograder.sandbox import SandboxedKernelManager


class ReviewKernelManager(SandboxedKernelManager, ServerKernelManager):
    """JupyterLab's kernel manager (its restarter, its activity tracking) with the kernel
    started in the sandbox, never forked from a fork server (a server's kernels share one
    chapter's view)."""

    def fork_server_for_kernels(self):  # pragma: no cover - fork_server is never set here
        raise RuntimeError("review's kernels are not forked")
