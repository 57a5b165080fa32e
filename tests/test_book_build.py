"""``tests/book_build.py``'s :class:`AfterBuild`: the work on the built site that the
survey and the PDF start in the background runs once, whoever starts it, and what it
raises reaches the fixture that needs it."""

import threading
from pathlib import Path

import pytest
from book_build import AfterBuild

SITE = Path("/nonexistent/_build/html")


def test_work_started_in_the_background_runs_once_and_the_fixture_gets_its_result():
    calls, go = [], threading.Event()

    def work(html):
        go.wait(10)
        calls.append((html, threading.current_thread().name))
        return "found"

    after = AfterBuild(work)
    background = threading.Thread(target=after.start, args=(SITE,), name="background")
    background.start()
    while not after._claimed.locked():  # the background thread has claimed the work
        threading.Event().wait(0.01)
    go.set()
    assert after.result(SITE) == "found"
    background.join(10)
    assert calls == [(SITE, "background")]
    assert after.ran_in == "background"


def test_the_fixture_runs_the_work_itself_when_nothing_started_it():
    calls = []
    after = AfterBuild(lambda html: calls.append(html) or len(calls))
    assert after.result(SITE) == 1
    assert not after.start(SITE), "started a second time"
    assert after.result(SITE) == 1 and calls == [SITE]
    assert after.ran_in == threading.current_thread().name


def test_what_the_work_raised_is_raised_again_in_the_fixture():
    def work(html):
        raise RuntimeError("the survey's browser would not start")

    after = AfterBuild(work)
    threading.Thread(target=after.start, args=(SITE,)).start()
    with pytest.raises(RuntimeError, match="would not start"):
        after.result(SITE)
