"""Number-word translation pairs, generated with num2words (nothing is downloaded).

English number words are the source; French or German number words the target::

    >>> number_words(97, "en"), number_words(97, "fr"), number_words(97, "de")
    (['ninety', 'seven'], ['quatre', 'vingt', 'dix', 'sept'], ['sieben', 'und', 'neunzig'])

German writes numbers below a million as one word ("siebenundneunzig"); we split it into
morphemes so that a token lines up with an English word, and the German order flip
("ninety-seven" -> "sieben und neunzig") is visible in an attention map.
"""

import random
import re
from functools import lru_cache

from num2words import num2words

LANGUAGES = ("en", "fr", "de")

# German morphemes, matched longest first. "eins"/"eine" before "ein" so that
# "eins" (final one) and "eine Million" stay whole.
_DE_MORPHEMES = sorted(
    [
        "null", "eins", "eine", "ein", "zwei", "drei", "vier", "fünf", "sechs", "sieben",
        "acht", "neun", "zehn", "elf", "zwölf", "sechzehn", "siebzehn", "zwanzig",
        "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig",
        "und", "hundert", "tausend", "million", "millionen", "milliarde", "milliarden",
    ],
    key=len,
    reverse=True,
)  # fmt: skip
_DE_PATTERN = re.compile("|".join(map(re.escape, _DE_MORPHEMES)))


def _split_german(word: str) -> list[str]:
    pieces = _DE_PATTERN.findall(word)
    if "".join(pieces) != word:
        raise ValueError(f"cannot split German number word {word!r} into morphemes")
    return pieces


def number_words(n: int, lang: str = "en") -> list[str]:
    """The tokens of ``n`` written out in ``lang`` ("en", "fr" or "de"), lower case,
    split at spaces and hyphens (German also into morphemes); commas dropped."""
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}; choose one of {LANGUAGES}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"need a non-negative integer, got {n!r}")
    return list(_tokens(n, lang))


@lru_cache(maxsize=1 << 16)
def _tokens(n: int, lang: str) -> tuple[str, ...]:
    """:func:`number_words`, remembered: num2words takes about a fifth of a millisecond a
    number, and one process often draws the same data set again (the tests run a
    chapter's cells once for each known mistake)."""
    text = num2words(n, lang=lang).lower().replace(",", "")
    tokens = [t for t in re.split(r"[\s\-]+", text) if t]
    if lang == "de":
        tokens = [piece for tok in tokens for piece in _split_german(tok)]
    return tuple(tokens)


def sample_number(rng: random.Random, max_digits: int) -> int:
    """A number whose digit count is uniform in ``[1, max_digits]``, so that short and long
    number words are equally common (uniform numbers would almost all be long)."""
    digits = rng.randint(1, max_digits)
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.randrange(low, 10**digits)


def number_pairs(
    num_pairs: int,
    tgt_lang: str = "fr",
    max_digits: int = 9,
    seed: int = 0,
    min_src_len: int = 1,
    max_src_len: int | None = None,
    exclude: set[int] | None = None,
) -> list[tuple[list[str], list[str]]]:
    """``num_pairs`` distinct (English tokens, ``tgt_lang`` tokens) pairs.

    Source lengths (in tokens) are kept within ``[min_src_len, max_src_len]``; numbers in
    ``exclude`` are skipped, which keeps a test set apart from the training set::

        train = number_pairs(5000, "fr", seed=0)
        test = number_pairs(500, "fr", seed=1, exclude=numbers_of(train))
    """
    if tgt_lang not in LANGUAGES or tgt_lang == "en":
        raise ValueError(f"target language must be 'fr' or 'de', got {tgt_lang!r}")
    if not 1 <= max_digits <= 12:
        raise ValueError(f"max_digits must be in [1, 12], got {max_digits}")
    rng = random.Random(seed)
    seen = set(exclude or ())
    pairs = []
    attempts = 0
    while len(pairs) < num_pairs:
        attempts += 1
        if attempts > 100 * num_pairs + 1000:
            raise ValueError(
                f"could only make {len(pairs)} of {num_pairs} distinct pairs with "
                f"max_digits={max_digits} and source length in [{min_src_len}, {max_src_len}]"
            )
        n = sample_number(rng, max_digits)
        if n in seen:
            continue
        src = number_words(n, "en")
        if len(src) < min_src_len or (max_src_len is not None and len(src) > max_src_len):
            continue
        seen.add(n)
        pairs.append((src, number_words(n, tgt_lang)))
    return pairs


_EN_VALUES = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen "
        "fourteen fifteen sixteen seventeen eighteen nineteen".split()
    )
}
_EN_VALUES.update(
    {
        w: 10 * (i + 2)
        for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())
    }
)
_EN_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}


def english_value(tokens: list[str]) -> int:
    """Read English number tokens back into an integer (the inverse of ``number_words(n, "en")``)."""
    total, current = 0, 0
    for tok in tokens:
        if tok == "and":
            continue
        if tok in _EN_VALUES:
            current += _EN_VALUES[tok]
        elif tok == "hundred":
            current *= 100
        elif tok in _EN_SCALES:
            total += current * _EN_SCALES[tok]
            current = 0
        else:
            raise ValueError(f"{tok!r} is not an English number word")
    return total + current


def numbers_of(pairs: list[tuple[list[str], list[str]]]) -> set[int]:
    """The integers behind a list of pairs (to exclude them from another split)."""
    return {english_value(src) for src, _ in pairs}
