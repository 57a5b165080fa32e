"""Tests of chapters 01 and 02's reference code (RNN encoder-decoder, additive attention),
their data (number words, dates) and the shared translation experiment helpers."""

import datetime
import math

import matplotlib.pyplot as plt
import pytest
import torch

from attention_course.data.dates import (
    AMBIGUOUS,
    FORMATS,
    LOCALES,
    date_pairs,
    date_source,
    date_target,
    dates_of,
    target_to_date,
    tokenize_date,
)
from attention_course.data.numbers import number_words, numbers_of
from attention_course.data.vocab import make_batch
from attention_course.translation import (
    BUCKETS,
    AccuracyByLength,
    batch_sampler,
    bucket_index,
    date_translation_data,
    exact_match_by_length,
    number_translation_data,
    plot_accuracy_by_length,
    train_translation,
    translate,
    translate_with_attention,
)
from autograder.reference.bahdanau import (
    AdditiveScore,
    AttentionDecoder,
    Seq2SeqAttention,
    context,
    dot_score,
    general_score,
    greedy_decode_with_attention,
    masked_softmax,
)
from autograder.reference.seq2seq import (
    Decoder,
    Encoder,
    EncoderOutput,
    Seq2Seq,
    greedy_decode,
    lengths_to_mask,
    sequence_loss,
)

V_SRC, V_TGT, E, H = 11, 13, 8, 12


def padded_batch(lengths, S=None, vocab=V_SRC, seed=0):
    """Random ids (B, S) right-padded with 0 after each length."""
    g = torch.Generator().manual_seed(seed)
    S = S or max(lengths)
    src = torch.randint(4, vocab, (len(lengths), S), generator=g)
    lengths = torch.tensor(lengths)
    return src.masked_fill(~lengths_to_mask(lengths, S), 0), lengths


def small_models(seed=0):
    torch.manual_seed(seed)
    plain = Seq2Seq(Encoder(V_SRC, E, H), Decoder(V_TGT, E, H))
    attn = Seq2SeqAttention(Encoder(V_SRC, E, H), AttentionDecoder(V_TGT, E, H, d_attn=7))
    return plain.eval(), attn.eval()


# ---------------------------------------------------------------- chapter 01: encoder


def test_encoder_states_are_zero_at_padding_and_final_is_last_real_state():
    torch.manual_seed(0)
    enc = Encoder(V_SRC, E, H)
    src, lengths = padded_batch([3, 6, 1, 4], S=7)  # not sorted by length, extra padding column
    states, final = enc(src, lengths)
    assert states.shape == (4, 7, H) and final.shape == (4, H)
    for b, L in enumerate(lengths.tolist()):
        assert torch.all(states[b, L:] == 0), "states at padded positions must be exactly zero"
        # the sequence on its own, without padding
        alone, h_n = enc.rnn(enc.embedding(src[b : b + 1, :L]))
        torch.testing.assert_close(states[b, :L], alone[0])
        torch.testing.assert_close(final[b], h_n[0, 0])
        torch.testing.assert_close(final[b], states[b, L - 1])


def test_encoder_output_does_not_depend_on_padding_width():
    torch.manual_seed(0)
    enc = Encoder(V_SRC, E, H)
    src, lengths = padded_batch([2, 5])
    wide = torch.cat([src, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    s1, f1 = enc(src, lengths)
    s2, f2 = enc(wide, lengths)
    torch.testing.assert_close(f1, f2)
    torch.testing.assert_close(s2[:, :5], s1)


def test_lengths_to_mask():
    mask = lengths_to_mask(torch.tensor([1, 3]), 4)
    assert mask.tolist() == [[True, False, False, False], [True, True, True, False]]


# ---------------------------------------------------------------- chapter 01: decoder, loss, model


def test_decoder_step_shapes_and_equation():
    torch.manual_seed(0)
    dec = Decoder(V_TGT, E, H)
    prev, hidden = torch.tensor([1, 5, 7]), torch.randn(3, H)
    logits, new_hidden = dec.step(prev, hidden)
    assert logits.shape == (3, V_TGT) and new_hidden.shape == (3, H)
    expected_hidden = dec.cell(dec.embedding(prev), hidden)
    torch.testing.assert_close(new_hidden, expected_hidden)
    torch.testing.assert_close(logits, dec.out(expected_hidden))


def test_seq2seq_teacher_forcing_matches_stepping_by_hand():
    plain, _ = small_models()
    src, lengths = padded_batch([4, 2, 5])
    tgt_in = torch.randint(4, V_TGT, (3, 6))
    logits = plain(src, lengths, tgt_in)
    assert logits.shape == (3, 6, V_TGT)
    _, hidden = plain.encoder(src, lengths)
    for t in range(6):
        step_logits, hidden = plain.decoder.step(tgt_in[:, t], hidden)
        torch.testing.assert_close(logits[:, t], step_logits)


def test_seq2seq_step_t_only_sees_tokens_up_to_t():
    plain, attn = small_models()
    src, lengths = padded_batch([4, 2])
    tgt_in = torch.randint(4, V_TGT, (2, 6))
    changed = tgt_in.clone()
    changed[:, 3:] = 4
    for model in (plain, attn):
        a = model(src, lengths, tgt_in)
        b = model(src, lengths, changed)
        a, b = (a[0], b[0]) if isinstance(a, tuple) else (a, b)
        torch.testing.assert_close(a[:, :3], b[:, :3])


def test_sequence_loss_ignores_padding():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, V_TGT)
    tgt = torch.tensor([[5, 6, 2, 0], [7, 2, 0, 0]])
    loss = sequence_loss(logits, tgt)
    real = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    expected = -sum(torch.log_softmax(logits[b, t], -1)[tgt[b, t]] for b, t in real) / len(real)
    torch.testing.assert_close(loss, expected)
    noisy = logits.clone()
    noisy[tgt == 0] = 100 * torch.randn(3, V_TGT)  # whatever the model says at padding
    torch.testing.assert_close(sequence_loss(noisy, tgt), loss)


# ---------------------------------------------------------------- chapter 01: greedy decoding


class Scripted(torch.nn.Module):
    """A fake model that says ``scripts[b][t]`` at step t (token 9 after the script ends),
    following the encode / decode_step interface."""

    def __init__(self, scripts, vocab=12):
        super().__init__()
        self.scripts, self.vocab, self.calls = scripts, vocab, 0

    def encode(self, src, src_lengths):
        B, S = src.shape
        return EncoderOutput(
            torch.zeros(B, S, 1), torch.zeros(B, 1), lengths_to_mask(src_lengths, S)
        )

    def decode_step(self, prev, hidden, memory):
        t = int(hidden[0, 0])
        self.calls += 1
        tokens = [s[t] if t < len(s) else 9 for s in self.scripts]
        return torch.nn.functional.one_hot(torch.tensor(tokens), self.vocab).float(), hidden + 1


def test_greedy_decode_stops_each_sequence_at_its_eos():
    model = Scripted([[5, 6, 2], [7, 2], [4, 4, 4, 2]])
    src, lengths = padded_batch([2, 3, 1])
    out = greedy_decode(model, src, lengths, max_len=10)
    assert out.tolist() == [[5, 6, 2, 0], [7, 2, 0, 0], [4, 4, 4, 2]]
    assert model.calls == 4, "decoding should stop as soon as every sequence has emitted <eos>"


def test_greedy_decode_runs_to_max_len_without_eos():
    model = Scripted([[5, 5, 5, 5, 5, 5], [2]])
    src, lengths = padded_batch([2, 2])
    out = greedy_decode(model, src, lengths, max_len=3)
    assert out.tolist() == [[5, 5, 5], [2, 0, 0]]


def test_greedy_decode_agrees_with_teacher_forcing_on_its_own_output():
    for model in small_models(seed=3):
        src, lengths = padded_batch([5, 3, 4], seed=1)
        ids = greedy_decode(model, src, lengths, max_len=6)
        tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), ids[:, :-1]], dim=1)
        out = model(src, lengths, tgt_in)
        logits = out[0] if isinstance(out, tuple) else out
        argmax = logits.argmax(-1)
        for b in range(3):
            row = ids[b].tolist()
            end = row.index(2) + 1 if 2 in row else len(row)
            assert argmax[b, :end].tolist() == row[:end]


# ---------------------------------------------------------------- chapter 02: scores, softmax, context


def test_additive_score_on_a_hand_example():
    score = AdditiveScore(d_query=2, d_key=3, d_attn=2)
    with torch.no_grad():
        score.W.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        score.U.weight.copy_(torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
        score.v.weight.copy_(torch.tensor([[1.0, -1.0]]))
    s = torch.tensor([[0.5, -0.25]])  # W s = [0.5, -0.5]
    h = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])  # U h_1 = [1, 0], U h_2 = [0, 1]
    expected = torch.tensor([[math.tanh(1.5) - math.tanh(-0.5), math.tanh(0.5) - math.tanh(0.5)]])
    torch.testing.assert_close(score(s, h), expected)
    torch.testing.assert_close(score(s, h, keys=score.project_keys(h)), expected)


def test_additive_score_matches_formula_on_random_batches():
    torch.manual_seed(0)
    score = AdditiveScore(5, 4, 3)
    s, h = torch.randn(2, 5), torch.randn(2, 6, 4)
    out = score(s, h)
    assert out.shape == (2, 6)
    for b in range(2):
        for j in range(6):
            e = score.v.weight[0] @ torch.tanh(score.W.weight @ s[b] + score.U.weight @ h[b, j])
            torch.testing.assert_close(out[b, j], e)


def test_masked_softmax_ignores_padding():
    scores = torch.tensor([[1.0, 2.0, 3.0, 50.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    w = masked_softmax(scores, mask)
    torch.testing.assert_close(w[0, :3], torch.softmax(torch.tensor([1.0, 2.0, 3.0]), -1))
    torch.testing.assert_close(w[1], torch.tensor([0.5, 0.5, 0.0, 0.0]))
    assert torch.all(w[~mask] == 0)


def test_masked_softmax_one_real_token_and_fully_masked_rows():
    scores = torch.randn(3, 5, requires_grad=True)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[0, 0] = True  # all padding but one
    mask[2] = True
    w = masked_softmax(scores, mask)
    torch.testing.assert_close(w[0], torch.tensor([1.0, 0, 0, 0, 0]))
    torch.testing.assert_close(w[1], torch.zeros(5))  # nothing to attend to: zeros, not NaN
    torch.testing.assert_close(w[2].sum(), torch.tensor(1.0))
    (w * torch.randn(3, 5)).sum().backward()
    assert torch.isfinite(scores.grad).all()


def test_context_is_the_weighted_sum():
    weights = torch.tensor([[0.25, 0.75, 0.0]])
    states = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    torch.testing.assert_close(context(weights, states), torch.tensor([[2.5, 3.5]]))


def test_luong_scores_match_explicit_formulas():
    torch.manual_seed(0)
    s, h = torch.randn(2, 4), torch.randn(2, 3, 4)
    h5 = torch.randn(2, 3, 5)
    W_rect = torch.randn(4, 5)
    dot, general = dot_score(s, h), general_score(s, h5, W_rect)
    assert dot.shape == (2, 3) and general.shape == (2, 3)
    for b in range(2):
        for j in range(3):
            torch.testing.assert_close(dot[b, j], s[b] @ h[b, j])
            torch.testing.assert_close(general[b, j], s[b] @ W_rect @ h5[b, j])
    torch.testing.assert_close(general_score(s, h, torch.eye(4)), dot_score(s, h))


# ---------------------------------------------------------------- chapter 02: attention decoder and model


@pytest.mark.parametrize("score", ["additive", "dot", "general"])
def test_attention_decoder_step(score):
    torch.manual_seed(0)
    dec = AttentionDecoder(V_TGT, E, H, score=score)
    enc_states, mask = torch.randn(2, 5, H), lengths_to_mask(torch.tensor([5, 2]), 5)
    hidden = torch.randn(2, H)
    logits, new_hidden, weights = dec.step(torch.tensor([1, 1]), hidden, enc_states, mask)
    assert logits.shape == (2, V_TGT) and new_hidden.shape == (2, H) and weights.shape == (2, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2))
    assert torch.all(weights[1, 2:] == 0)
    # Bahdanau: the weights are computed from the previous state s_{i-1}
    expected = masked_softmax(dec.score(hidden, enc_states), mask)
    torch.testing.assert_close(weights, expected)


def test_attention_model_weights_and_padding_invariance():
    _, attn = small_models()
    src, lengths = padded_batch([4, 1, 3])
    tgt_in = torch.randint(4, V_TGT, (3, 5))
    logits, weights = attn(src, lengths, tgt_in)
    assert logits.shape == (3, 5, V_TGT) and weights.shape == (3, 5, 4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5))
    assert torch.all(weights[~lengths_to_mask(lengths, 4)[:, None, :].expand(-1, 5, -1)] == 0)
    # a source with one real token gives it all the weight
    torch.testing.assert_close(weights[1, :, 0], torch.ones(5))
    wide = torch.cat([src, torch.zeros(3, 3, dtype=torch.long)], dim=1)
    logits2, weights2 = attn(wide, lengths, tgt_in)
    torch.testing.assert_close(logits2, logits)
    torch.testing.assert_close(weights2[:, :, :4], weights)


def test_greedy_decode_with_attention_returns_weights():
    plain, attn = small_models()
    src, lengths = padded_batch([4, 2])
    ids, weights = greedy_decode_with_attention(attn, src, lengths, max_len=5)
    assert ids.shape[0] == 2 and weights.shape == (2, ids.shape[1], 4)
    torch.testing.assert_close(ids, greedy_decode(attn, src, lengths, max_len=5))
    assert torch.all(weights[1, :, 2:] == 0)
    with pytest.raises(ValueError, match="attention weights"):
        greedy_decode(plain, src, lengths, max_len=5, return_weights=True)


# ---------------------------------------------------------------- data: numbers and dates


def test_german_number_words_are_split_into_morphemes():
    assert number_words(21, "de") == ["ein", "und", "zwanzig"]
    assert number_words(21, "en") == ["twenty", "one"]
    assert number_words(97, "fr") == ["quatre", "vingt", "dix", "sept"]


def test_date_pairs_targets_are_iso_8601():
    pairs = date_pairs(300, seed=0)
    assert len(pairs) == 300 and len(dates_of(pairs)) == 300
    for src, tgt in pairs:
        day = target_to_date(tgt)
        assert "".join(tgt) == day.isoformat() and len(tgt) == 10
        assert datetime.date(1950, 1, 1) <= day <= datetime.date(2049, 12, 31)
        assert src and all(tok.strip() == tok and tok for tok in src)
    assert date_pairs(50, seed=3) == date_pairs(50, seed=3)


def test_date_sources_in_several_languages_and_formats():
    day = datetime.date(2015, 3, 4)
    assert date_source(day, "es_ES", "full") == ["miércoles", ",", "4", "de", "marzo", "de", "2015"]
    assert date_source(day, "de_DE", "short") == ["04", ".", "03", ".", "15"]
    assert date_source(day, "en_US", "long") == ["March", "4", ",", "2015"]
    assert date_target(day) == list("2015-03-04")
    assert tokenize_date("4 de mar. de 2015") == ["4", "de", "mar", ".", "de", "2015"]


def test_date_pairs_never_give_one_source_two_dates():
    seen = {}
    styles = [(loc, fmt) for loc in LOCALES for fmt in FORMATS if (loc, fmt) not in AMBIGUOUS]
    for k in range(0, 36500, 37):  # a spread of days over the whole range
        day = datetime.date(1950, 1, 1) + datetime.timedelta(days=k)
        for loc, fmt in styles:
            src = tuple(date_source(day, loc, fmt))
            assert seen.setdefault(src, day) == day, f"{src} is both {seen[src]} and {day}"


def test_date_pairs_exclude_keeps_splits_apart():
    train = date_pairs(200, seed=0)
    test = date_pairs(100, seed=1, exclude=dates_of(train))
    assert not dates_of(train) & dates_of(test)


# ---------------------------------------------------------------- translation helpers


@pytest.fixture(scope="module")
def tiny_data():
    return number_translation_data("de", num_train=300, test_per_bucket=4, seed=0)


def test_number_translation_data_splits(tiny_data):
    data = tiny_data
    assert len(data.train) == 300 and len(data.test) == 4 * len(BUCKETS)
    assert not numbers_of(data.train) & numbers_of(data.test)
    counts = [sum(bucket_index(len(src)) == k for src, _ in data.test) for k in range(len(BUCKETS))]
    assert counts == [4] * len(BUCKETS)
    assert data.src_vocab.encode(["twenty"])[0] != data.src_vocab.unk_id
    assert "number words" in repr(data)


def test_batch_sampler_is_deterministic_and_covers_an_epoch(tiny_data):
    data = tiny_data
    a = batch_sampler(data.train, data.src_vocab, data.tgt_vocab, batch_size=10, seed=1)
    b = batch_sampler(data.train, data.src_vocab, data.tgt_vocab, batch_size=10, seed=1)
    batches = [a(step) for step in range(30)]
    for x, y in zip(batches, [b(step) for step in range(30)], strict=True):
        assert torch.equal(x.src, y.src) and torch.equal(x.tgt_out, y.tgt_out)
    assert all(x.src.size(0) == 10 for x in batches)
    sources = {tuple(row[row != 0].tolist()) for x in batches for row in x.src}
    assert len(sources) == len({tuple(data.src_vocab.encode(s)) for s, _ in data.train})


def test_exact_match_by_length_with_oracle_and_wrong_decoders(tiny_data):
    data = tiny_data
    answers = {
        tuple(data.src_vocab.encode(s)): data.tgt_vocab.encode(t, eos=True) for s, t in data.test
    }

    def oracle(src, src_lengths, max_len):
        rows = [answers[tuple(row[:n].tolist())] for row, n in zip(src, src_lengths, strict=True)]
        return make_batch([(["x"], ["x"])], data.src_vocab, data.tgt_vocab).src.new_tensor(
            [r + [0] * (max_len - len(r)) for r in rows]
        )

    result = exact_match_by_length(oracle, data.test, data)
    assert isinstance(result, AccuracyByLength)
    assert result.accuracy == [1.0] * len(BUCKETS) and result.overall == 1.0
    assert result.counts == [4] * len(BUCKETS)
    wrong = exact_match_by_length(
        lambda src, lengths, max_len: torch.full((len(src), 3), 2), data.test, data
    )
    assert wrong.overall == 0.0
    assert "overall" in str(result) and result.as_dict()["overall"] == 1.0


def test_exact_match_needs_a_decode_fn_with_a_model(tiny_data):
    plain, _ = small_models()
    with pytest.raises(TypeError, match="decode_fn"):
        exact_match_by_length(plain, tiny_data.test, tiny_data)


def test_train_translation_and_evaluation_run_on_the_reference_models(tiny_data):
    data = tiny_data
    for attention in (False, True):
        torch.manual_seed(0)
        enc = Encoder(len(data.src_vocab), 8, 16)
        if attention:
            model = Seq2SeqAttention(enc, AttentionDecoder(len(data.tgt_vocab), 8, 16))
        else:
            model = Seq2Seq(enc, Decoder(len(data.tgt_vocab), 8, 16))
        history = train_translation(
            model,
            data,
            sequence_loss,
            seconds=20,
            max_steps=5,
            batch_size=16,
            progress=False,
            reverse_source=not attention,
        )
        assert len(history.steps) == 5 and all(math.isfinite(x) for x in history.losses)
        result = exact_match_by_length(
            model, data.test, data, decode_fn=greedy_decode, reverse_source=not attention
        )
        assert len(result.accuracy) == len(BUCKETS) and 0.0 <= result.overall <= 1.0
        outputs = translate(model, [["twenty", "one"]], data, decode_fn=greedy_decode, max_len=4)
        assert len(outputs) == 1 and len(outputs[0]) <= 4


def test_translate_with_attention_gives_one_row_per_output_token(tiny_data):
    torch.manual_seed(0)
    data = tiny_data
    model = Seq2SeqAttention(
        Encoder(len(data.src_vocab), 8, 16), AttentionDecoder(len(data.tgt_vocab), 8, 16)
    )
    tokens, weights = translate_with_attention(
        model, ["twenty", "one"], data, decode_fn=greedy_decode_with_attention, max_len=6
    )
    assert weights.shape == (len(tokens), 2) and 1 <= len(tokens) <= 6
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(tokens)))


def test_date_translation_data():
    data = date_translation_data(num_train=200, num_test=50, seed=0)
    assert not dates_of(data.train) & dates_of(data.test)
    assert all(bucket_index(len(src), data.buckets) is not None for src, _ in data.test)


def test_plot_accuracy_by_length():
    fig = plot_accuracy_by_length({"a": [1.0, 0.9, 0.8, 0.7, 0.6], "b": [1.0] * 5}, title="t")
    assert len(fig.axes[0].lines) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="buckets"):
        plot_accuracy_by_length({"a": [1.0, 0.9]})
