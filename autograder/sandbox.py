"""The sandbox every grading kernel runs in, and the limits it runs under.

``grade`` runs each submission's kernel inside bubblewrap (``bwrap``, Debian's package
``bubblewrap``), under resource limits set by ``prlimit`` (util-linux)::

    bwrap --ro-bind / / --dev /dev --proc /proc --remount-ro /proc
          --size 536870912 --tmpfs /tmp
          --ro-bind DIR DIR  (the course as the kernel imports it, the venv, the
                              interpreter, where they lie in /tmp)
          --tmpfs COURSE  --ro-bind COURSE/attention_course ... (the chapter's own
                                  material only: autograder/kernel_view.py)
          --tmpfs /run --remount-ro /run
          --tmpfs OUT --remount-ro OUT --tmpfs SUBMISSIONS --remount-ro SUBMISSIONS
          --bind SOCKETS SOCKETS --chdir /tmp
          --setenv HOME /tmp --setenv TMPDIR /tmp --setenv JPY_PARENT_PID 1
          --unshare-all --die-with-parent --cap-drop ALL
          -- prlimit --as=MEMORY --cpu=CPU:CPU+10 --fsize=536870912 --core=0
          -- python -m ipykernel_launcher -f SOCKETS/kernel.json ...

- the whole filesystem is read-only, and of the course's checkout the kernel sees only
  the student kit, the grader's code and its own chapter's grading material (its solution
  notebook, the reference modules its tests import, its catalogue of mistakes): never
  another chapter's solutions, hidden tests or reference, nor ``tests/``, ``_build/`` or
  ``.git`` (``autograder/kernel_view.py``);
- its environment is built from an allowlist (``kernel_view.kernel_environment``): no
  variable of the grader's that is not named there (a password, a gradebook's URL, a
  token) reaches it, or the fork server it is forked from;
- ``/tmp`` is a private, empty, size-limited folder in memory, and also the kernel's
  working directory and ``HOME``: what a notebook writes there is thrown away with it;
- the grader's output folder and the submissions are hidden (empty folders), so a
  notebook can neither print the hidden tests from the gradebook nor read another
  student's work; ``/run`` too, where local servers keep their sockets (a PostgreSQL
  gradebook's, say);
- no network (a network namespace of its own, with only a loopback device), no other
  process to see (a PID namespace of its own), no capabilities even when the grader
  runs as root (and ``/proc`` read-only, so no kernel setting can be written);
- the kernel talks to the grader over ZeroMQ on Unix sockets (``transport = "ipc"``), in a
  folder of its own that is bound into the sandbox, since TCP on the loopback of the
  grader's network namespace cannot be reached from the kernel's;
- ``--die-with-parent``: when the grading process dies, its kernel dies with it.

The limits, per kernel (``memory_limit()``, ``cpu_limit()``), and the output caps
(``MAX_PRINTED_CHARS``, ``MAX_OUTPUT_CHARS``) are explained where they are set below. The cell timeout is
``nbgrader_settings.CELL_TIMEOUT_S``.
"""

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer, List, Unicode

from attention_course.runtime import GRADING_ENV
from autograder.cells import grade_id
from autograder.chapters import ALL_CHAPTERS, INSTALLED_ROOT, CourseError
from autograder.fork_server import AHEAD, CACHES, CHAPTER, ForkedKernel, ForkServer
from autograder.kernel_imports import kernel_imports, kernel_python
from autograder.kernel_view import kernel_environment, view_args

# Address space (RLIMIT_AS) of a grading kernel. PyTorch reserves far more virtual memory
# than it touches: the solution kernels of the seven chapters, in grading mode on one
# thread, peak at 1.4-2.0 GB of address space (VmPeak; chapter 07 the most) for 0.4-0.85 GB
# resident (VmHWM), and each further thread reserves about 65 MB more (its stack and its
# malloc arena). 4 GiB, plus 128 MiB per thread beyond the first, leaves twice the largest
# need; a notebook that asks for more gets a MemoryError (a RuntimeError from PyTorch's
# allocator) on that allocation, instead of taking the memory of the other kernels.
MEMORY_LIMIT = 4 * 2**30
THREAD_MEMORY = 128 * 2**20

# CPU time of a grading kernel, all its threads together, for the whole notebook, per
# thread it may use: the backstop for what the cell timeout cannot stop (a loop that
# catches the interrupt). The solutions use 8-19 s of CPU in grading mode on one thread
# (up to 67 s on two, spin-waits included); past the limit the kernel gets SIGXCPU and
# dies, and the submission is not graded ("the kernel died ... SIGXCPU").
CPU_LIMIT_S = 600

# The private /tmp (also the working directory and HOME) is a tmpfs of this size: a
# notebook that writes more gets "No space left on device". No file the kernel writes
# may be larger either (RLIMIT_FSIZE), the socket folder's included.
TMP_SIZE = 512 * 2**20

# Output a cell may keep, counted as it arrives: what it prints (stdout, stderr), in
# characters, and its other outputs (figures, HTML, results), in characters of their
# JSON. The rest is dropped while the cell runs, so the grader never holds megabytes, and
# a line says so; errors are kept, shortened. The course's largest output is a figure of
# 42,000 characters; what its cells print is at most 2,100. nbgrader's LimitOutput then
# keeps at most 1000 lines of a cell's text and 100 of a traceback.
MAX_PRINTED_CHARS = 50_000
MAX_OUTPUT_CHARS = 1_000_000

# Begins the line GradingExecute logs when a notebook cannot be run to its end; ``grade``
# finds it in nbgrader's log and gives the rest of the line as the submission's status.
KERNEL_NOT_GRADED = "not graded: "

INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `sudo apt-get update && sudo apt-get install -y "
    "bubblewrap`), or grade with --no-sandbox on a machine that holds nothing else "
    "(unsafe: student code then runs with your permissions)"
)


def kernel_threads() -> int:
    """The threads a kernel started now may compute on: OMP_NUM_THREADS (``grade`` sets 1
    with more than one worker), else one per core."""
    try:
        threads = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        threads = 0
    return max(1, threads or os.cpu_count() or 1)


def memory_limit() -> int:
    """RLIMIT_AS of a kernel started now, in bytes."""
    return MEMORY_LIMIT + THREAD_MEMORY * (kernel_threads() - 1)


def cpu_limit() -> int:
    """RLIMIT_CPU of a kernel started now, in seconds."""
    return CPU_LIMIT_S * kernel_threads()


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def check_sandbox() -> None:
    """Raise ``CourseError`` with what to do when the sandbox cannot be made here."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise CourseError(
            f"grading runs each kernel in a sandbox, but bwrap is missing: {INSTALL_HINT}"
        )
    with tempfile.TemporaryDirectory() as folder:
        command = sandbox_command(["true"], folder, [])
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            result = subprocess.CompletedProcess(command, 1, "", str(error))
    if result.returncode != 0:
        raise CourseError(
            "grading runs each kernel in a sandbox, but bwrap could not make one here "
            f"({(result.stderr or '').strip() or f'exit status {result.returncode}'}); "
            "bubblewrap needs user namespaces (or root): "
            f"{INSTALL_HINT}"
        )


def _kernel_folders() -> list[str]:
    """The folders the kernel's Python reads: its prefix and ``sys.path``'s folders."""
    found = kernel_imports()
    prefixes = (sys.prefix, sys.base_prefix, sys.exec_prefix, Path(found.python).parent)
    return sorted({*found.folders(), *(str(p) for p in prefixes)})


def chapter_view(chapter: str | None) -> list[str]:
    """bwrap's arguments that leave a kernel grading ``chapter`` only its own grading
    material of the course (``autograder/kernel_view.py``)."""
    packages = [f for f in kernel_imports().packages.values() if f]
    return view_args(chapter, packages, _kernel_folders())


def _needed_under_tmp() -> list[tuple[str, str]]:
    """What the kernel must still read under /tmp once its /tmp is a private, empty one,
    as (source, destination) pairs to bind: the course (a CI checkout often lives in
    /tmp), the interpreter, the folders the grader imports from, and the folders the
    *kernel's* interpreter imports the course from (``autograder/kernel_imports.py``: an
    editable install may point elsewhere). A folder reached through a link is bound at the
    link's path from the link's target. Outermost destinations only."""
    named = {
        INSTALLED_ROOT,
        Path(sys.executable).parent,
        *(Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)),
        *(Path(p) for p in sys.path if p and Path(p).is_dir()),
        *(Path(p) for p in kernel_imports().folders()),
    }
    tmp = Path("/tmp").resolve()
    binds: dict[Path, Path] = {}  # destination -> source
    for path in named:
        path, target = Path(os.path.abspath(path)), path.resolve()
        for destination in (path, target):
            if destination != tmp and destination.is_relative_to(tmp):
                binds.setdefault(destination, target)
    outermost: list[tuple[str, str]] = []
    for destination in sorted(binds):
        if not any(destination.is_relative_to(Path(kept)) for _, kept in outermost):
            outermost.append((str(binds[destination]), str(destination)))
    return outermost


def sandbox_command(
    command: list[str],
    sockets: str,
    hidden: list[str],
    memory: int | None = None,
    cpu: int | None = None,
    tmp_size: int = TMP_SIZE,
    chapter: str | None = None,
) -> list[str]:
    """``command`` wrapped in bwrap and prlimit (see the module's docstring); ``sockets`` is
    the one folder the sandbox may write outside its private /tmp, ``hidden`` the folders
    it sees empty, ``chapter`` the chapter whose grading material it sees (None: none).
    Run it with :func:`kernel_environment`'s environment: bwrap passes its own on."""
    memory = memory_limit() if memory is None else memory
    cpu = cpu_limit() if cpu is None else cpu
    bwrap = bwrap_path() or "bwrap"
    prlimit = shutil.which("prlimit") or "prlimit"
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    args += ["--remount-ro", "/proc"]
    args += ["--size", str(tmp_size), "--tmpfs", "/tmp"]
    for source, destination in _needed_under_tmp():  # a checkout or venv in /tmp stays
        args += ["--ro-bind", source, destination]
    args += chapter_view(chapter)
    for folder in ["/run", *hidden]:  # seen empty and read-only
        if Path(folder).is_dir():
            args += ["--tmpfs", str(folder), "--remount-ro", str(folder)]
    args += ["--bind", sockets, sockets, "--chdir", "/tmp"]
    args += ["--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"]
    # ipykernel exits when its parent is not the process named here, and inside its PID
    # namespace the kernel's parent is bwrap; 1 turns that watch off (--die-with-parent
    # does its job).
    args += ["--setenv", "JPY_PARENT_PID", "1"]
    args += ["--unshare-all", "--die-with-parent", "--cap-drop", "ALL", "--"]
    # SIGXCPU at the CPU limit (the kernel dies of it), SIGKILL 10 s later if it is caught
    # and no file written larger than the private /tmp (SIGXFSZ), no core dump
    limits = [prlimit, f"--as={memory}", f"--cpu={cpu}:{cpu + 10}", f"--fsize={tmp_size}"]
    limits += ["--core=0", "--"]
    return args + limits + list(command)


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager that starts its kernel in the sandbox, talking over Unix sockets.

    With ``fork_server``, the kernel is forked from the process's fork server
    (``autograder/fork_server.py``), which runs in a sandbox made by the same command with
    the same limits and hidden folders, and has imported PyTorch already."""

    memory_limit = Integer(None, allow_none=True, config=True, help="RLIMIT_AS, bytes")
    cpu_limit = Integer(None, allow_none=True, config=True, help="RLIMIT_CPU, seconds")
    tmp_size = Integer(TMP_SIZE, config=True, help="size of the kernel's private /tmp, bytes")
    hidden = List(Unicode(), config=True, help="folders the kernel sees empty")
    fork_server = Bool(False, config=True, help="fork the kernel from the fork server")
    torch_imports_ahead = Bool(
        False, config=True, help="the fork server imports what PyTorch imports on first use"
    )
    caches_ahead = Bool(
        False, config=True, help="the fork server fills the caches every kernel would fill"
    )
    chapters_ahead = List(
        Unicode(), config=True, help="chapters whose kernels' shared work the server does ahead"
    )
    # The chapter whose notebook the kernel runs (set by GradingExecute from nbgrader's
    # assignment id): the sandbox shows it that chapter's grading material only.
    chapter = Unicode("", help="the chapter the kernel grades ('' : not known, none shown)")

    _folder: str | None = None
    _server = None

    def fork_server_for_kernels(self):
        """This process's fork server for this manager's sandbox (started when needed)."""
        memory = memory_limit() if self.memory_limit is None else self.memory_limit
        cpu = cpu_limit() if self.cpu_limit is None else self.cpu_limit
        hidden = list(self.hidden)
        # The server's own environment (what its imports read; a kernel gets the one of its
        # request), from the allowlist, as a kernel's: a forked kernel could read the
        # server's in /proc/self/environ. The variables nbgrader sets around each step
        # (NBGRADER_EXECUTION) left out, so that a worker's server started before its first
        # step serves the steps.
        environment = {
            k: v for k, v in kernel_environment(os.environ).items() if not k.startswith("NBGRADER_")
        }
        python = kernel_python()
        chapter = self.chapter or None
        ahead = [ch for ch in self.chapters_ahead if ch == chapter]  # all it may see

        def command(folder):
            server = [python, "-m", "autograder.fork_server", folder]
            server += [AHEAD] if self.torch_imports_ahead else []
            server += [CACHES] if self.caches_ahead else []
            for name in ahead:
                server += [CHAPTER, name]
            return sandbox_command(server, folder, hidden, memory, cpu, self.tmp_size, chapter)

        signature = (python, memory, cpu, self.tmp_size, tuple(hidden))
        signature += (tuple(sorted(environment.items())), chapter)
        signature += (self.torch_imports_ahead, self.caches_ahead, tuple(ahead))
        return ForkServer.get(command, signature, environment)

    async def _async_pre_start_kernel(self, **kw):
        if self._folder is None:
            if self.fork_server:
                self._server = self.fork_server_for_kernels()
                self._folder = self._server.new_folder()
            else:
                self._folder = tempfile.mkdtemp(prefix="grading-kernel-")
            self.transport = "ipc"
            self.cache_ports = False
            self.ip = os.path.join(self._folder, "kernel")
            self.connection_file = os.path.join(self._folder, "kernel.json")
        # Interrupt by a message on the control channel, which the kernel turns into a
        # SIGINT to itself: jupyter_client's default SIGINT to the process group would reach
        # bwrap, which dies of it and takes the kernel with it.
        self.kernel_spec.interrupt_mode = "message"
        command, kw = await super()._async_pre_start_kernel(**kw)
        kw["env"] = kernel_environment(kw.get("env") or os.environ)  # the allowlist only
        return command, kw

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        command = super().format_kernel_cmd(extra_arguments)
        if self._server is not None:  # the fork server runs it, in its sandbox
            return command
        return sandbox_command(
            command,
            self._folder,
            list(self.hidden),
            self.memory_limit,
            self.cpu_limit,
            self.tmp_size,
            self.chapter or None,
        )

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        if self._server is None:
            return await super()._async_launch_kernel(kernel_cmd, **kw)
        env = kw.get("env") or kernel_environment(os.environ)
        pid = self._server.start(kernel_cmd, env, self._folder)
        # the kernel's process id is the sandbox's: only the server may signal it
        self.provisioner.process = ForkedKernel(self._server, pid)
        self.provisioner.pid, self.provisioner.pgid = pid, None
        self.provisioner.cwd = "/tmp"
        self._reconcile_connection_info(self.provisioner.connection_info)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart and self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder, self._server = None, None

    # nbclient calls this one (the same method under its public name) after a kernel died
    cleanup_resources = _async_cleanup_resources


# The key of ``resources`` by which a caller that is not nbgrader (the key's run, validate)
# names the chapter of the notebook it runs.
CHAPTER_KEY = "chapter"


class GradingExecute(Execute):
    """nbgrader's Execute with the kernel in the sandbox (unless ``sandbox`` is False) and
    each cell's output capped while it runs: ``max_printed_chars`` of printed text,
    ``max_output_chars`` of other outputs.

    With ``prestart`` (grading jobs, sandboxed), once a notebook has run, the kernel of the
    next one is started at once (:class:`_Spare`): it boots and imports PyTorch while
    nbgrader saves this notebook's grades and writes its feedback page, and the next
    notebook takes it if it would have started the same kernel (same kernel spec, limits,
    hidden folders, environment). Each notebook still gets a fresh kernel of its own.

    The kernel sees the grading material of the notebook's chapter only (nbgrader's
    assignment id, or ``resources[CHAPTER_KEY]``): ``autograder/kernel_view.py``."""

    sandbox = Bool(True, config=True, help="run the kernel in the sandbox")
    prestart = Bool(False, config=True, help="start the next notebook's kernel ahead")
    # After a timed-out cell is interrupted, how long to wait for the kernel to say it is
    # idle (nbclient's default, 4 s, is short on a loaded machine: the whole notebook would
    # then fail with "Timeout waiting for IOPub output").
    iopub_timeout = Integer(20, config=True)
    max_printed_chars = Integer(MAX_PRINTED_CHARS, config=True)
    max_output_chars = Integer(MAX_OUTPUT_CHARS, config=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.sandbox:
            self.kernel_manager_class = SandboxedKernelManager
        self._kept: dict[tuple[int, bool], int] = {}  # (cell, printed?) -> characters kept
        self._cut: set[int] = set()  # cells whose output was cut
        self.chapter = ""  # the notebook's chapter: nbgrader's assignment id

    def preprocess(self, nb, resources=None, km=None):
        self._kept, self._cut = {}, set()
        # nbgrader's assignment id, else the chapter a caller of its own names
        resources = resources or {}
        named = (resources.get("nbgrader") or {}).get("assignment") or resources.get(CHAPTER_KEY)
        self.chapter = named if named in ALL_CHAPTERS else ""
        try:
            return super().preprocess(nb, resources, km)
        finally:
            if self.prestart and self.sandbox and km is None:
                _Spare.start(self)

    def create_kernel_manager(self):
        """The kernel started ahead for this notebook, when there is one, else a new one."""
        spare = _Spare.take(self) if self.prestart and self.sandbox else None
        if spare is None:
            km = super().create_kernel_manager()
            if isinstance(km, SandboxedKernelManager):
                km.chapter = self.chapter
            return km
        self.km = spare
        return spare

    def preprocess_cell(self, cell, resources, index):
        """Run a cell; when the kernel dies or cannot be interrupted, log why, and where, on
        a line that begins with ``KERNEL_NOT_GRADED`` (nbgrader then stops the notebook)."""
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            where = _cell_name(cell, index)
            self.log.error(
                "%sthe kernel died running %s (%s)", KERNEL_NOT_GRADED, where, self._death()
            )
            raise
        except CellTimeoutError:
            self.log.error(
                "%s%s ran past the cell timeout (%s s) and did not stop when interrupted",
                KERNEL_NOT_GRADED,
                _cell_name(cell, index),
                self.timeout,
            )
            raise

    def _death(self) -> str:
        """How the kernel process ended, in words."""
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        code = None if process is None else process.poll()
        if code is None:
            return "it stopped answering"
        number = -code if code < 0 else code - 128 if self.sandbox and code > 128 else 0
        if not number:
            return f"exit status {code}"
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        why = {
            "SIGSEGV": "a crash",
            "SIGBUS": "a crash",
            "SIGABRT": "it aborted",
            "SIGXCPU": "past the sandbox's CPU-time limit",
            "SIGXFSZ": "a file larger than the sandbox allows",
            "SIGKILL": "killed: out of memory, past the CPU-time limit, or by itself",
        }.get(name)
        return f"{name}: {why}" if why else name

    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        printed = msg["msg_type"] == "stream"
        limit = self.max_printed_chars if printed else self.max_output_chars
        kept = self._kept.get((cell_index, printed), 0)
        size = _size(content)
        if size <= limit - kept:
            self._kept[(cell_index, printed)] = kept + size
            return super().output(outs, msg, display_id, cell_index)
        if msg["msg_type"] == "error":  # always kept, shortened
            content["evalue"] = _shorten(content.get("evalue", ""), 2000)
            content["traceback"] = [_shorten(t, 2000) for t in content.get("traceback", [])[-50:]]
            return super().output(outs, msg, display_id, cell_index)
        out = None
        if printed and kept < limit:  # the text up to the cap
            content["text"] = content.get("text", "")[: limit - kept]
            self._kept[(cell_index, printed)] = limit
            out = super().output(outs, msg, display_id, cell_index)
        if cell_index not in self._cut:
            self._cut.add(cell_index)
            note = {
                "header": {"msg_type": "stream"},
                "msg_type": "stream",
                "parent_header": msg["parent_header"],
                "content": {
                    "name": "stderr",
                    "text": f"\n[output cut by the grader: a cell may print at most "
                    f"{self.max_printed_chars} characters and show at most "
                    f"{self.max_output_chars} characters of other output]\n",
                },
            }
            out = super().output(outs, note, None, cell_index)
        return out


# What a kernel started ahead of the notebook that takes it is started with; it is lost
# (shut down) unless the next notebook would start the same kernel.
_PRESTART_ENV = (GRADING_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# Run by a kernel started ahead before it answers: PyTorch imported (the setup cell's
# longest import, 1.5 s), no name bound in the notebook's namespace, nothing shown.
PRELOAD = "__import__('torch') and None"


class _Spare:
    """The one kernel started ahead in this process (a grading worker runs one notebook
    at a time), and what it was started with."""

    km = None
    signature: tuple | None = None

    @staticmethod
    def _signature(client: "GradingExecute") -> tuple:
        name = client.kernel_name or client.nb.metadata.get("kernelspec", {}).get("name")
        km_config = client.config.get("SandboxedKernelManager", {})
        return (
            name,
            client.chapter,
            client.kernel_manager_class,
            repr(sorted((k, repr(v)) for k, v in km_config.items())),
            memory_limit(),
            cpu_limit(),
            # nbclient adds its history file's argument as it starts a kernel
            tuple(a for a in client.extra_arguments if not a.startswith("--HistoryManager.")),
            tuple(os.environ.get(v) for v in (*_PRESTART_ENV, "PYTHONPATH")),
        )

    @classmethod
    def start(cls, client: "GradingExecute") -> None:
        """Start a kernel as ``client``'s next notebook would (without waiting for it)."""
        cls.discard()
        try:
            name = client.kernel_name or client.nb.metadata.get("kernelspec", {}).get("name")
            km = client.kernel_manager_class(kernel_name=name, config=client.config)
            km.chapter = client.chapter
            preload = f"--IPKernelApp.exec_lines={PRELOAD}"
            run_sync(km.start_kernel)(extra_arguments=[*client.extra_arguments, preload])
        except Exception as error:  # the next notebook starts its own, as without this
            client.log.warning("could not start the next kernel ahead: %s", error)
            return
        cls.km, cls.signature = km, cls._signature(client)

    @classmethod
    def take(cls, client: "GradingExecute"):
        """The spare kernel's manager, when it suits ``client``'s notebook (else None: the
        spare is shut down)."""
        km, suits = cls.km, cls.km is not None and cls.signature == cls._signature(client)
        try:
            suits = suits and run_sync(km.is_alive)()  # not one that died waiting
        except Exception:
            suits = False
        if not suits:
            cls.discard()
            return None
        cls.km, cls.signature = None, None
        return km

    @classmethod
    def discard(cls) -> None:
        km, cls.km, cls.signature = cls.km, None, None
        if km is None:
            return
        try:
            run_sync(km.shutdown_kernel)(now=True)
            run_sync(km.cleanup_resources)()
        except Exception:
            pass


atexit.register(ForkServer.close_current)  # after the spare kernel (atexit runs backwards)
atexit.register(_Spare.discard)


def _cell_name(cell, index: int) -> str:
    name = grade_id(cell)
    return f"cell {name}" if name else f"cell {index + 1} (counting from 1)"


def _size(content) -> int:
    """Characters in a message's content, roughly (text, data of every type, traceback)."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, dict):
        return sum(_size(v) for v in content.values())
    if isinstance(content, list | tuple):
        return sum(_size(v) for v in content)
    return 0


def _shorten(text: str, limit: int) -> str:
    return (
        text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"
    )


if __name__ == "__main__":  # python -m autograder.sandbox CMD...: run CMD in the sandbox
    with tempfile.TemporaryDirectory() as folder:
        sys.exit(subprocess.run(sandbox_command(sys.argv[1:], folder, [])).returncode)
