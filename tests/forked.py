"""A notebook's cells run once for many variants that each change one cell, in forks.

``tests/test_mistakes.py`` runs a chapter's cells, hidden tests included, once per mistake,
each mistake changing one cell. The cells before that cell are the solution's in every run:
here they run once, and each variant's run goes on from its cell in a forked copy of the
process, which starts with everything the cells before left (the namespace, the random
generators' state, what was imported), as the same cells run afresh would leave it, and
whose changes stay in the fork. (The kit's mistakes runner, ``tests/kit_runner.py``, runs
the visible tests only, a few tenths of a second a run: there a fork, which copies the
pages of a process that has imported PyTorch as they are written, costs more than it
saves, measured on chapter 07: 11.5 s against 9.3 s.)
"""

import os
import pickle
import select
import signal
import time
from collections.abc import Callable

# What PyTorch imports on its first use of a dispatch mode (the exercises' watchers, a FLOP
# count: test cells of every chapter), about 1.5 s: imported once, before the forks, not in
# each of them (as the grader's fork server does: ``autograder/fork_server.py``).
import torch._dynamo  # noqa: F401, E402

# A chapter's run without its experiments takes seconds: a fork past this hangs.
TIMEOUT_S = 300


def in_a_fork(work: Callable[[], object], timeout_s: float = TIMEOUT_S):
    """``work()`` in a forked copy of this process; what it returned (picklable), or its
    error raised here as a ``RuntimeError``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into the caller's loop (or pytest)
        os.close(read)
        try:
            try:
                message = pickle.dumps(("done", work()))
            except BaseException as error:  # noqa: BLE001 (raised again in the parent)
                message = pickle.dumps(("error", f"{type(error).__name__}: {error}"))
            with os.fdopen(write, "wb") as pipe:
                pipe.write(message)
        finally:
            os._exit(0)
    os.close(write)
    chunks, deadline = [], time.monotonic() + timeout_s
    with os.fdopen(read, "rb") as pipe:
        while select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))[0]:
            if not (chunk := os.read(pipe.fileno(), 1 << 20)):
                break
            chunks.append(chunk)
        else:
            os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    message = b"".join(chunks)
    if not message:
        raise RuntimeError(f"a forked run died, or ran past {timeout_s} s, without an answer")
    kind, value = pickle.loads(message)
    if kind == "error":
        raise RuntimeError(f"a forked run failed: {value}")
    return value


def each_from_its_cell(
    count: int,
    changed_at: dict[str, int],
    run_cell: Callable[[int], None],
    run_rest: Callable[[int, str], object],
) -> dict[str, object]:
    """Run cells ``0 .. count - 1`` with ``run_cell(i)``, unchanged; just before cell ``i``,
    for each variant ``name`` with ``changed_at[name] == i``, ``run_rest(i, name)`` runs
    cells ``i ..`` with the variant's change, in a fork. Returns each variant's result."""
    unknown = {name: i for name, i in changed_at.items() if not 0 <= i < count}
    if unknown:
        raise ValueError(f"variants changing no cell of the run: {unknown}")
    results = {}
    for i in range(count):
        for name in (n for n, at in changed_at.items() if at == i):
            results[name] = in_a_fork(lambda i=i, name=name: run_rest(i, name))
        run_cell(i)
    return results
