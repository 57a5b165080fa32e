"""Grading kernels forked from a process that has already imported PyTorch.

A grading kernel spends most of its start importing PyTorch and IPython (about 1.5 s of
CPU, more than the graded cells of most chapters). A **fork server** pays that once per
grading worker: one process, started in the same sandbox as a kernel
(``autograder/sandbox.py``: bubblewrap, the same limits, the same folders hidden), imports
them and then forks a new process for each submission's kernel. The kernel is still a
process of its own, in a sandbox with the limits a kernel always had (resource limits are
per process and start from zero in a forked process), and it starts from the server's
untouched memory: no student code ever runs in the server.

What one kernel could leave for the next is removed before the next is forked, by the
server, which runs as the same user inside the same sandbox:

- every other process of the sandbox is killed (``kill(-1)``: all but the sandbox's init
  and the server), so nothing a kernel started lives on;
- the sandbox's private ``/tmp`` (also ``HOME`` and the working directory) and ``/dev/shm``
  are emptied, and so is the socket folder, all but the new kernel's connection folder;
- System V shared memory, semaphores and message queues (the sandbox has its own IPC
  namespace) are removed;
- the server cannot be traced or read through ``/proc`` by a kernel (it is not
  dumpable), a kernel's standard streams are ``/dev/null`` and it inherits no other file
  of the server, so it cannot write to the grader's control pipe;
- the environment is the one the kernel manager gives, and the random generators (Python,
  NumPy, PyTorch) are seeded afresh from the operating system, as in a new process.

The protocol, one JSON object a line: the grader writes ``{"start": {"argv", "env",
"keep"}}`` (``argv`` the kernel's command, ``python -m ipykernel_launcher -f ...``) and
``{"signal": [pid, signum]}``; the server answers ``{"ready": true}`` once, then
``{"started": pid}`` and ``{"exited": pid, "status": code}`` (``code`` as ``Popen``'s
``returncode``: negative for a signal). Process ids are the sandbox's own: the grader
never signals them itself, it asks the server.

The grader's side is :class:`ForkServer` (one per worker process and sandbox settings)
and :class:`ForkedKernel`, which stands for the kernel's process where jupyter_client
expects a ``Popen``.
"""

import ctypes
import json
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
IPC_RMID = 0
SYSV = (("shm", "shmctl"), ("sem", "semctl"), ("msg", "msgctl"))
# What the server imports before it forks: what every grading kernel imports first, PyTorch,
# IPython's kernel and matplotlib's core (its font list among them, which a kernel with an
# empty HOME would otherwise build afresh). Not pyplot, whose backend must be set up in the
# kernel's own shell, nor the course's packages: tqdm.auto, which they import, picks its
# kind of progress bar by whether it runs in a kernel.
PRELOAD = ("torch", "ipykernel.kernelapp", "matplotlib", "matplotlib.font_manager",
           "matplotlib.figure")  # fmt: skip
# What ipykernel sets when the environment names no backend (ipykernel/kernelapp.py):
# matplotlib reads MPLBACKEND as it is imported.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
# What PyTorch imports only when first needed, with the server's switch (``torch-imports-
# ahead``): torch._dynamo, and with it torch.fx and SymPy, about 2 s of CPU, which every
# chapter's graded cells reach (a tensor detached under a dispatch mode, as the exercise
# watchers do; nn.MultiheadAttention's mask check). Imports only: nothing is computed, so
# PyTorch's thread pool is not started before a fork.
IMPORTED_ON_FIRST_USE = ("torch._dynamo",)
AHEAD = "--torch-imports-ahead"
CACHES = "--caches-ahead"
CHAPTER = "--chapter"  # a chapter whose kernels' shared work is done ahead (chapters-ahead)
READY_TIMEOUT_S = 120
FOLDER_PREFIX = "grading-kernels-"  # then the grading process's id: grading-kernels-<pid>-...


# ------------------------------------------------------------------ the server (sandboxed)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount_points() -> set[Path]:
    """Every mount point of this process's mount namespace (the sandbox's binds under /tmp
    among them: a checkout or virtual environment that lives there, read-only)."""
    points = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        field = line.split()[4]
        points.add(Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)))
    return points


def _empty(folder: Path, mounts: set[Path], keep: Path | None = None) -> None:
    """Remove everything in ``folder`` but ``keep``, the mount points in it and the folders
    on the way to them (whose other entries go). A folder a kernel made read-only or
    unreadable is opened up first: the server owns what the kernels wrote."""
    if not folder.is_dir() or folder.is_symlink():
        return
    for entry in list(folder.iterdir()):
        if entry == keep or entry in mounts:
            continue
        if any(m.is_relative_to(entry) for m in mounts):
            _empty(entry, mounts, keep)
        elif entry.is_dir() and not entry.is_symlink():
            for root, dirs, _ in os.walk(entry):
                for name in dirs:
                    _open_up(os.path.join(root, name))
            _open_up(entry)
            shutil.rmtree(entry, ignore_errors=True)
        else:
            try:
                entry.unlink(missing_ok=True)
            except OSError:
                pass


def _open_up(path) -> None:
    try:
        if not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
    except OSError:
        pass


def _remove_sysv_ipc(libc) -> None:
    """Remove every System V shared memory segment, semaphore set and message queue of
    the sandbox's IPC namespace."""
    for kind, control in SYSV:
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            ident = int(line.split()[1])
            if kind == "sem":
                getattr(libc, control)(ident, 0, IPC_RMID)
            else:
                getattr(libc, control)(ident, IPC_RMID, None)


def _clean(sockets: Path, keep: Path, children: set[int]) -> None:
    """Leave nothing of the kernels before: see the module's docstring."""
    try:
        os.kill(-1, signal.SIGKILL)  # every process we may signal but ourselves and init
    except ProcessLookupError:
        pass
    for pid in list(children):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        children.discard(pid)
    mounts = _mount_points()
    for folder in (Path("/tmp"), Path("/dev/shm")):
        _empty(folder, mounts)
    _empty(sockets, mounts, keep)
    _remove_sysv_ipc(_libc())


def _become_kernel(request: dict) -> None:
    """In the forked process: drop what belongs to the server and run the kernel."""
    try:
        os.setsid()
        libc = _libc()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with the server
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a kernel started anew
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir("/tmp")
        os.environ.clear()
        os.environ.update(request["env"])
        import random

        import numpy
        import torch

        random.seed()
        numpy.random.seed()
        torch.seed()
        import matplotlib

        matplotlib.rcParams["backend"] = os.environ.get("MPLBACKEND") or INLINE_BACKEND
        threads = os.environ.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:
            torch.set_num_threads(int(threads))
        argv = request["argv"]
        where = argv.index("ipykernel_launcher") if "ipykernel_launcher" in argv else 2
        sys.argv = ["ipykernel_launcher", *argv[where + 1 :]]
        from ipykernel import kernelapp

        kernelapp.launch_new_instance()
    finally:
        os._exit(0)


def _fill_caches() -> None:
    """Compute once, before the first fork, what every kernel otherwise computes for itself
    as it starts and at its first traceback (``--caches-ahead``), all of it the same in
    every kernel and none of it state a kernel's code set:

    - ipykernel's debugger module, which imports debugpy (130 modules) as the kernel starts;
    - a traceback formatted as IPython formats a failing cell's (``AutoFormattedTB``, the
      kernel's mode): on its way, ``inspect``'s map from file names to the modules
      imported so far (a ``stat`` of every one of PyTorch's thousands of modules),
      pygments' Python lexer and terminal formatter, and the compiled regular
      expressions of both (``re``'s own cache).

    Nothing of it is kept but caches keyed by module, file or pattern; the traceback's code
    is a string of this function, in no file."""
    import linecache

    from IPython.core.ultratb import AutoFormattedTB

    null, stderr = os.open(os.devnull, os.O_WRONLY), os.dup(2)
    os.dup2(null, 2)  # debugpy warns on stderr that Python's frozen modules hide breakpoints
    try:
        import ipykernel.debugger  # noqa: F401
    finally:
        os.dup2(stderr, 2)
        os.close(null)
        os.close(stderr)
    name = "<the fork server's warm-up>"
    source = "def fail():\n    raise ValueError('warm-up')\n\n\nfail()\n"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    try:
        exec(compile(source, name, "exec"), {})
    except ValueError as error:
        AutoFormattedTB(mode="Context").structured_traceback(
            type(error), error, error.__traceback__
        )
    finally:
        linecache.cache.pop(name, None)


def serve(
    sockets: str, imports_ahead: bool = False, caches_ahead: bool = False, chapters=()
) -> None:
    """The server's loop (``python -m autograder.fork_server SOCKETS [--torch-imports-
    ahead] [--caches-ahead] [--chapter CH ...]``, in the sandbox); with ``imports_ahead`` it
    also imports what PyTorch would import on first use (``IMPORTED_ON_FIRST_USE``), with
    ``caches_ahead`` it fills what every kernel would (:func:`_fill_caches`), and for each
    of ``chapters`` it does what each of the chapter's kernels would do alike
    (``autograder/kernel_warmup.py``)."""
    os.environ["MPLBACKEND"] = os.environ.get("MPLBACKEND") or INLINE_BACKEND
    for name in PRELOAD + (IMPORTED_ON_FIRST_USE if imports_ahead else ()):
        __import__(name)
    if caches_ahead:
        _fill_caches()
    if chapters:
        from autograder.kernel_warmup import prepare

        prepare(chapters)
    libc = _libc()
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    folder, children, buffer = Path(sockets), set(), b""

    def say(message: dict) -> None:
        os.write(1, (json.dumps(message) + "\n").encode())

    say({"ready": True})
    while True:
        for pid in list(children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                children.discard(pid)
                continue
            if done:
                children.discard(pid)
                say({"exited": pid, "status": os.waitstatus_to_exitcode(status)})
        readable, _, _ = select.select([0], [], [], 0.05)
        if not readable:
            continue
        data = os.read(0, 1 << 16)
        if not data:  # the grader is gone
            _clean(folder, folder, children)
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            if "start" in request:
                start = request["start"]
                for pid in list(children):  # a kernel not yet reported: report it first
                    children.discard(pid)
                    try:
                        os.kill(pid, signal.SIGKILL)
                        _, status = os.waitpid(pid, 0)
                        say({"exited": pid, "status": os.waitstatus_to_exitcode(status)})
                    except (ProcessLookupError, ChildProcessError):
                        say({"exited": pid, "status": -signal.SIGKILL})
                _clean(folder, Path(start["keep"]), children)
                pid = os.fork()
                if pid == 0:
                    _become_kernel(start)
                children.add(pid)
                say({"started": pid})
            elif "signal" in request:
                pid, signum = request["signal"]
                if pid in children:  # only its own kernels, and their process groups
                    try:
                        os.killpg(pid, signum)
                    except ProcessLookupError:
                        pass


# ------------------------------------------------------------------ the grader's side


class ForkServerError(RuntimeError):
    pass


class ForkServer:
    """The fork server of this grading process for one sandbox's settings: started on
    first use, started again when it died (a kernel may kill it) or the settings changed."""

    _current: "ForkServer | None" = None

    @classmethod
    def get(cls, command_for, signature: tuple, env: dict[str, str] | None = None) -> "ForkServer":
        """The running server for ``signature``, else a new one; ``command_for(folder)`` is
        the sandboxed command of a server whose socket folder is ``folder``, ``env`` its
        environment (default: this process's)."""
        server = cls._current
        if server is not None and (server.signature != signature or not server.alive()):
            server.close()
            server = None
        if server is None:
            server = cls(command_for, signature, env)
            cls._current = server
        return server

    @classmethod
    def close_current(cls) -> None:
        if cls._current is not None:
            cls._current.close()
            cls._current = None

    def __init__(self, command_for, signature: tuple, env: dict[str, str] | None = None):
        self.signature = signature
        self.folder = _new_folder()
        command = command_for(self.folder)
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
        os.set_blocking(self.process.stdout.fileno(), False)
        self._buffer, self._exited, self._kernels = b"", {}, 0
        message = self._next(lambda m: "ready" in m, READY_TIMEOUT_S)
        if message is None:
            self.close()
            raise ForkServerError("the grading kernels' fork server did not start")

    def alive(self) -> bool:
        return self.process.poll() is None

    def new_folder(self) -> str:
        """A folder for the next kernel's connection file and sockets, in the server's."""
        self._kernels += 1
        folder = Path(self.folder) / f"kernel-{self._kernels}"
        folder.mkdir()
        return str(folder)

    def start(self, argv: list[str], env: dict[str, str], keep: str) -> int:
        """Fork a kernel running ``argv`` with ``env``; its process id in the sandbox."""
        self._send({"start": {"argv": list(argv), "env": dict(env), "keep": keep}})
        message = self._next(lambda m: "started" in m, READY_TIMEOUT_S)
        if message is None:
            raise ForkServerError("the fork server did not start the kernel")
        return message["started"]

    def signal(self, pid: int, signum: int) -> None:
        if self.alive():
            self._send({"signal": [pid, int(signum)]})

    def status(self, pid: int) -> int | None:
        """The kernel's exit code once it has ended (killed, when the server died), else
        None."""
        self._read()
        if pid in self._exited:
            return self._exited[pid]
        if not self.alive():
            self._read()
            return self._exited.get(pid, -signal.SIGKILL)
        return None

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()  # the server cleans up and exits
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _send(self, message: dict) -> None:
        try:
            self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.flush()
        except OSError as error:
            raise ForkServerError(f"the fork server is gone ({error})") from error

    def _read(self) -> list[dict]:
        messages = []
        try:
            while chunk := self.process.stdout.read(1 << 16):
                self._buffer += chunk
        except (BlockingIOError, ValueError):
            pass
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if "exited" in message:
                self._exited[message["exited"]] = message["status"]
            messages.append(message)
        return messages

    def _next(self, wanted, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        pending: list[dict] = []
        while time.monotonic() < deadline:
            pending += self._read()
            for message in pending:
                if wanted(message):
                    return message
            pending.clear()
            if not self.alive():
                return None
            select.select([self.process.stdout], [], [], 0.05)
        return None


def _new_folder() -> str:
    """A new folder for a server's sockets, named by this grading process, once the folders
    of grading processes that have ended without removing theirs (killed: a server's folder
    is removed as the server is closed) are removed."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*"):
        owner = folder.name[len(FOLDER_PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not _running(int(owner)):
            shutil.rmtree(folder, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


class ForkedKernel:
    """A forked kernel, where jupyter_client's local provisioner expects a ``Popen``."""

    stdin = stdout = stderr = None

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid, self.returncode = server, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            self.server.signal(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _chapters(options: list[str]) -> list[str]:
    """The values of ``--chapter CH`` among the server's options."""
    return [options[i + 1] for i, o in enumerate(options[:-1]) if o == CHAPTER]


if __name__ == "__main__":
    options = sys.argv[2:]
    serve(sys.argv[1], AHEAD in options, CACHES in options, _chapters(options))
