"""Kernels forked from the fork server (autograder/fork_server.py): nothing of one
student's kernel reaches the next (files, processes, shared memory, environment, imported
modules' state, random state), the limits are a kernel's, and a kernel that kills the
server costs only its own notebook."""

import asyncio
import json
import os
from pathlib import Path

import pytest
from bwrap import require_bwrap
from traitlets.config import Config

from autograder.fork_server import ForkServer
from autograder.sandbox import SandboxedKernelManager, cpu_limit, memory_limit

LEAVE_BEHIND = r"""
import ctypes, json, os, subprocess, sys, torch
open('/tmp/left-behind', 'w').write('answers')
open('/dev/shm/left-behind', 'w').write('answers')
open(os.path.join(os.path.dirname(os.path.dirname(os.environ['CONNECTION'])), 'planted'), 'w').write('x')
os.environ['LEFT_BEHIND'] = '1'
torch.nn.functional.softmax = lambda *a, **k: 'patched'
sys.modules['json'].loads = None
libc = ctypes.CDLL(None)
libc.shmget(0x5eed, 4096, 0o1666)  # IPC_CREAT | 0666
subprocess.Popen(['sleep', '300'], start_new_session=True)
import time
for _ in range(200):  # until the child has become sleep (a busy machine is slow to exec)
    processes = [open(f'/proc/{p}/cmdline').read() for p in os.listdir('/proc') if p.isdigit()]
    if any(p.startswith('sleep') for p in processes):
        break
    time.sleep(0.05)
print(json.dumps({
    'random': torch.rand(1).item(),
    'sysv': len(open('/proc/sysvipc/shm').read().splitlines()[1:]),
    'sleeping': len([p for p in processes if p.startswith('sleep')]),
}))
"""

LOOK = r"""
import json, os, resource, torch
processes = [open(f'/proc/{p}/cmdline').read() for p in os.listdir('/proc') if p.isdigit()]
print(json.dumps({
    'tmp': os.path.exists('/tmp/left-behind'),
    'shm': os.listdir('/dev/shm'),
    'planted': os.path.exists(os.path.join(os.path.dirname(os.path.dirname(
        os.environ['CONNECTION'])), 'planted')),
    'env': os.environ.get('LEFT_BEHIND'),
    'softmax': torch.nn.functional.softmax(torch.zeros(2), dim=0).tolist(),
    'json': json.loads is not None,
    'sysv': open('/proc/sysvipc/shm').read().splitlines()[1:],
    'sleeping': [p for p in processes if p.startswith('sleep')],
    'random': torch.rand(1).item(),
    'memory': resource.getrlimit(resource.RLIMIT_AS)[0],
    'cpu': resource.getrlimit(resource.RLIMIT_CPU)[0],
    'tmp_writable': os.access('/tmp', os.W_OK),
}))
"""


async def _run(
    code: str,
    forked: bool = True,
    shown: list | None = None,
    ahead=False,
    caches=False,
    errors: list | None = None,
    chapters=(),
    chapter: str = "",
):
    """``code`` in a new forked kernel (or, not ``forked``, one started anew; ``ahead``:
    from a server that imported torch._dynamo; ``caches``: one that filled the kernels'
    caches; ``chapters``: one that did those chapters' kernels' shared work, of which it
    serves ``chapter``'s): the JSON it printed (None if it died) and the kernel's exit code (None while it
    runs); the kinds of data it displayed go to ``shown``, the tracebacks of its errors to
    ``errors`` (without it, an error fails the test)."""
    config = Config()
    config.SandboxedKernelManager.fork_server = forked
    config.SandboxedKernelManager.torch_imports_ahead = ahead
    config.SandboxedKernelManager.caches_ahead = caches
    config.SandboxedKernelManager.chapters_ahead = list(chapters)
    km = SandboxedKernelManager(kernel_name="python3", config=config)
    km.chapter = chapter
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    printed = []
    try:
        await kc.wait_for_ready(timeout=60)
        code = f"import os; os.environ['CONNECTION'] = {km.connection_file!r}\n" + code

        def hook(msg):
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])
            elif msg["msg_type"] == "display_data" and shown is not None:
                shown.extend(sorted(msg["content"]["data"]))
            elif msg["msg_type"] == "error" and errors is not None:
                errors.append(msg["content"]["traceback"])
            elif msg["msg_type"] == "error":
                raise AssertionError("\n".join(msg["content"]["traceback"]))

        try:
            await kc.execute_interactive(code, timeout=120, output_hook=hook)
        except TimeoutError:
            pass
        await asyncio.sleep(0.2)
        status = km.provisioner.process.poll()
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
        await km.cleanup_resources()
    text = "".join(printed).strip()
    return (json.loads(text.splitlines()[-1]) if text else None), status


def run(code: str, **options):
    return asyncio.run(_run(code, **options))


@pytest.fixture(scope="module")
def two_kernels():
    require_bwrap()
    ForkServer.close_current()
    first, _ = run(LEAVE_BEHIND)
    second, _ = run(LOOK)
    yield first, second
    ForkServer.close_current()


def test_the_next_kernel_finds_nothing_the_last_one_left(two_kernels):
    first, second = two_kernels
    assert first is not None and second is not None
    assert first["sysv"] == 1 and first["sleeping"] == 1  # what it left was there
    assert not second["tmp"] and second["shm"] == [] and not second["planted"]
    assert second["sleeping"] == [] and second["sysv"] == []
    assert second["env"] is None and second["json"]
    assert second["softmax"] == [0.5, 0.5]  # PyTorch as imported, not as patched
    assert second["random"] != first["random"]  # seeded afresh, as a new process
    assert second["tmp_writable"]


def test_a_forked_kernel_has_a_kernels_limits(two_kernels):
    _, second = two_kernels
    assert second["memory"] == memory_limit() and second["cpu"] == cpu_limit()


def test_a_kernel_that_kills_the_server_ends_itself_only():
    require_bwrap()
    ForkServer.close_current()
    printed, status = run("import os, signal; os.kill(os.getppid(), signal.SIGKILL)")
    assert printed is None and status is not None and status < 0  # the kernel died too
    after, _ = run(LOOK)  # a new server for the next kernel
    assert after is not None and after["softmax"] == [0.5, 0.5]
    ForkServer.close_current()


def test_a_kernel_cannot_read_the_servers_memory():
    require_bwrap()
    ForkServer.close_current()
    printed, _ = run(
        "import json, os\n"
        "try:\n"
        "    open(f'/proc/{os.getppid()}/mem', 'rb').read(1); got = 'read'\n"
        "except OSError as error:\n"
        "    got = type(error).__name__\n"
        "print(json.dumps({'mem': got}))"
    )
    assert printed == {"mem": "PermissionError"}
    ForkServer.close_current()


def test_a_figure_shows_as_in_a_kernel_started_anew():
    """matplotlib's core is imported in the server: the kernel's backend, the figure it
    shows and the fonts it finds are a new kernel's."""
    require_bwrap()
    code = (
        "import json, matplotlib, matplotlib.pyplot as plt\n"
        "from matplotlib import font_manager\n"
        "plt.plot([1, 2]); plt.show()\n"
        "print(json.dumps({'backend': matplotlib.get_backend(),\n"
        "                  'fonts': len(font_manager.fontManager.ttflist)}))"
    )
    results = {}
    for forked in (True, False):
        shown = []
        printed, _ = run(code, forked=forked, shown=shown)
        results[forked] = (printed, shown)
    ForkServer.close_current()
    assert results[True] == results[False]
    assert "image/png" in results[True][1] and "inline" in results[True][0]["backend"]


# What the exercise watchers do (attention_course/watch.py): a tensor detached under a
# dispatch mode, which makes PyTorch import torch._dynamo on first use.
FIRST_USE = r"""
import json, sys, time, torch
from torch.utils._python_dispatch import TorchDispatchMode

class Watch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

before = 'torch._dynamo' in sys.modules
start = time.process_time()
with Watch():
    torch.ones(2).detach()
print(json.dumps({'before': before, 'after': 'torch._dynamo' in sys.modules,
                  'threads': torch.get_num_threads(),
                  'cpu_s': time.process_time() - start}))
"""


def test_a_kernel_forked_with_torch_imports_ahead_finds_them_imported():
    """With ``torch-imports-ahead`` the first use costs no import, and the kernel's thread
    pool is as a new kernel's; without it the kernel imports them itself, as before."""
    require_bwrap()
    results = {}
    for ahead in (True, False):
        ForkServer.close_current()
        results[ahead], _ = run(FIRST_USE, ahead=ahead)
    ForkServer.close_current()
    anew, _ = run(FIRST_USE, forked=False)
    assert results[True]["before"] and results[True]["after"]
    assert not results[False]["before"] and results[False]["after"]
    assert results[True]["threads"] == results[False]["threads"] == anew["threads"]
    assert results[True]["cpu_s"] < results[False]["cpu_s"]


# A cell that fails as an untouched exercise does, after saying what is cached already.
FILLED_THEN_FAILING = r"""
import inspect, json
from pygments.lexers.python import PythonLexer
print(json.dumps({'files': len(inspect.modulesbyfile), 'lexer': '_tokens' in vars(PythonLexer)}))

def attention(Q, K, V):
    raise NotImplementedError("fill in attention")

attention(1, 2, 3)
"""


def test_a_kernel_forked_with_caches_ahead_finds_them_filled_and_fails_as_a_new_kernel():
    """With ``caches-ahead`` the kernel starts with inspect's map of module files and
    pygments' compiled lexer; the traceback of a failing cell is, to the character, the one
    a kernel forked without them and one started anew show."""
    require_bwrap()
    results, tracebacks = {}, {}
    for kind, options in (
        ("caches", {"caches": True}),
        ("forked", {}),
        ("anew", {"forked": False}),
    ):
        ForkServer.close_current()
        errors = []
        results[kind], _ = run(FILLED_THEN_FAILING, errors=errors, **options)
        tracebacks[kind] = errors
    ForkServer.close_current()
    assert results["caches"]["lexer"] and not results["forked"]["lexer"]
    # PyTorch's own import maps the modules imported before it; the server maps them all
    assert results["caches"]["files"] > results["forked"]["files"] + 300
    assert len(tracebacks["caches"]) == 1 and "fill in attention" in tracebacks["caches"][0][-1]
    assert tracebacks["caches"] == tracebacks["forked"] == tracebacks["anew"]


def test_a_server_started_before_nbgraders_step_serves_its_kernels(monkeypatch):
    """A worker starts its server before its first job (``job.warm_up``); nbgrader's
    autograde then sets NBGRADER_EXECUTION, which must not start a second server (a
    kernel's environment is its request's, not the server's)."""
    require_bwrap()
    ForkServer.close_current()
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    config = Config()
    config.SandboxedKernelManager.fork_server = True
    first = SandboxedKernelManager(config=config).fork_server_for_kernels()
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert SandboxedKernelManager(config=config).fork_server_for_kernels() is first
    monkeypatch.setenv("MPLBACKEND", "agg")  # what the server's imports read: a new server
    assert SandboxedKernelManager(config=config).fork_server_for_kernels() is not first
    ForkServer.close_current()


# What a chapter-01 kernel finds done ahead; then it spoils it all for the next kernel.
SPOIL_THE_WARM_UP = r"""
import json, sys
imported = 'num2words' in sys.modules
from attention_course import recorded
from attention_course.data import numbers
found = {
    'read_ahead': sorted(p.name for p in recorded._READ_AHEAD),
    'number_words': numbers._tokens.cache_info().currsize,
    'num2words': imported,
    'entry_points': recorded.instructor_entry.cache_info().currsize,
}
recorded._READ_AHEAD.clear()
recorded.instructor_entry.cache_clear()
numbers._tokens.cache_clear()
numbers.num2words = lambda *a, **k: 'spoiled'
print(json.dumps(found))
"""


def test_a_kernel_forked_with_its_chapter_ahead_finds_its_work_done_and_cannot_spoil_it():
    """With ``chapters-ahead`` a chapter-01 kernel starts with the chapter's recorded values
    read, the instructor's entry points looked up, num2words imported and the data set's
    number words in their cache; what one
    kernel does to them the next one does not see. Without it, nothing of it is done. A
    server serves one chapter's kernels and warms up that chapter only, of the run's."""
    require_bwrap()
    ForkServer.close_current()
    run_chapters = ["01_rnn_bottleneck", "07_spatial_transformer"]
    first, _ = run(SPOIL_THE_WARM_UP, chapters=run_chapters, chapter="01_rnn_bottleneck")
    second, _ = run(SPOIL_THE_WARM_UP, chapters=run_chapters, chapter="01_rnn_bottleneck")
    ForkServer.close_current()
    plain, _ = run(SPOIL_THE_WARM_UP)
    ForkServer.close_current()
    assert first == second
    assert first["read_ahead"] == ["01_rnn_bottleneck.pt"] and first["num2words"]
    assert first["number_words"] > 3000  # the data set's numbers, in English and German
    assert first["entry_points"] == 2  # the reference and the diagnosis, looked up
    assert plain == {"read_ahead": [], "number_words": 0, "num2words": False, "entry_points": 0}


def test_a_killed_grading_processs_socket_folder_is_removed_by_the_next_server(
    tmp_path, monkeypatch
):
    """A server's socket folder is named by its grading process; a process killed before it
    closed its server leaves its folder, which the next server's start removes (not the
    folder of a process still running)."""
    import subprocess
    import tempfile

    from autograder.fork_server import FOLDER_PREFIX, _new_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.Popen(["true"])
    ended.wait()
    left = tmp_path / f"{FOLDER_PREFIX}{ended.pid}-abc"
    running = tmp_path / f"{FOLDER_PREFIX}{os.getppid()}-def"
    other = tmp_path / f"{FOLDER_PREFIX}made_by_an_older_grader"
    for folder in (left, running, other):
        (folder / "kernel-1").mkdir(parents=True)
    new = Path(_new_folder())
    assert not left.exists() and running.is_dir() and other.is_dir()
    assert new.parent == tmp_path and new.name.startswith(f"{FOLDER_PREFIX}{os.getpid()}-")


def test_the_grading_processes_do_not_import_pytorch():
    """The grader and its workers import nbgrader and the sandbox, not PyTorch (over a
    second of a run's start, per process): only the fork server and the kernels need it.
    What names the kernels' environment (autograder/kernel_view.py) reads its variables'
    names from attention_course.runtime, not from modules that import PyTorch."""
    import subprocess
    import sys

    probe = "import sys, autograder.grade, autograder.job; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stdout + result.stderr
