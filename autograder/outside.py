"""The verdict taken outside the student's kernel (issue 11).

A student's code runs in the same kernel as the tests, so it can rebind what the tests
call (``torch.allclose``, the course's ``check_close``) or install an exception handler that
swallows failures, and a failing test cell then looks passed to nbgrader. The scan
(``autograder/scan.py``) flags the plain forms of this; a form built at run time escapes it.

So the hidden tests hand values out: after checking a value computed from inputs the test
made itself (seeded generators), a test calls ``hand_out(value, name)``
(``attention_course/handout.py``), which in grading mode puts a *sketch* of the value in the
cell's outputs. This module takes the verdict in the grader's own process, which the
student's code never touched:

- the **key**: the chapter's solution notebook, run once in grading mode in the same
  sandbox and with the same settings as a student's kernel (one thread), and the sketches
  each graded test cell handed out, in order. Cached as JSON under
  ``$ATTENTION_COURSE_KEY_CACHE`` (default ``~/.cache/attention-course/keys``), one file per
  (solution notebook, PyTorch version, Python version, handout protocol), and copied to
  ``OUT/keys/<chapter>.json`` for the instructor to read;
- ``verify``: each test cell that earned points and has sketches in the key must have handed
  out as many sketches, each like the key's: the same kind, shape, dtype (any floating
  dtype matches another here: ``check_close`` checks the dtype in the kernel where the
  exercise states one, and a float32 result of a float64 exercise differs from the key's
  values by more than a float64 key's tolerance), NaN and inf
  counts, the same bool or number within tolerance, and for a tensor each projection
  within what ``check_close``'s rule allows (see ``handout.py``), with the *key's* atol and
  rtol. Otherwise the cell's points become 0, with the status
  ``failed outside the kernel: <what differed>``.

The outputs are student-controlled: they are read as JSON only (never pickle or
``torch.load``), every field is checked for its type, and a malformed sketch is a
difference, never a crash. The check only takes points away: a cell that failed in the
kernel stays failed.
"""

import dataclasses
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import tempfile
import time
from functools import lru_cache
from pathlib import Path

import nbformat

from attention_course import handout
from attention_course.handout import MIME_TYPE, PROJECTIONS
from autograder.cells import cells_of, grade_id, is_graded
from autograder.chapters import INSTALLED_ROOT, CourseError, solution_path
from autograder.environment import KERNEL_ENV, environment
from autograder.experiments import skip_marked
from autograder.files import file_hash, write_atomically
from autograder.outfolder import GRADED, LEDGER, GradeRow, Ledger, Out
from autograder.sandbox import CHAPTER_KEY, GradingExecute

KEY_CACHE_ENV = "ATTENTION_COURSE_KEY_CACHE"
DEFAULT_KEY_CACHE = "~/.cache/attention-course/keys"
FAILED = "failed outside the kernel: "

# Beyond the tolerance: the key's value and the reference a test compares with differ by
# float32 rounding (about 1e-7 relative); 1e-6 of a_j covers it many times over and is 1 %
# of the default rtol. Numbers (Python floats on both sides) get only float64 rounding.
TENSOR_SLACK = 1e-6
NUMBER_SLACK = 2.0**-50

# The code a key's values depend on besides the solution notebook: the sketch itself, and
# the reference implementations that tests put in place of earlier exercises.
PROTOCOL_SOURCES = ("attention_course/handout.py", "autograder/reference")


# ------------------------------------------------------------------ handouts in a notebook


def cell_handouts(cell) -> list:
    """The handout sketches among a cell's outputs, in order (anything a cell shows with
    the handout MIME type counts, whatever its output type)."""
    outputs = cell.get("outputs") if isinstance(cell, dict) else None
    if not isinstance(outputs, list):
        return []
    found = []
    for output in outputs:
        data = output.get("data") if isinstance(output, dict) else None
        if isinstance(data, dict) and MIME_TYPE in data:
            found.append(data[MIME_TYPE])
    return found


def graded_handouts(nb) -> dict[str, list]:
    """Graded cell's grade id -> the sketches its outputs hold (a notebook as plain JSON or
    nbformat's; cells that share a grade id pool theirs)."""
    found: dict[str, list] = {}
    for cell in cells_of(nb):
        if is_graded(cell) and grade_id(cell) is not None:
            found.setdefault(grade_id(cell), []).extend(cell_handouts(cell))
    return found


# --------------------------------------------------------------------------- comparison


def compare(got, key: list) -> str | None:
    """None when the sketches ``got`` (from a submission) match the ``key``'s, else what
    differed, in words. Each value is judged with its key's atol and rtol."""
    if not isinstance(got, list):
        return "its handed-out values are unreadable"
    if len(got) != len(key):
        said = "no value" if not got else f"{len(got)} value{'s' if len(got) != 1 else ''}"
        return f"{said} handed out, the key has {len(key)}"
    for i, (mine, theirs) in enumerate(zip(got, key, strict=True)):
        atol, rtol = _tolerances(theirs)
        why = _differs(mine, theirs, atol, rtol)
        if why:
            return (
                f"value {i + 1} of {len(key)} ({_describe(theirs)}) differs from the key's: {why}"
            )
    return None


def _tolerances(key: dict) -> tuple[float, float]:
    atol, rtol = key.get("atol", 1e-5), key.get("rtol", 1e-4)
    return float(atol), float(rtol)


def _describe(key: dict) -> str:
    name = key.get("name", "value")
    if key.get("kind") == "tensor":
        return f"{name}, shape {tuple(key.get('shape', ()))}"
    if key.get("kind") == "sequence":
        return f"{name}, {len(key.get('items', []))} items"
    return str(name)


def _differs(got, key: dict, atol: float, rtol: float) -> str | None:
    """What differs between one sketch and the key's, or None."""
    if not isinstance(got, dict):
        return "not a sketch"
    kind = key.get("kind")
    if got.get("kind") != kind:
        return f"a {_word(got.get('kind'))}, the key's is a {kind}"
    if kind == "tensor":
        return _tensor_differs(got, key, atol, rtol)
    if kind == "sequence":
        items, expected = got.get("items"), key.get("items", [])
        if not isinstance(items, list) or len(items) != len(expected):
            return f"{_count(items)} items, the key's has {len(expected)}"
        for i, (a, b) in enumerate(zip(items, expected, strict=True)):
            why = _differs(a, b, atol, rtol)
            if why:
                return f"item {i + 1}: {why}"
        return None
    if kind == "bool":
        value = got.get("value")
        return None if value is key.get("value") else f"{value!r}, expected {key.get('value')!r}"
    if kind == "number":
        return _number_differs(got.get("value"), key.get("value"), atol, rtol)
    if got.get("type") != key.get("type"):
        return f"a {_word(got.get('type'))}, expected a {key.get('type')}"
    return None


def _word(value) -> str:
    return value if isinstance(value, str) and len(value) < 40 else "malformed value"


def _count(items) -> str:
    return str(len(items)) if isinstance(items, list) else "no list of"


def _number(value) -> float | None:
    """A sketch's number (``repr`` of NaN and infinities included); None if it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value in {"nan", "inf", "-inf"}:
        return float(value)
    return None


def _number_differs(got, key, atol: float, rtol: float) -> str | None:
    mine, theirs = _number(got), _number(key)
    if mine is None or theirs is None:
        return "not a number"
    if _close(mine, theirs, atol + rtol * abs(theirs) + NUMBER_SLACK * abs(theirs)):
        return None
    return f"{mine!r}, expected {theirs!r}"


def _close(a: float, b: float, tolerance: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tolerance


def _tensor_differs(got: dict, key: dict, atol: float, rtol: float) -> str | None:
    shape = got.get("shape")
    if not _ints(shape) or shape != key["shape"]:
        return f"shape {_shape(shape)}, expected {tuple(key['shape'])}"
    dtype = got.get("dtype")
    if dtype != key["dtype"] and not (_floating(dtype) and _floating(key["dtype"])):
        return f"dtype {_word(dtype)}, expected {key['dtype']}"
    for field in ("nan", "inf"):
        value = got.get(field)
        if not _ints([value]) or value != key[field]:
            return f"{_word(str(value))} {field.upper()} entries, expected {key[field]}"
    s, a = got.get("s"), got.get("a")
    if not _floats(s) or not _floats(a):
        return "its projections are malformed"
    n = min(math.prod(key["shape"]), handout.MAX_ENTRIES)
    weight = key.get("w") if _floats(key.get("w")) else _weight_sums(n)
    for j in range(PROJECTIONS):
        tolerance = atol * weight[j] + rtol * key["a"][j] + TENSOR_SLACK * key["a"][j]
        if not _close(float(s[j]), float(key["s"][j]), tolerance):
            return "its values are not within the tolerance of the key's"
    return None


def _ints(values) -> bool:
    return isinstance(values, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values
    )


def _floats(values) -> bool:
    return (
        isinstance(values, list)
        and len(values) == PROJECTIONS
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    )


def _shape(shape) -> str:
    return str(tuple(shape)) if _ints(shape) else "malformed"


def _floating(dtype) -> bool:
    return isinstance(dtype, str) and dtype in {"float16", "bfloat16", "float32", "float64"}


@lru_cache(maxsize=64)
def _weight_sums(n: int) -> tuple[float, ...]:
    """sum_i |w_ji| of each projection of a value with n entries."""
    return tuple(handout.projections(n).abs().sum(1).tolist())


# ----------------------------------------------------------------------------------- key


def key_cache() -> Path:
    """The folder of cached keys: $ATTENTION_COURSE_KEY_CACHE, else ~/.cache/attention-course/keys."""
    return Path(os.environ.get(KEY_CACHE_ENV) or DEFAULT_KEY_CACHE).expanduser()


def fingerprint(solution_sha256: str) -> dict:
    """What a key depends on: the solution notebook, PyTorch, Python, and the protocol's code."""
    return {
        "solution_sha256": solution_sha256,
        "torch": importlib.metadata.version("torch"),
        "python": platform.python_version(),
        "protocol": _protocol_hash(),
    }


@lru_cache(maxsize=1)
def _protocol_hash() -> str:
    root = INSTALLED_ROOT
    digest = hashlib.sha256()
    for source in PROTOCOL_SOURCES:
        path = root / source
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def cache_file(chapter: str, solution_sha256: str) -> Path:
    """Where the key of ``chapter``'s solution notebook with this SHA-256 is cached."""
    text = json.dumps(fingerprint(solution_sha256), sort_keys=True)
    return key_cache() / f"{chapter}-{hashlib.sha256(text.encode()).hexdigest()[:32]}.json"


def _read_cached(path: Path, chapter: str, solution_sha256: str) -> dict | None:
    """The key cached at ``path`` if it is one for this fingerprint, else None."""
    try:
        key = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(key, dict) or key.get("chapter") != chapter:
        return None
    if any(key.get(k) != v for k, v in fingerprint(solution_sha256).items()):
        return None
    cells = key.get("cells")
    if not isinstance(cells, dict) or not all(isinstance(v, list) for v in cells.values()):
        return None
    return key


def _write_key(path: Path, key: dict) -> None:
    write_atomically(path, json.dumps(key, indent=1, sort_keys=True))


def run_key(root: Path, chapter: str, config) -> dict:
    """Run ``chapter``'s solution notebook once in grading mode, as ``grade`` runs a
    submission (``config``: the grading configuration, sandbox and cell timeout included;
    one thread); the sketches each graded cell handed out. A cell that fails is a
    ``CourseError``: the key would be wrong."""
    path = solution_path(root, chapter)
    nb = nbformat.read(path, as_version=4)
    skip_marked(nb, nb)  # as when a submission is graded
    start = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix=f"key-{chapter}-") as folder,
        environment(KERNEL_ENV),
    ):
        try:
            resources = {"metadata": {"path": folder}, CHAPTER_KEY: chapter}
            nb, _ = GradingExecute(config=config).preprocess(nb, resources)
        except Exception as error:
            raise CourseError(
                f"the key of {chapter}: its solution notebook {path} could not be run in "
                f"grading mode ({type(error).__name__}: {error})"
            ) from error
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                where = grade_id(cell) or f"cell {index + 1}"
                raise CourseError(
                    f"the key of {chapter}: its solution notebook {path} fails in grading mode "
                    f"in {where} ({output.get('ename')}: {output.get('evalue')}); fix the "
                    "solution notebook before grading"
                )
    return {
        "chapter": chapter,
        "seconds": round(time.perf_counter() - start, 1),
        "cells": json.loads(json.dumps(graded_handouts(nb))),
    }


def _hands_out(path: Path) -> bool:
    """Whether any cell of the notebook calls ``hand_out`` (else its key is empty)."""
    nb = nbformat.read(path, as_version=4)
    return any("hand_out" in cell.source for cell in nb.cells if cell.cell_type == "code")


# ------------------------------------------------------------------------ the grade's step


class OutsideCheck:
    """The keys of a grading run's chapters, and the check of its rows against them."""

    def __init__(self, root: Path, out: Path, config, log=print):
        self.root, self.out, self.config, self.log = Path(root), Out(Path(out)), config, log
        self.keys: dict[tuple[str, str], dict] = {}  # (chapter, solution SHA-256) -> key
        self._current: dict[str, str | None] = {}  # chapter -> its solution's SHA-256

    def prepare(self, chapters: list[str]) -> None:
        """Make (or read from the cache) the key of each chapter's current solution."""
        for chapter in chapters:
            self.key(chapter)

    def key(self, chapter: str, solution_sha256: str | None = None) -> dict | None:
        """The key of ``chapter``'s solution notebook (by default the current one; another
        only from the cache, None when it is not there)."""
        path = solution_path(self.root, chapter)
        if chapter not in self._current:  # hashed once a run, not once a submission
            self._current[chapter] = file_hash(path) if path.is_file() else None
        current = self._current[chapter]
        solution_sha256 = solution_sha256 or current
        if solution_sha256 is None:
            return None
        if (chapter, solution_sha256) in self.keys:
            return self.keys[(chapter, solution_sha256)]
        cached = cache_file(chapter, solution_sha256)
        key = _read_cached(cached, chapter, solution_sha256)
        if key is None and solution_sha256 != current:
            return None  # an older solution notebook, whose key was never cached
        if key is None:
            key = self._make(chapter, path, solution_sha256, cached)
        elif solution_sha256 == current:
            self.log(f"key of {chapter}: {cached} (cached)")
        if solution_sha256 == current:
            _write_key(self.out.key(chapter), key)
        self.keys[(chapter, solution_sha256)] = key
        return key

    def _make(self, chapter: str, path: Path, solution_sha256: str, cached: Path) -> dict:
        if _hands_out(path):
            key = run_key(self.root, chapter, self.config)
        else:  # nothing to run for: no hidden test of the chapter hands a value out
            key = {"chapter": chapter, "seconds": 0.0, "cells": {}}
        key.update(fingerprint(solution_sha256))
        values = sum(len(v) for v in key["cells"].values())
        cells = sum(1 for v in key["cells"].values() if v)
        try:
            _write_key(cached, key)
            where = f"cached in {cached}"
        except OSError as error:
            where = f"not cached ({error})"
        self.log(
            f"key of {chapter}: the solution notebook run in grading mode in "
            f"{key['seconds']:.1f} s, {values} values handed out by {cells} test cells; {where}"
        )
        return key

    def verify(
        self,
        rows: list[GradeRow],
        problems: list[str],
        manual: set[tuple[str, str, str]] = frozenset(),
    ) -> list[GradeRow]:
        """``rows`` with the points of every graded test cell whose handed-out values differ
        from the key's taken away; the reasons added to ``problems``. A cell in ``manual``
        (student, chapter, cell), which an instructor scored by hand, keeps its score."""
        solutions = Ledger.read(self.out / LEDGER).solutions()
        notebooks: dict[tuple[str, str], dict[str, list] | str] = {}
        checked = []
        for row in rows:
            if (
                row.status != GRADED
                or row.points <= 0
                or (row.student, row.chapter, row.cell) in manual
            ):
                checked.append(row)
                continue
            pair = (row.student, row.chapter)
            key = self.key(row.chapter, solutions.get(pair))
            if key is None and pair not in notebooks:
                problems.append(
                    f"{row.student} / {row.chapter}: not checked outside the kernel (no key "
                    "of the solution notebook it was graded against; --regrade grades it again)"
                )
                notebooks[pair] = "no key"
            expected = (key or {}).get("cells", {}).get(row.cell)
            if not expected:
                checked.append(row)
                continue
            if pair not in notebooks:
                notebooks[pair] = self._handouts(*pair)
            found = notebooks[pair]
            why = found if isinstance(found, str) else compare(found.get(row.cell, []), expected)
            if why is None:
                checked.append(row)
                continue
            checked.append(dataclasses.replace(row, points=0.0, status=FAILED + why))
            problems.append(
                f"{row.student} / {row.chapter}: {row.cell} {FAILED.rstrip(': ')} ({why})"
            )
        return checked

    def _handouts(self, student: str, chapter: str) -> dict[str, list] | str:
        """The sketches of each graded cell of the autograded notebook, or why there are none."""
        path = self.out.autograded(student, chapter)
        try:
            return graded_handouts(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as error:
            return f"its autograded notebook cannot be read ({type(error).__name__})"
