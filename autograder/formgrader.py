"""``review``: grading by hand in nbgrader's formgrader, on a class graded into OUT.

``python -m autograder review OUT`` opens the graded class in the instructor's own tool:

- it writes ``OUT/nbgrader/nbgrader_config.py`` (:func:`write_config`), which makes
  ``OUT/nbgrader`` an nbgrader course: the course id, the gradebook, the course's feedback
  template and the sandbox for any kernel the formgrader starts. The gradebook's URL
  comes from the environment variable ``ATTENTION_COURSE_GRADEBOOK`` that the command
  sets, else from ``OUT/graded.json``: a PostgreSQL password is never written to OUT;
- it makes every notebook it will serve inert (``autograder/inert.py``), those graded
  before grading did so included;
- it starts JupyterLab, with nbgrader's formgrader extension, at ``OUT/nbgrader`` on
  127.0.0.1 (a free port, a token), with a Content-Security-Policy that lets no page of it
  connect, post a form or load an image anywhere but the server itself, and with no
  notebook trusted (JupyterLab sanitises an untrusted notebook's HTML), and every kernel
  it starts in the grading sandbox (``autograder/review_kernels.py``), and prints the URLs of JupyterLab and of the formgrader,
  whose *Manual grading* lists every submission; a flagged exercise's test cells *need a
  manual grade* there (``autograder/review.py``);
- when the server stops (Ctrl-C), the command brings OUT up to date with what was graded
  by hand (``autograder/grade.py``'s ``apply_by_hand``); ``review OUT --apply`` does only
  that, after grading in a formgrader of your own (on a JupyterHub, say).

Nothing here grades: the scores and comments given by hand live in the gradebook, and
``grade`` and ``review --apply`` read them from there.
"""

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from autograder import gradebook
from autograder.chapters import CourseError
from autograder.inert import course_text_at, make_inert_file
from autograder.job import GradingSettings, grading_config
from autograder.outfolder import LEDGER, Ledger, Out
from autograder.outside import key_cache

CONFIG_FILE = "nbgrader_config.py"
GRADEBOOK_ENV = "ATTENTION_COURSE_GRADEBOOK"  # the gradebook's URL, for the config file
# What the review server's pages may do beyond Jupyter's own policy (frame-ancestors 'self'):
# the formgrader's and JupyterLab's own scripts are inline, so scripts cannot be limited here;
# the notebooks it shows are inert (autograder/inert.py). A page may not reach another host.
CONTENT_SECURITY_POLICY = (
    "frame-ancestors 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "connect-src 'self'; img-src 'self' data: blob:"
)
# The kernel manager of every kernel JupyterLab starts in review: the sandbox's (the module is
# named, not imported: only the server imports jupyter_server).
REVIEW_KERNELS = "autograder.review_kernels.ReviewKernelManager"
START_TIMEOUT_S = 90  # JupyterLab answers within seconds; a loaded machine takes longer
STOP_TIMEOUT_S = 20

CONFIG_TEXT = '''\
"""nbgrader's configuration of this graded class, for its formgrader: written by
`python -m autograder review`, which starts JupyterLab here. The gradebook is the one the
class was graded into (ATTENTION_COURSE_GRADEBOOK, set by `review`, else OUT/graded.json)."""

from pathlib import Path

from autograder.formgrader import formgrader_config

get_config().merge(formgrader_config(Path(__file__).resolve().parent))  # noqa: F821
'''


def gradebook_url(out: Out, db: str | None) -> str:
    """The URL of the gradebook ``out`` was graded into (``db``, when given, must be it);
    a ``CourseError`` when nothing was graded into ``out``."""
    ledger = Ledger.read(out / LEDGER)
    if not ledger.path.is_file() or ledger.problem or not ledger.pairs():
        raise CourseError(
            f"nothing is graded in {out.folder}: grade first "
            f"(python -m autograder grade SUBMISSIONS --out {out.folder})"
        )
    return gradebook.of_graded(ledger.gradebook, db, out.folder)


def formgrader_config(work: Path):
    """nbgrader's configuration for the formgrader of the class in ``work``
    (``OUT/nbgrader``): read by the config file that :func:`write_config` writes there."""
    out = Out(Path(work).parent)
    url = os.environ.get(GRADEBOOK_ENV) or gradebook_url(out, None)
    hidden = (str(out.folder), str(key_cache()))
    return grading_config(GradingSettings(out, url, sandbox=True, hidden=hidden))


def write_config(out: Out) -> Path:
    """``OUT/nbgrader/nbgrader_config.py``, which makes ``OUT/nbgrader`` an nbgrader course."""
    path = out.work / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != CONFIG_TEXT:
        path.write_text(CONFIG_TEXT, encoding="utf-8")
    return path


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What a notebook that could not be made inert is renamed to: no page renders it as a
# notebook any more (JupyterLab would open it as text), and grading can make it again.
UNSERVED = ".not-served"


def make_served_inert(out: Out, log=print) -> int:
    """Make inert every notebook under ``OUT/nbgrader`` that the formgrader or JupyterLab
    may render (submitted, autograded); how many changed. A class graded before grading
    made them inert is safe to open after this. Fails closed, one notebook at a time: one
    that cannot be made inert (it cannot be read or written) is renamed (``UNSERVED``) and
    said, and the others are served."""
    changed = 0
    for step in ("submitted", "autograded"):
        for path in sorted((out.work / step).glob("*/*/*.ipynb")):
            chapter = path.parent.name
            try:
                changed += make_inert_file(path, course_text_at(out.released(chapter)))
            except Exception as error:  # never served as it is
                _unserve(path, error, log)
    return changed


def _unserve(path: Path, error: Exception, log) -> None:
    aside = path.with_name(path.name + UNSERVED)
    try:
        path.replace(aside)
        done = f"renamed to {aside.name}: not served"
    except OSError as rename:
        done = f"and it could not be renamed ({rename}): do not open it"
    log(f"warning: {path} could not be made inert ({type(error).__name__}: {error}); {done}")


class Server:
    """JupyterLab with nbgrader's formgrader at ``OUT/nbgrader``, on 127.0.0.1 with a token;
    a context manager that stops it (and its kernels) on the way out."""

    def __init__(self, out: Out, url: str, port: int | None = None, token: str | None = None):
        self.out, self.url = out, url
        self.port = port or free_port()
        self.token = token or os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(24)
        self.process: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def formgrader(self) -> str:
        """The formgrader's own pages: Manage Assignments, then Manual grading."""
        return f"{self.base}/formgrader?token={self.token}"

    @property
    def lab(self) -> str:
        """JupyterLab, whose Nbgrader menu opens the formgrader in a tab."""
        return f"{self.base}/lab?token={self.token}"

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "jupyterlab", "--no-browser"]
        command += [f"--ServerApp.root_dir={self.out.work}", "--ServerApp.ip=127.0.0.1"]
        command += [f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0"]
        command += ["--ServerApp.log_level=WARN", "--NotebookNotary.db_file=:memory:"]
        headers = {"headers": {"Content-Security-Policy": CONTENT_SECURITY_POLICY}}
        command += [f"--ServerApp.tornado_settings={headers!r}"]
        # every kernel JupyterLab starts runs in the sandbox, OUT hidden, with the
        # environment from the allowlist (autograder/review_kernels.py)
        command.append(f"--MappingKernelManager.kernel_manager_class={REVIEW_KERNELS}")
        for folder in (self.out.folder, key_cache()):
            command.append(f"--SandboxedKernelManager.hidden={folder}")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")  # a container's only user, say
        return command

    def __enter__(self) -> "Server":
        write_config(self.out)
        make_served_inert(self.out)
        env = {**os.environ, GRADEBOOK_ENV: self.url, "JUPYTER_TOKEN": self.token}
        # Its own session: a Ctrl-C reaches this process, which stops the server in order.
        self.process = subprocess.Popen(
            self.command(), cwd=self.out.work, env=env, start_new_session=True
        )
        try:
            self._wait_until_it_answers()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_until_it_answers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        status = f"{self.base}/api/status?token={self.token}"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise CourseError(
                    f"JupyterLab stopped as it started (exit status {self.process.returncode}); "
                    "its messages are above"
                )
            try:
                with urllib.request.urlopen(status, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise CourseError(f"JupyterLab did not answer on {self.base} in {START_TIMEOUT_S} s")

    def wait(self) -> None:
        """Until the server stops, or Ctrl-C (or SIGTERM) stops this process."""

        def interrupt(signum, frame):
            raise KeyboardInterrupt

        # Both set here: a process started in the background may inherit SIGINT ignored.
        previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.process.wait()
        except KeyboardInterrupt:
            pass
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def stop(self) -> None:
        """Stop the server (it stops its kernels), killing it if it does not stop in time."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
