"""The book's clean build for the tests, run in the background while the other tests run.

A clean build takes about 11 minutes on 2 cores, nearly all of it the narrative pages'
trainings, which run on one thread (each page sets ``torch.set_num_threads(1)``): one core
would sit idle. So ``tests/conftest.py`` starts the build as soon as pytest has collected a
test that needs the website, and moves those tests to the end of the run; the other tests
use the other core meanwhile, and the ``site`` fixture waits for the build. The pages'
trainings are bounded by steps, so what they show does not depend on the load.

Work on the built site that a test module's fixture needs (the site survey of
``tests/test_book.py``, the PDF of ``tests/test_pdf.py``) starts as soon as the build has
succeeded, in a thread of its own (:class:`AfterBuild`): after the build, the other tests
leave about a quarter of the two cores idle (grading runs wait on their kernels), which the
browser's work then uses instead of running alone at the end.

The build is the README's (``jupyter-book build . -W -n --keep-going``) into a temporary
folder; its log goes to ``test-artifacts/book-build.log`` as it runs. Its own time from
clean, against the 10-minute budget, is measured alone by
``python -m benchmarks.run --book``.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "test-artifacts" / "book-build.log"
# Shared with the rest of the suite, the build takes longer than alone: this is a hang.
TIMEOUT_S = 3600
# A short Python program that runs Jupyter Book's command line with this interpreter.
JUPYTER_BOOK = "import sys; from jupyter_book.cli.main import main; sys.exit(main())"


class BookBuild:
    """``jupyter-book build`` of this checkout into a temporary folder, started at once."""

    def __init__(self):
        self.out = Path(tempfile.mkdtemp(prefix="attention-course-book-"))
        env = dict(os.environ)
        # The narrative pages import attention_course and autograder: make sure their kernel
        # finds this checkout even where the project is not installed.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        command = [sys.executable, "-c", JUPYTER_BOOK, "build", str(ROOT)]
        command += ["--path-output", str(self.out), "-W", "-n", "--keep-going"]
        LOG.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(LOG, "w", encoding="utf-8")  # noqa: SIM115 (closed in wait and stop)
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends its kernels too
        )
        self.seconds: float | None = None

    @property
    def html(self) -> Path:
        return self.out / "_build" / "html"

    def wait(self) -> int | None:
        """The build's exit status once it is done; None when it ran past TIMEOUT_S."""
        left = TIMEOUT_S - (time.monotonic() - self.started)
        try:
            code = self.process.wait(timeout=max(left, 1.0))
        except subprocess.TimeoutExpired:
            self.stop()
            return None
        if self.seconds is None:
            self.seconds = time.monotonic() - self.started
        self._log.close()
        return code

    def then(self, work: "AfterBuild") -> None:
        """Start ``work`` in a thread of its own once this build has succeeded."""

        def watch():
            if self.wait() == 0 and (self.html / "index.html").is_file():
                work.start(self.html)

        threading.Thread(target=watch, name="after the book build", daemon=True).start()

    def log_tail(self, lines: int = 60) -> str:
        text = LOG.read_text(encoding="utf-8", errors="replace") if LOG.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Kill the build if it still runs, and remove its folder."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._log.close()
        shutil.rmtree(self.out, ignore_errors=True)


class AfterBuild:
    """``work(html)`` run once on the built site: in the build's own thread as soon as it
    has succeeded (``tests/conftest.py`` asks for it, :meth:`BookBuild.then`), or by the
    fixture that needs it, if that comes first. A test module that needs such work defines
    ``AFTER_BUILD = book_build.AfterBuild(work)`` and its fixture returns
    ``AFTER_BUILD.result(site)``: what ``work`` returned, or what it raised, raised again.

    Its results do not depend on the load: the browser's checks wait for each page's load
    and typesetting, with time limits far beyond what a busy machine needs."""

    def __init__(self, work: Callable[[Path], object]):
        self.work = work
        self._claimed = threading.Lock()
        self._future: Future = Future()
        self.ran_in: str | None = None  # the name of the thread that ran it

    def start(self, html: Path) -> bool:
        """Run ``work`` in this thread unless it was started already; whether it ran here."""
        if not self._claimed.acquire(blocking=False):
            return False
        self._future.set_running_or_notify_cancel()
        self.ran_in = threading.current_thread().name
        try:
            self._future.set_result(self.work(html))
        except BaseException as error:  # raised again in the fixture's thread
            self._future.set_exception(error)
        return True

    def result(self, html: Path):
        """What ``work`` gave: it runs now, in this thread, unless it has started already, in
        which case this waits for it."""
        self.start(html)
        return self._future.result()


_build: BookBuild | None = None


def start() -> BookBuild:
    """The session's build: started by the first call."""
    global _build
    if _build is None:
        _build = BookBuild()
    return _build


def stop() -> None:
    if _build is not None:
        _build.stop()
