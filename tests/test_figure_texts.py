"""A figure's alt text and caption describe it; what it shows is said by the page's computed
sentences, which read the measurement (issue 37). A static text that says a curve rises,
falls, crosses or stays asserts what the machine that built the page, or a seed, may not
show: this test fails on one, except in the figures that plot a formula or a law of large
samples, which no build can contradict."""

import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
TREND = re.compile(
    r"\b(cross(es|ed|ing)?(?!-)|steep(ly|er|ens)?|falls?|falling|rises?|rising|stays?|twofold|"
    r"fourfold|slowly|flat|grows?|growing|abrupt(ly)?|faster|slower|drops?|outperforms?|"
    r"overtakes?|ends? (far )?(lower|higher))\b",
    re.IGNORECASE,
)
# Figures of a formula or of a law over many samples, the same on every build: what they
# show cannot change with the machine, a seed or training.
FIXED = {
    "fig-receptive-field": "gradients of a fixed stack of convolutions: the band is exact",
    "fig-variance": "the variance of q.k over 20,000 random pairs: a law, to three digits",
    "fig-positional-encoding": "the sinusoids' formula",
    "fig-warmup": "the learning-rate schedule's formula",
}


def figure_texts():
    """(page, figure name, alt text and caption) of every figure of every chapter page."""
    for page in sorted(BOOK.glob("[0-9][0-9]_*.md")):
        text = page.read_text(encoding="utf-8")
        for block in re.finditer(r"\nmystnb:\n((?:  .*\n)+?)---\n", text):
            meta = block.group(1)
            name = re.search(r"\n    name: (\S+)", meta)
            bodies = re.findall(r"\n    (?:alt|caption): >-\n((?:      .*\n)+)", meta)
            if name and bodies:
                words = " ".join(line.strip() for b in bodies for line in b.splitlines())
                yield page.name, name.group(1), words


def claims(words: str) -> list[str]:
    """The sentences that assert a trend without deferring to the page's text."""
    sentences = re.split(r"(?<=[.;:])\s+", words)
    return [s for s in sentences if TREND.search(s) and "in the text" not in s]


def test_figures_are_found():
    names = [name for _, name, _ in FIGURES]
    assert len(names) > 40 and "fig-extrapolation" in names


FIGURES = list(figure_texts())


@pytest.mark.parametrize("page, name, words", FIGURES, ids=[f"{p}:{n}" for p, n, _ in FIGURES])
def test_alt_text_and_caption_assert_no_trend(page, name, words):
    if name in FIXED:
        return
    assert not claims(words), (
        f"{page}, {name}: the alt text or caption asserts what the measurement shows; describe "
        f"the figure and let a computed sentence say it: {claims(words)}"
    )


def test_the_check_catches_a_trend():
    assert claims("Both curves rise with n, so the two cross.")
    assert not claims("Right, cross-attention, rows: the step that writes the token.")
    assert not claims("Where the curves cross is given in the text below the figure.")
