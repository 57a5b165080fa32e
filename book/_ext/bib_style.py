"""An author-year label style for the bibliography, to match the author-year citations.

The pages cite with ``bibtex_reference_style: author_year`` ("Vaswani et al., 2017"), but
pybtex's ``plain`` style labels the bibliography entries with numbers ([1], [2], ...) that
appear nowhere in the text. The style ``authoryear`` registered here is ``plain`` with
labels such as "Vaswani et al., 2017", and "2014a", "2014b" where two entries would
otherwise get the same label.

Registered in ``_config.yml`` under ``sphinx: local_extensions``; selected with
``bibtex_default_style: authoryear``.
"""

from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.application import Sphinx


def _last_name(person) -> str:
    return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render_as("text")


def author_year(entry) -> str:
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    year = entry.fields.get("year", "n.d.")
    if not persons:
        return f"{entry.key}, {year}"
    if len(persons) == 1:
        names = _last_name(persons[0])
    elif len(persons) == 2:
        names = f"{_last_name(persons[0])} and {_last_name(persons[1])}"
    else:
        names = f"{_last_name(persons[0])} et al."
    return f"{names}, {year}"


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year(entry) for entry in entries]
        counts, seen = Counter(labels), Counter()
        for label in labels:
            if counts[label] > 1:
                seen[label] += 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]
            else:
                yield label


class AuthorYearStyle(PlainStyle):
    default_label_style = AuthorYearLabels


def setup(app: Sphinx) -> dict:
    register_plugin("pybtex.style.labels", "authoryear", AuthorYearLabels)
    register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
