"""A vocabulary with special tokens, encoding, decoding and padded batches.

Convention used throughout the course: id 0 is ``<pad>``, 1 is ``<bos>``, 2 is ``<eos>``,
3 is ``<unk>``. Target sequences are framed as ``<bos> y_1 ... y_t <eos>``; the decoder
reads ``tgt_in = <bos> y_1 ... y_t`` and is trained to predict
``tgt_out = y_1 ... y_t <eos>`` (teacher forcing).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)


class Vocab:
    """Maps tokens to integer ids and back.

    >>> v = Vocab.build([["a", "b"], ["b", "c"]])
    >>> v.decode(v.encode(["a", "c"]))
    ['a', 'c']
    """

    def __init__(self, tokens: Iterable[str]):
        self.itos: list[str] = list(SPECIALS)
        for tok in tokens:
            if tok not in SPECIALS and tok not in self.itos:
                self.itos.append(tok)
        self.stoi = {tok: i for i, tok in enumerate(self.itos)}

    @classmethod
    def build(cls, sequences: Iterable[Sequence[str]]) -> "Vocab":
        """A vocabulary of every token in ``sequences``, sorted so ids do not depend on order."""
        return cls(sorted({tok for seq in sequences for tok in seq}))

    pad_id = property(lambda self: self.stoi[PAD])
    bos_id = property(lambda self: self.stoi[BOS])
    eos_id = property(lambda self: self.stoi[EOS])
    unk_id = property(lambda self: self.stoi[UNK])

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: Sequence[str], bos: bool = False, eos: bool = False) -> list[int]:
        """Token ids; unknown tokens become ``<unk>``; optionally framed by ``<bos>``/``<eos>``."""
        ids = [self.stoi.get(tok, self.unk_id) for tok in tokens]
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode(self, ids: Iterable[int], strip: bool = True) -> list[str]:
        """Tokens for ``ids``. With ``strip``, stop at the first ``<eos>`` and drop
        ``<pad>`` and ``<bos>``."""
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise ValueError(f"id {i} is outside the vocabulary (size {len(self.itos)})")
            tok = self.itos[i]
            if strip and tok == EOS:
                break
            if strip and tok in (PAD, BOS):
                continue
            out.append(tok)
        return out


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = 0) -> torch.Tensor:
    """Stack id lists of different lengths into a ``(B, max_len)`` tensor, right-padded."""
    if len(seqs) == 0:
        raise ValueError("cannot pad an empty list of sequences")
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for b, s in enumerate(seqs):
        out[b, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


@dataclass
class Batch:
    """A padded batch of source/target pairs (batch-first).

    - ``src``: ``(B, S)`` source ids, right-padded with ``pad_id``
    - ``src_lengths``: ``(B,)`` true source lengths
    - ``tgt_in``: ``(B, T)`` ``<bos> y_1 .. y_t`` (decoder input under teacher forcing)
    - ``tgt_out``: ``(B, T)`` ``y_1 .. y_t <eos>`` (what the decoder must predict)
    """

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    def to(self, device) -> "Batch":
        return Batch(
            *(t.to(device) for t in (self.src, self.src_lengths, self.tgt_in, self.tgt_out))
        )


def make_batch(
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    reverse_source: bool = False,
) -> Batch:
    """Encode and pad ``(source tokens, target tokens)`` pairs into a :class:`Batch`.

    ``reverse_source`` feeds the source backwards (Sutskever et al. 2014's trick).
    """
    if len(pairs) == 0:
        raise ValueError("make_batch needs at least one (source, target) pair")
    src_ids = [src_vocab.encode(s[::-1] if reverse_source else s) for s, _ in pairs]
    if any(len(s) == 0 for s in src_ids):
        raise ValueError("every source sequence needs at least one token")
    tgt_ids = [tgt_vocab.encode(t, bos=True, eos=True) for _, t in pairs]
    tgt = pad_sequences(tgt_ids, tgt_vocab.pad_id)
    return Batch(
        src=pad_sequences(src_ids, src_vocab.pad_id),
        src_lengths=torch.tensor([len(s) for s in src_ids]),
        tgt_in=tgt[:, :-1].masked_fill(tgt[:, :-1] == tgt_vocab.eos_id, tgt_vocab.pad_id),
        tgt_out=tgt[:, 1:],
    )
