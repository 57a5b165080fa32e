"""``collect``: an LMS's export (a folder, zips in it, or a zip) into the submitted layout,
every file it could not place reported, nothing overwritten without ``--force``."""

import os
import subprocess
import sys
import zipfile

import nbformat
import pytest

from autograder.chapters import CourseError
from autograder.collect import claim_of, collect

CHAPTER = "04_dot_product_attention"


def notebook_bytes(text: str) -> bytes:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(text)])
    return nbformat.writes(nb).encode("utf-8")


def write(path, data: bytes, mtime: float | None = None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def placed(submissions, student):
    return (submissions / student / CHAPTER / f"{CHAPTER}.ipynb").read_bytes()


def run_cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "autograder", *args], cwd=cwd, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "where, student",
    [
        ("Ann Lee_12345_assignsubmission_file_04_dot_product_attention.ipynb", "12345"),
        ("Ann Lee_12345_assignsubmission_file/04_dot_product_attention.ipynb", "12345"),
        ("leeann_12345_67890_04_dot_product_attention.ipynb", "12345"),
        ("leeann_LATE_12345_67891_04_dot_product_attention-1.ipynb", "12345"),
        ("Homework 4_jdoe7_attempt_2024-03-01-10-22-33_04_dot.ipynb", "jdoe7"),
        ("HW_4_jdoe7_attempt_2024-03-01-10-22-33_04_dot.ipynb", "jdoe7"),
        ("s1234567.ipynb", "s1234567"),
        ("s1234567_hw4 final.ipynb", "s1234567"),
        ("export.zip/week 4/alice.ipynb", "alice"),
        ("04_dot_product_attention.ipynb", None),  # the notebook's own name: no id
        ("Untitled (1).ipynb", None),
        ("doejohn_22222_900002_hw_11111_assignsubmission_file.ipynb", "22222"),  # issue 59
        ("x.zip/Ann Lee_12345_assignsubmission_file_.ipynb", "12345"),
        ("Ann Lee_12345_assignsubmission_file_/hw.ipynb", "12345"),
        ("hw_2024_03_04/s1.ipynb", "s1"),  # Canvas names no folder
    ],
)
def test_student_ids_in_lms_names(where, student):
    assert claim_of(where).student == student


def test_a_folder_with_zips_is_collected_and_every_problem_reported(tmp_path):
    inbox, submissions = tmp_path / "inbox", tmp_path / "submissions"
    write(inbox / "s100.ipynb", notebook_bytes("alice = 1"))
    write(inbox / "Ann Lee_200_assignsubmission_file_hw.ipynb", notebook_bytes("ann = 1"))
    write(inbox / "notes.txt", b"not a notebook")
    write(inbox / "04_dot_product_attention.ipynb", notebook_bytes("nobody"))
    write(inbox / "broken.zip", b"PK not really a zip")
    write(inbox / "s300.ipynb", b'{"cells": [')  # placed all the same, with a warning
    (inbox / "sub").mkdir()
    with zipfile.ZipFile(inbox / "sub" / "more.zip", "w") as z:
        z.writestr("bob_1_2_hw.ipynb", notebook_bytes("bob = 1"))
        z.writestr("__MACOSX/._bob_1_2_hw.ipynb", b"resource fork")
        z.writestr("readme.pdf", b"%PDF")

    report = collect(inbox, CHAPTER, submissions)
    assert sorted(s for s, _ in report.placed) == ["1", "200", "s100", "s300"]
    assert b"bob = 1" in placed(submissions, "1")
    assert placed(submissions, "s100") == (inbox / "s100.ipynb").read_bytes()
    text = "\n".join(report.problems)
    for expected in (
        "notes.txt: not a notebook",
        "04_dot_product_attention.ipynb: no student id found",
        "broken.zip: not a readable zip",
        "more.zip/readme.pdf: not a notebook",
        "s300.ipynb: not a valid notebook; placed",
        "skipped 1 system file",
    ):
        assert expected in text, text
    assert len(report.problems) == 6


def test_a_zip_as_inbox_through_the_command(tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("s1.ipynb", notebook_bytes("one"))
        z.writestr("Untitled.txt", b"x")
    result = run_cli("collect", str(archive), "--chapter", CHAPTER, "--out", "subs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "placed 1 notebook in subs" in result.stdout
    assert "warning: export.zip/Untitled.txt: not a notebook" in result.stderr
    assert b"one" in placed(tmp_path / "subs", "s1")


def test_the_newest_of_one_submissions_notebooks_is_kept(tmp_path):
    inbox = tmp_path / "inbox"
    # Canvas: the upload number orders them, whatever the files' times
    write(inbox / "leeann_7_100_hw.ipynb", notebook_bytes("first"), mtime=2_000_000_000)
    write(inbox / "leeann_LATE_7_101_hw-1.ipynb", notebook_bytes("late"), mtime=1_000_000_000)
    # Blackboard: the attempt's time, whatever the files' times
    attempt = "HW4_jdoe7_attempt_2024-03-0{}-10-22-33_hw.ipynb"
    write(inbox / attempt.format(2), notebook_bytes("second"), mtime=1_000_000_000)
    write(inbox / attempt.format(1), notebook_bytes("first"), mtime=2_000_000_000)
    # Moodle: two files in one participant's folder, the later modification time wins
    folder = inbox / "Ann Lee_12345_assignsubmission_file_"
    write(folder / "old.ipynb", notebook_bytes("old"), mtime=1_000_000_000)
    write(folder / "new.ipynb", notebook_bytes("new"), mtime=1_500_000_000)
    report = collect(inbox, CHAPTER, tmp_path / "subs")
    assert b"late" in placed(tmp_path / "subs", "7")
    assert b"second" in placed(tmp_path / "subs", "jdoe7")
    assert b"new" in placed(tmp_path / "subs", "12345")
    problems = "\n".join(report.problems)
    assert "leeann_7_100_hw.ipynb: 7 has a newer notebook (leeann_LATE_7_101_hw-1.ipynb)" in (
        problems
    )
    assert f"{attempt.format(1)}: jdoe7 has a newer notebook" in problems
    assert "assignsubmission_file_/old.ipynb: 12345 has a newer notebook" in problems
    assert len(report.problems) == 3 and not report.conflicts


def test_two_plain_names_for_one_student_are_a_conflict(tmp_path):
    # anyone can name a file s9_...: the newer of two is not taken on trust
    inbox = tmp_path / "inbox"
    write(inbox / "s9_old.ipynb", notebook_bytes("old"), mtime=1_000_000_000)
    write(inbox / "s9_new.ipynb", notebook_bytes("new"), mtime=1_500_000_000)
    report = collect(inbox, CHAPTER, tmp_path / "subs")
    assert not report.placed and not (tmp_path / "subs" / "s9").exists()
    assert report.conflicts == {"s9": ["s9_new.ipynb", "s9_old.ipynb"]}
    assert (
        "conflict: 2 notebooks from different submissions claim student id s9"
        in (report.problems[0])
    )


def test_a_different_submission_is_replaced_only_with_force(tmp_path):
    inbox, subs = tmp_path / "inbox", tmp_path / "subs"
    write(inbox / "s1.ipynb", notebook_bytes("first"))
    assert len(collect(inbox, CHAPTER, subs).placed) == 1
    again = collect(inbox, CHAPTER, subs)  # the same file: nothing to do
    assert again.unchanged and not again.placed and not again.problems
    write(inbox / "s1.ipynb", notebook_bytes("second"))
    refused = collect(inbox, CHAPTER, subs)
    assert not refused.placed and "exists and differs" in refused.problems[0]
    assert b"first" in placed(subs, "s1")
    assert collect(inbox, CHAPTER, subs, force=True).placed
    assert b"second" in placed(subs, "s1")


def test_pattern_overrides_the_rules(tmp_path):
    inbox = tmp_path / "inbox"
    write(inbox / "alice" / f"{CHAPTER}.ipynb", notebook_bytes("a"))
    write(inbox / "bob" / "hw.ipynb", notebook_bytes("b"))
    report = collect(inbox, CHAPTER, tmp_path / "subs", pattern=r"(?P<student>[^/]+)/[^/]+$")
    assert sorted(s for s, _ in report.placed) == ["alice", "bob"]
    with pytest.raises(CourseError, match="named group"):
        collect(inbox, CHAPTER, tmp_path / "subs", pattern=r"(\w+)")
    report = collect(inbox, CHAPTER, tmp_path / "other", pattern=r"^(?P<student>carol)/")
    assert not report.placed and len(report.problems) == 2


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(CourseError, match="does not exist"):
        collect(tmp_path / "nowhere", CHAPTER, tmp_path / "subs")
    with pytest.raises(CourseError, match="unknown chapter"):
        collect(tmp_path, "99_nonsense", tmp_path / "subs")
    with pytest.raises(CourseError, match="must not contain each other"):
        collect(tmp_path, CHAPTER, tmp_path / "subs")
    result = run_cli("collect", "nowhere", "--chapter", CHAPTER, "--out", "s", cwd=tmp_path)
    assert result.returncode == 2 and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("where", ["root", "subfolder"])
@pytest.mark.parametrize("kind", ["relative", "absolute"])
def test_collect_paths_relative_or_absolute_from_the_course(root, tmp_path, where, kind):
    inbox, subs = tmp_path / "inbox", tmp_path / "subs"
    write(inbox / "s1.ipynb", notebook_bytes("one"))
    cwd = root if where == "root" else root / "autograder" / "mistakes"
    paths = (
        [inbox, subs] if kind == "absolute" else [os.path.relpath(p, cwd) for p in (inbox, subs)]
    )
    result = run_cli(
        "collect", str(paths[0]), "--chapter", CHAPTER, "--out", str(paths[1]), cwd=cwd
    )
    assert result.returncode == 0, result.stderr
    assert b"one" in placed(subs, "s1")


# Issue 59: the part of a name that the student chose (the file they uploaded, the files in a
# Moodle folder, the members of a zip they handed in) never gives or changes a student id.

ATTACK = "doejohn_22222_900002_hw_11111_assignsubmission_file.ipynb"


def test_a_canvas_name_holding_a_moodle_id_is_filed_under_its_canvas_id(tmp_path):
    inbox, subs = tmp_path / "inbox", tmp_path / "subs"
    write(inbox / ATTACK, notebook_bytes("doejohn's"), mtime=2_000_000_000)  # the newer
    write(inbox / "smithann_11111_900001_hw.ipynb", notebook_bytes("smithann's"), 1_000_000_000)
    report = collect(inbox, CHAPTER, subs)
    assert sorted(report.placed) == [
        ("11111", "smithann_11111_900001_hw.ipynb"),
        ("22222", ATTACK),
    ]
    assert b"smithann's" in placed(subs, "11111")
    assert b"doejohn's" in placed(subs, "22222")
    assert not report.problems and not report.conflicts


@pytest.mark.parametrize(
    "where, student",
    [
        # Moodle's name inside Canvas's, and the other way round
        ("doejohn_LATE_22222_900002_Ann Lee_11111_assignsubmission_file_.ipynb", "22222"),
        ("Eve Doe_22222_assignsubmission_file_leeann_11111_900001_hw.ipynb", "22222"),
        ("Eve Doe_22222_assignsubmission_file_/leeann_11111_900001_hw.ipynb", "22222"),
        ("Eve Doe_22222_assignsubmission_file_/Ann_11111_assignsubmission_file_.ipynb", "22222"),
        # a zip handed in: its members are the student's
        ("export.zip/doejohn_22222_900002_work.zip/leeann_11111_900001_hw.ipynb", "22222"),
        ("doejohn_22222_900002_work.zip/Ann_11111_assignsubmission_file_/hw.ipynb", "22222"),
        ("HW4_eve_attempt_2024-03-01-10-22-33_w.zip/leeann_11111_1_hw.ipynb", "eve"),
        # ids in the student's own file name: the LMS's fields come first
        ("doejohn_22222_900002_12345_67890_x_12345_.ipynb", "22222"),
        ("doejohn_22222_900002__12345_.ipynb", "22222"),
        ("HW4_eve_attempt_2024-03-01-10-22-33_x_bob_attempt_2099-01-01-00-00-00_.ipynb", "eve"),
        ("Eve Doe_22222_assignsubmission_file__12345_assignsubmission_file_.ipynb", "22222"),
        # a student's own folder names are not an LMS's
        ("Eve Doe_22222_assignsubmission_file_/leeann_11111_1_x/hw.ipynb", "22222"),
    ],
)
def test_the_students_part_of_a_name_never_gives_the_id(where, student):
    assert claim_of(where).student == student


def test_a_name_two_lmss_read_as_two_ids_is_not_placed(tmp_path):
    inbox, subs = tmp_path / "inbox", tmp_path / "subs"
    forged = "doejohn_22222_900002_hw_jdoe7_attempt_2024-03-01-10-22-33_.ipynb"
    write(inbox / forged, notebook_bytes("doejohn's"), mtime=2_000_000_000)
    write(inbox / "HW4_jdoe7_attempt_2024-03-01-10-22-33_hw.ipynb", notebook_bytes("jdoe7's"))
    report = collect(inbox, CHAPTER, subs)
    assert [s for s, _ in report.placed] == ["jdoe7"]
    assert b"jdoe7's" in placed(subs, "jdoe7")
    assert report.problems == [
        f"{forged}: its name reads as Canvas id '22222' and as Blackboard id 'jdoe7': "
        "ambiguous (--pattern says which), not placed"
    ]


def test_two_submissions_claiming_one_id_are_a_conflict(tmp_path):
    inbox, subs = tmp_path / "inbox", tmp_path / "subs"
    write(subs / "11111" / CHAPTER / f"{CHAPTER}.ipynb", notebook_bytes("collected before"))
    write(inbox / "smithann_11111_900001_hw.ipynb", notebook_bytes("one"), mtime=1_000_000_000)
    write(inbox / "doejohn_11111_900002_hw.ipynb", notebook_bytes("two"), mtime=2_000_000_000)
    write(inbox / "Ann Lee_12345_assignsubmission_file_hw.ipynb", notebook_bytes("moodle"))
    write(inbox / "12345.ipynb", notebook_bytes("plain"))
    write(inbox / "s1.ipynb", notebook_bytes("s1"))
    report = collect(inbox, CHAPTER, subs, force=True)
    assert [s for s, _ in report.placed] == ["s1"]
    assert b"collected before" in placed(subs, "11111")  # left as it was, even with force
    assert not (subs / "12345").exists()
    assert report.conflicts == {
        "11111": ["doejohn_11111_900002_hw.ipynb", "smithann_11111_900001_hw.ipynb"],
        "12345": ["12345.ipynb", "Ann Lee_12345_assignsubmission_file_hw.ipynb"],
    }
    assert report.problems == [
        "conflict: 2 notebooks from different submissions claim student id 11111, none of "
        "them placed: doejohn_11111_900002_hw.ipynb (id read from Canvas 'doejohn'); "
        "smithann_11111_900001_hw.ipynb (id read from Canvas 'smithann'). Check which is "
        "11111's and place it by hand, or collect again without the others",
        "conflict: 2 notebooks from different submissions claim student id 12345, none of "
        "them placed: 12345.ipynb (id read from a plain name); Ann Lee_12345_assignsubmission"
        "_file_hw.ipynb (id read from Moodle 'Ann Lee'). Check which is 12345's and place it "
        "by hand, or collect again without the others",
    ]


def test_a_conflict_is_a_warning_and_exit_status_1_of_the_command(tmp_path):
    inbox = tmp_path / "inbox"
    write(inbox / "smithann_11111_900001_hw.ipynb", notebook_bytes("one"))
    write(inbox / "doejohn_11111_900002_hw.ipynb", notebook_bytes("two"))
    result = run_cli("collect", "inbox", "--chapter", CHAPTER, "--out", "subs", cwd=tmp_path)
    assert "warning: conflict: 2 notebooks from different submissions claim student id 11111" in (
        result.stderr
    )
    assert "placed 0 notebooks" in result.stdout and result.returncode == 1
    assert not (tmp_path / "subs" / "11111").exists()


def test_pattern_reads_the_id_wherever_it_says(tmp_path):
    inbox, subs = tmp_path / "inbox", tmp_path / "subs"
    # the instructor's pattern, not the LMS rules: a Canvas-looking name does not matter
    write(inbox / "s1" / "doejohn_22222_900002_hw.ipynb", notebook_bytes("s1's"))
    write(inbox / "s2" / "a.ipynb", notebook_bytes("a"))
    write(inbox / "s2" / "b.ipynb", notebook_bytes("b"))
    report = collect(inbox, CHAPTER, subs, pattern=r"^(?P<student>[^/]+)/")
    assert report.placed == [("s1", "s1/doejohn_22222_900002_hw.ipynb")]
    assert b"s1's" in placed(subs, "s1")
    assert report.conflicts == {"s2": ["s2/a.ipynb", "s2/b.ipynb"]}
    assert "(id read from --pattern)" in report.problems[0]
