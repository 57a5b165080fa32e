"""Grading by hand in nbgrader's formgrader, driven in Debian's chromium as an instructor
would: Manual Grading, the chapter, the student's submission, then a score typed into a
test cell's box and a comment under an answer. The formgrader saves a field when it loses
the focus; each save is waited for and its answer returned.

Used by ``tests/test_formgrader.py`` and ``benchmarks/instructor_loop.py``.
"""


def grade_by_hand(
    browser,
    formgrader: str,
    chapter: str,
    student: str,
    scores: dict[str, str],
    comments: dict[str, str],
) -> dict[str, dict]:
    """In a new page of ``browser`` (Playwright's, launched from Debian's chromium), in the
    formgrader at ``formgrader`` (its URL, token included), give ``student``'s
    submission of ``chapter`` the ``scores`` (test cell's grade id -> points, as typed) and
    ``comments`` (cell's grade id -> text); what the formgrader saved, by grade id. The
    student's row must say *needs manual grade* when any score is given."""
    from playwright.sync_api import expect

    def saved(page, what: str):
        return page.expect_response(
            lambda r: f"/api/{what}/" in r.url and r.request.method == "PUT"
        )

    answers: dict[str, dict] = {}
    page = browser.new_page()
    try:
        page.set_default_timeout(90_000)
        page.goto(formgrader)
        page.get_by_role("link", name="Manual Grading").click()
        page.get_by_role("link", name=chapter).click()  # the assignment
        page.get_by_role("link", name=chapter).click()  # its notebook
        page.get_by_role("link", name="Submission #1", exact=True).wait_for()
        page.get_by_role("button", name="Show All Names").click()
        row = page.get_by_role("row").filter(has=page.get_by_role("link", name=student, exact=True))
        if scores:
            expect(row.locator("td.needs-manual-grade .glyphicon-ok")).to_be_visible()
        row.get_by_role("link", name=student, exact=True).click()
        # The page binds a box to its save only once it has fetched the grades and the
        # comments; typed before that (a busy machine), a score is never saved.
        page.wait_for_function(
            "() => window.formgrader && formgrader.grades && formgrader.grades.loaded"
            " && formgrader.comments && formgrader.comments.loaded"
        )
        for cell, points in scores.items():
            box = page.locator(f"input.score#{cell}")
            with saved(page, "grade") as answer:
                box.click()
                box.press_sequentially(points)
                box.press("Tab")
            answers[cell] = answer.value.json()
        for cell, text in comments.items():
            box = page.locator(f"textarea#{cell}-comment")
            with saved(page, "comment") as answer:
                box.click()
                box.press_sequentially(text)
                box.press("Tab")
            answers[f"{cell}-comment"] = answer.value.json()
    finally:
        page.close()
    return answers
