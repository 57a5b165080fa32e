"""Earlier chapters' code, as the course hands it to the chapters that build on it.

Chapter 02 trains its attention model with chapter 01's encoder and batches; chapter 03
races its ConvS2S against chapter 02's GRU with attention; chapter 06 builds the Transformer
from chapters 04 and 05's layers. Each module here is named after the chapter whose
exercises it answers (``rnn_bottleneck``: chapter 01, ``bahdanau_attention``: chapter 02,
``dot_product_attention``: chapter 04, ``multi_head_attention``: chapter 05), so that a kit
built for the chapters up to one (``python -m autograder kit --through CHAPTER``) leaves out the modules
of that chapter and of every later one: a student never receives the answers of a chapter
they are still to hand in. The reference implementations the grader uses are these same
modules (``autograder/reference/seq2seq.py`` and ``bahdanau.py`` re-export them).
"""
