"""Data sets, all generated on the spot (nothing is downloaded).

- :mod:`~attention_course.data.vocab`: tokens to ids and back, padded batches.
- :mod:`~attention_course.data.toy`: copy, reverse and sort tasks.
- :mod:`~attention_course.data.numbers`: number words, English to French or German.
- :mod:`~attention_course.data.dates`: dates in several locales and formats, to ISO 8601.
- :mod:`~attention_course.data.facts`: is sentence B a reordering of sentence A's facts?
- :mod:`~attention_course.data.digits`: scikit-learn's handwritten digits, rotated, scaled
  and shifted on a larger canvas (chapter 07).
"""

from attention_course.data.numbers import number_pairs, number_words
from attention_course.data.toy import toy_task
from attention_course.data.vocab import Batch, Vocab, make_batch

__all__ = ["Batch", "Vocab", "make_batch", "number_pairs", "number_words", "toy_task"]
