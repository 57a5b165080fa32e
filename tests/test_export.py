"""``export``: OUT's grades into the file Canvas, Moodle or Blackboard imports, from its own
export of the class (``tests/data/lms/``): students matched on ids only (two students named
Ann Lee keep their own points), names with accents, commas and quotes kept, the roster's
encoding and delimiter kept, and every unmatched student, chapter and column reported.
OUT is built from rows here: no grading run."""

import codecs
import csv
import io
import shutil
import zipfile
from pathlib import Path

import pytest

from autograder import cli
from autograder.chapters import CourseError
from autograder.export import export, read_grades
from autograder.lms.moodle import folder_name
from autograder.lms.sheet import _leading_number
from autograder.lms.table import read_table
from autograder.outfolder import GradeRow, write_csv, write_wide_csv

DATA = Path(__file__).parent / "data" / "lms"
CH4, CH5, CH6 = "04_dot_product_attention", "05_multi_head_attention", "06_transformer"
WORTH = {CH4: [10, 9], CH5: [10, 8], CH6: [12]}  # each test cell's max points: 19, 18, 12


def make_out(folder: Path, points: dict[str, dict[str, list[float]]]) -> Path:
    """An OUT folder with grades.csv and grades_by_cell.csv for ``points[student][chapter]``
    (a list of test cells' points), and a feedback page per submission."""
    rows = [
        GradeRow(student, chapter, f"test_{i}", p, WORTH[chapter][i], "graded")
        for student, chapters in points.items()
        for chapter, cells in chapters.items()
        for i, p in enumerate(cells)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    write_wide_csv(rows, folder / "grades.csv")
    write_csv(rows, folder / "grades_by_cell.csv")
    for student, chapters in points.items():
        for chapter in chapters:
            page = folder / "feedback" / student / f"{chapter}.html"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(f"<html><p>{student}: {chapter}, é ü</p></html>", encoding="utf-8")
    return folder


def rows_of(path: Path, encoding="utf-8-sig", delimiter=",") -> list[list[str]]:
    text = path.read_bytes().decode(encoding)
    return list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))


def by_id(rows: list[list[str]], id_column: str) -> dict[str, dict[str, str]]:
    header = rows[0]
    return {r[header.index(id_column)]: dict(zip(header, r, strict=True)) for r in rows[1:]}


@pytest.fixture
def canvas_out(tmp_path):
    """Canvas user ids, as collect reads them: 12345 and 12346 are both "Lee, Ann"; 34567
    has no result for chapter 5; 77777 is not in the roster; 45678 and 99999 (Canvas's test
    student) have no result; chapter 6 has no column in the gradebook."""
    return make_out(
        tmp_path / "OUT",
        {
            "12345": {CH4: [10, 7], CH5: [10, 8], CH6: [5]},
            "12346": {CH4: [2.5, 10], CH5: [3, 0]},
            "23456": {CH4: [10, 9], CH5: [0, 0]},
            "34567": {CH4: [9, 0]},
            "77777": {CH4: [11, 0]},
        },
    )


def test_canvas_round_trip(canvas_out):
    report = export(canvas_out, "canvas", DATA / "canvas_gradebook.csv")
    (path,) = report.written
    assert path == canvas_out / "export" / "canvas" / "canvas_gradebook.csv"
    assert path.read_bytes().startswith(codecs.BOM_UTF8)  # as the roster came
    rows = rows_of(path)
    assert rows[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        "04 Dot-product attention (1004)",
        "05 Multi-head attention (1005)",
    ]  # other assignments and Canvas's read-only totals are left out
    assert rows[1] == ["    Points Possible", "", "", "", "", "19.00", "20.00"]
    got = by_id(rows, "ID")  # Points Possible's ID is ""
    ch4, ch5 = rows[0][5], rows[0][6]
    expected = {
        "12345": ("Lee, Ann", "17", "18"),
        "12346": ("Lee, Ann", "12.5", "3"),
        "23456": ("Müller, Jürgen", "19", "0"),
        "34567": ('O\'Brien, Dee "DJ"', "9", ""),  # its chapter 5 cell left as it was
        "45678": ("Nguyễn, Thị Hằng", "", ""),
        "99999": ("Student, Test", "", ""),
    }
    assert {k: (v["Student"], v[ch4], v[ch5]) for k, v in got.items() if k} == expected
    assert len(rows) == 2 + len(expected)  # nobody lost, nobody added
    assert report.id_column == "ID" and report.filled == 7
    assert sorted(report.matched) == ["12345", "12346", "23456", "34567"]
    assert [line.split(" (")[0] for line in report.no_result] == [
        "Nguyễn, Thị Hằng",
        "Student, Test",
    ]
    assert len(report.not_in_roster) == 1 and "77777" in report.not_in_roster[0]
    assert len(report.no_column) == 1 and report.no_column[0].startswith(CH6)
    assert any("34567" in p and CH5 in p for p in report.problems)
    assert any("worth 20 points in Canvas" in p and "18" in p for p in report.problems)


def test_canvas_new_column_and_explicit_column(canvas_out, tmp_path):
    """``--column`` puts a chapter in a named column (its name without Canvas's id is
    enough), or in a new one that Canvas creates, worth the chapter's points."""
    to = tmp_path / "to canvas.csv"
    report = export(
        canvas_out,
        "canvas",
        DATA / "canvas_gradebook.csv",
        to,
        columns=["6=06 Transformer", "04=Quiz 1"],
    )
    rows = rows_of(to)
    assert rows[0][5:] == ["05 Multi-head attention (1005)", "Quiz 1 (1010)", "06 Transformer"]
    assert rows[1][5:] == ["20.00", "5.00", "12"]  # a new column's points possible: 12
    got = by_id(rows, "ID")
    assert got["12345"]["Quiz 1 (1010)"] == "17" and got["12345"]["06 Transformer"] == "5"
    assert got["12346"]["06 Transformer"] == ""
    assert [c.how for c in report.columns] == ["--column", "its name holds the chapter's id"] + [
        "--column, a new column"
    ]
    assert not report.no_column and any("creates an assignment" in n for n in report.notes)


@pytest.mark.parametrize(
    "name, encoding, delimiter",
    [
        ("blackboard_gradecenter.csv", "utf-8", ","),
        ("blackboard_gradecenter.xls", "utf-16", "\t"),
    ],
)
def test_blackboard_round_trip(tmp_path, name, encoding, delimiter):
    """Matched on Username; the chapter columns keep their Grade Center ids (``|4004``);
    ``Chapter 5: ...`` is chapter 5 by its number; the file keeps its delimiter, encoding and
    Blackboard's quotes around every field."""
    out = make_out(
        tmp_path / "OUT",
        {
            "alee7": {CH4: [10, 9], CH5: [10, 8]},
            "alee8": {CH4: [1, 2], CH5: [0.5, 0]},
            "jmuller": {CH4: [3, 4]},
            "zdupont": {CH4: [5, 6], CH5: [7, 8]},
            "ghost": {CH5: [1, 1]},
        },
    )
    report = export(out, "blackboard", DATA / name)
    (path,) = report.written
    assert path.name == name
    data = path.read_bytes()
    assert data.startswith(codecs.BOM_UTF16_LE if encoding == "utf-16" else b'"Last Name"')
    rows = rows_of(path, encoding, delimiter)
    ch4 = "04 Dot-product attention [Total Pts: 19 Score] |4004"
    ch5 = "Chapter 5: Multi-head attention [Total Pts: 20 Score] |4005"
    assert rows[0] == ["Last Name", "First Name", "Username", "Student ID", ch4, ch5]
    assert data.decode(encoding).splitlines()[1].count('"') == 2 * 6  # every field quoted
    got = {
        k: (v["Last Name"], v["First Name"], v[ch4], v[ch5])
        for k, v in by_id(rows, "Username").items()
    }
    assert got == {
        "alee7": ("Lee", "Ann", "19", "18"),
        "alee8": ("Lee", "Ann", "3", "0.5"),
        "jmuller": ("Müller", "Jürgen", "7", ""),
        "zdupont": ("Dupont, Jr.", "Zoë", "11", "15"),
        "tnguyen": ("Nguyễn", "Thị Hằng", "", ""),
    }
    assert [c.how for c in report.columns] == [
        "its name holds the chapter's id",
        "its name starts with its number",
    ]
    assert len(report.no_result) == 1 and "tnguyen" in report.no_result[0]
    assert len(report.not_in_roster) == 1 and "ghost" in report.not_in_roster[0]
    assert any("worth 20 points in Blackboard" in p for p in report.problems)


def test_moodle_gradebook_import(tmp_path):
    """The gradebook's export as roster: students matched on the id column that holds OUT's
    ids (here ID number), the grade items by their names; no feedback zip (it needs the
    assignment's participant ids), and the note says how to map the import."""
    out = make_out(
        tmp_path / "OUT",
        {
            "S001": {CH4: [1, 1]},
            "S002": {CH4: [2, 2]},
            "S004": {CH4: [4, 4]},
            "S009": {CH4: [9, 9]},
        },
    )
    report = export(out, "moodle", DATA / "moodle_grades.csv")
    rows = rows_of(report.written[0])
    ch4, ch5 = (
        "Assignment: 04 Dot-product attention (Real)",
        "Assignment: 05 Multi-head attention (Real)",
    )
    assert rows[0] == ["First name", "Last name", "ID number", "Email address", ch4]
    got = {
        k: (v["First name"], v["Last name"], v[ch4]) for k, v in by_id(rows, "ID number").items()
    }
    assert got == {
        "S001": ("Ann", "Lee", "2"),
        "S002": ("Ann", "Lee", "4"),
        "S003": ("Jürgen", "Müller", "-"),  # no result: Moodle's "-" kept
        "S004": ("Zoë, Jr.", "Dupont", "8"),
        "S005": ("Thị Hằng", "Nguyễn", "-"),
    }
    assert report.id_column == "ID number" and len(report.no_result) == 2
    assert "S009" in report.not_in_roster[0] and ch5 not in rows[0]
    assert any("'useridnumber'" in n for n in report.notes)
    assert any("no feedback zip" in n for n in report.notes)
    assert len(report.written) == 1


def test_moodle_gradebook_names_the_way_out_for_participant_ids(tmp_path):
    """OUT collected from Moodle's submissions download knows students by participant id,
    which the gradebook does not list: nobody matches, everybody is reported, and the note
    says to use the assignment's grading worksheet."""
    out = make_out(tmp_path / "OUT", {"101": {CH4: [1, 1]}, "102": {CH4: [2, 2]}})
    report = export(out, "moodle", DATA / "moodle_grades.csv")
    assert not report.matched and report.filled == 0
    assert len(report.no_result) == 5 and len(report.not_in_roster) == 2
    assert any("grading worksheet" in n for n in report.notes)


def test_moodle_worksheet_and_feedback_zip(tmp_path):
    """The assignment's grading worksheet: ``Grade`` filled for each participant id, every
    other column as it was; beside it the feedback zip, a folder per student named as
    Moodle's download names it. Participant 104 has no feedback page: reported."""
    out = make_out(
        tmp_path / "OUT",
        {
            "101": {CH4: [10, 9], CH5: [1, 1]},
            "102": {CH4: [0, 3.5]},
            "104": {CH4: [5, 5]},
            "109": {CH4: [1, 0]},
        },
    )
    (out / "feedback" / "104" / f"{CH4}.html").unlink()
    report = export(out, "moodle", DATA / "moodle_worksheet.csv", chapters=["4"])
    worksheet, archive = report.written
    rows = rows_of(worksheet)
    roster = rows_of(DATA / "moodle_worksheet.csv")
    assert rows[0] == roster[0]
    grade = rows[0].index("Grade")
    assert {r[0]: r[grade] for r in rows[1:]} == {
        "Participant 101": "19",
        "Participant 102": "3.5",
        "Participant 103": "",
        "Participant 104": "10",
        "Participant 105": "",
    }
    for mine, theirs in zip(rows, roster, strict=True):  # nothing else changed
        assert mine[:grade] + mine[grade + 1 :] == theirs[:grade] + theirs[grade + 1 :]
    assert archive == worksheet.parent / f"feedback_{CH4}.zip"
    with zipfile.ZipFile(archive) as z:
        names = sorted(z.namelist())
        assert names == [
            f"Ann Lee_101_assignsubmission_file_/{CH4}.html",
            f"Ann Lee_102_assignsubmission_file_/{CH4}.html",
        ]
        assert z.read(names[1]) == (out / "feedback" / "102" / f"{CH4}.html").read_bytes()
    assert report.id_column == "Identifier" and report.matched == ["101", "102", "104"]
    assert any("104" in p and "no feedback page" in p for p in report.problems)
    assert [line.split(" (")[0] for line in report.no_result] == [
        "Jürgen Müller",
        "Thị Hằng Nguyễn",
    ]
    assert "109" in report.not_in_roster[0]


def test_moodle_worksheet_matched_on_email(tmp_path):
    """A class collected under its e-mail addresses: the worksheet's ``Email address``
    column names the students, and the zip's folders still carry the participant ids."""
    out = make_out(tmp_path / "OUT", {"ann.lee2@example.edu": {CH4: [0, 3.5]}})
    report = export(
        out, "moodle", DATA / "moodle_worksheet.csv", chapters=["4"], id_column="Email address"
    )
    worksheet, archive = report.written
    rows = rows_of(worksheet)
    grade = rows[0].index("Grade")
    assert {r[0]: r[grade] for r in rows[1:]}["Participant 102"] == "3.5"
    assert report.matched == ["ann.lee2@example.edu"]
    with zipfile.ZipFile(archive) as z:
        assert z.namelist() == [f"Ann Lee_102_assignsubmission_file_/{CH4}.html"]


def test_moodle_folder_names():
    assert folder_name("Zoë Dupont, Jr.", "104") == "Zoë Dupont, Jr._104_assignsubmission_file_"
    assert folder_name("Ann_Marie O'Lee", "7") == "Ann Marie O'Lee_7_assignsubmission_file_"
    assert folder_name('A/B: "C"?', "8") == "AB C_8_assignsubmission_file_"


def test_a_worksheet_is_one_chapter(tmp_path):
    out = make_out(tmp_path / "OUT", {"101": {CH4: [1, 1], CH5: [1, 1]}})
    with pytest.raises(CourseError, match="one chapter: say which with --chapter"):
        export(out, "moodle", DATA / "moodle_worksheet.csv")


def test_two_columns_alike_are_not_guessed(tmp_path):
    out = make_out(tmp_path / "OUT", {"12345": {CH4: [1, 1]}})
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,4 Part A (1),4 Part B (2)\n"
        '"Lee, Ann",12345,,,A,,\n',
        encoding="utf-8",
    )
    report = export(out, "canvas", roster)
    assert not report.columns and "both look like it" in report.no_column[0]
    assert rows_of(report.written[0])[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
    ]


@pytest.mark.parametrize(
    "title, number",
    [
        ("04 Dot-product attention", 4),
        ("4. Dot-product attention", 4),
        ("Chapter 4: attention", 4),
        ("Ch. 04", 4),
        ("4.2 Exercise", None),
        ("Quiz 4", None),
        ("2024 midterm", 2024),
    ],
)
def test_a_columns_leading_number(title, number):
    assert _leading_number(title) == number


def test_roster_dialects(tmp_path):
    """Windows-1252 with semicolons (Excel's "CSV" in much of Europe) is read and written
    back as it came."""
    out = make_out(tmp_path / "OUT", {"12345": {CH4: [1, 2]}})
    roster = tmp_path / "excel.csv"
    roster.write_bytes(
        "Student;ID;SIS User ID;SIS Login ID;Section;04 Attention (1)\r\n"
        "Müller, Jürgen;12345;;;A;\r\n".encode("cp1252")
    )
    report = export(out, "canvas", roster)
    table = read_table(report.written[0])
    assert (table.encoding, table.delimiter) == ("cp1252", ";")
    assert table.rows == [["Müller, Jürgen", "12345", "", "", "A", "3"]]


BAD_ROSTERS = [
    ("", "is empty"),
    ('Student,ID\n"Lee, Ann",1,extra\n', "3 fields where the header has 2"),
    ("Name,Email\nAnn,a@example.edu\n", "not a Canvas file"),
    ("Student,ID,04 A (1)\nAnn,1,\nBob,1,\n", "the same ID on two rows"),
    ("Student,ID,ID\nAnn,1,2\n", "names a column twice"),
    ('Student,ID\n"Lee, Ann,1\n', "not a readable CSV file"),
]


@pytest.mark.parametrize("text, message", BAD_ROSTERS)
def test_a_bad_roster_is_a_clear_error(tmp_path, text, message):
    out = make_out(tmp_path / "OUT", {"1": {CH4: [1, 1]}})
    roster = tmp_path / "roster.csv"
    roster.write_text(text, encoding="utf-8")
    with pytest.raises(CourseError, match=message):
        export(out, "canvas", roster)


def test_bad_options_and_out(tmp_path, canvas_out):
    roster = DATA / "canvas_gradebook.csv"
    with pytest.raises(CourseError, match="does not exist: grade into"):
        export(tmp_path / "nowhere", "canvas", roster)
    with pytest.raises(CourseError, match="'09' is not a chapter of OUT"):
        export(canvas_out, "canvas", roster, columns=["09=Quiz 1"])
    with pytest.raises(CourseError, match="expected CHAPTER=COLUMN NAME"):
        export(canvas_out, "canvas", roster, columns=["04"])
    with pytest.raises(CourseError, match="--id-column 'Login' is not a column"):
        export(canvas_out, "canvas", roster, id_column="Login")
    copy = shutil.copy(roster, tmp_path / "roster.csv")
    with pytest.raises(CourseError, match="is the roster itself"):
        export(canvas_out, "canvas", copy, to=copy)


def test_read_grades(canvas_out):
    grades = read_grades(canvas_out)
    assert grades.chapters == [CH4, CH5, CH6]
    assert grades.points["34567"] == {CH4: 9.0}
    assert grades.worth == {CH4: 19.0, CH5: 18.0, CH6: 12.0}


def test_cli_export(canvas_out, tmp_path, capsys):
    to = tmp_path / "upload.csv"
    code = cli.main(
        [
            "export",
            str(canvas_out),
            "--lms",
            "canvas",
            "--roster",
            str(DATA / "canvas_gradebook.csv"),
        ]
        + ["--to", str(to), "--column", "06_transformer=06 Transformer"]
    )
    said = capsys.readouterr()
    assert code == 0 and to.is_file()
    assert f"{CH4:28s} -> '04 Dot-product attention (1004)'" in said.out
    assert f"wrote {to}" in said.out
    assert (
        "exported 8 grades of 4 students to Canvas; 2 roster student(s) without a result, "
        in said.out
    )
    assert "1 graded student(s) not in the roster, 0 chapter(s) without a column" in said.out
    assert "warning: Nguyễn, Thị Hằng (ID 45678): no result in OUT" in said.err
    assert "warning: graded student 77777" in said.err


def test_cli_bad_roster_exits_2(canvas_out, tmp_path, capsys):
    roster = tmp_path / "roster.csv"
    roster.write_text("Name,Email\nAnn,a@example.edu\n", encoding="utf-8")
    code = cli.main(["export", str(canvas_out), "--lms", "canvas", "--roster", str(roster)])
    said = capsys.readouterr()
    assert code == 2
    assert said.err.startswith("error: ") and "not a Canvas file" in said.err
    assert not (canvas_out / "export").exists()
