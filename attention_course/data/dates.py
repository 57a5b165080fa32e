"""Date normalisation pairs: a date written in one of several languages and formats, to
ISO 8601, generated with babel's CLDR data (nothing is downloaded)::

    >>> date_source(datetime.date(2015, 3, 4), "es_ES", "full")
    ['miércoles', ',', '4', 'de', 'marzo', 'de', '2015']
    >>> date_target(datetime.date(2015, 3, 4))
    ['2', '0', '1', '5', '-', '0', '3', '-', '0', '4']

The source is split into words, numbers and punctuation, so that a month name or a year
is one token; the target is one token per character of ``YYYY-MM-DD``. In an alignment
heatmap the four year digits then look at the year token, the month digits at the month
name (or number), the day digits at the day.

Two-digit years (``04.03.15`` in German, ``4/3/15`` in Spanish) are read with a pivot:
the course's dates run from 1950 to 2049, so 50-99 mean 19xx and 00-49 mean 20xx. The US
short format (``3/4/15``, month first) is left out by default: it would make ``3/4/15``
mean two different dates, since every other locale here writes the day first.
"""

import datetime
import random
import re

from babel.dates import format_date

LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR", "es_ES")
FORMATS = ("short", "medium", "long", "full")
# (locale, format) pairs whose strings collide with another locale's, with a different date.
AMBIGUOUS = frozenset({("en_US", "short")})
FIRST_DAY = datetime.date(1950, 1, 1)
LAST_DAY = datetime.date(2049, 12, 31)

_TOKEN = re.compile(r"\d+|\w+|[^\w\s]")  # numbers, words (with accents), single punctuation marks


def tokenize_date(text: str) -> list[str]:
    """Split a written date into numbers, words and punctuation marks (spaces dropped)."""
    return _TOKEN.findall(text)


def date_source(day: datetime.date, locale: str = "en_US", fmt: str = "long") -> list[str]:
    """The tokens of ``day`` written by babel in ``locale`` with format ``fmt``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {FORMATS}")
    return tokenize_date(format_date(day, fmt, locale=locale))


def date_target(day: datetime.date) -> list[str]:
    """ISO 8601 ``YYYY-MM-DD``, one token per character."""
    return list(day.isoformat())


def target_to_date(tokens: list[str]) -> datetime.date:
    """Read target tokens back into a date (raises ``ValueError`` if they are not ISO 8601)."""
    return datetime.date.fromisoformat("".join(tokens))


def date_pairs(
    num_pairs: int,
    seed: int = 0,
    locales: tuple[str, ...] = LOCALES,
    formats: tuple[str, ...] = FORMATS,
    first: datetime.date = FIRST_DAY,
    last: datetime.date = LAST_DAY,
    exclude: set[datetime.date] | None = None,
) -> list[tuple[list[str], list[str]]]:
    """``num_pairs`` (written date tokens, ISO 8601 character tokens) pairs on distinct days.

    Each pair draws a day uniformly in ``[first, last]``, a locale and a format; the
    ambiguous combinations in :data:`AMBIGUOUS` are never drawn. Days in ``exclude`` are
    skipped, which keeps a test set apart::

        train = date_pairs(5000, seed=0)
        test = date_pairs(500, seed=1, exclude=dates_of(train))
    """
    styles = [(loc, fmt) for loc in locales for fmt in formats if (loc, fmt) not in AMBIGUOUS]
    if not styles:
        raise ValueError(f"no unambiguous (locale, format) pair among {locales} x {formats}")
    span = (last - first).days + 1
    seen = set(exclude or ())
    if num_pairs > span - len(seen & _days(first, last)):
        raise ValueError(f"cannot draw {num_pairs} distinct days between {first} and {last}")
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < num_pairs:
        day = first + datetime.timedelta(days=rng.randrange(span))
        if day in seen:
            continue
        seen.add(day)
        locale, fmt = rng.choice(styles)
        pairs.append((date_source(day, locale, fmt), date_target(day)))
    return pairs


def _days(first: datetime.date, last: datetime.date) -> set[datetime.date]:
    return {first + datetime.timedelta(days=k) for k in range((last - first).days + 1)}


def dates_of(pairs: list[tuple[list[str], list[str]]]) -> set[datetime.date]:
    """The days behind a list of pairs (to exclude them from another split)."""
    return {target_to_date(tgt) for _, tgt in pairs}
