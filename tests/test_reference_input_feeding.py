"""Tests of chapter 02's reference input feeding (Luong et al. 2015, section 3.3), in the
form the course's decoder allows: s_i = GRU([E y_{i-1}; c_i; c_{i-1}], s_{i-1}), c_0 = 0.
The shapes, the fed context reaching the next step (and nothing reaching it without input
feeding), the parameter count, teacher forcing against step-by-step decoding, and the
default leaving the decoder as it was."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from attention_course.translation import FULL_SETTINGS
from autograder.reference.bahdanau import (
    AttentionDecoder,
    Seq2SeqAttention,
    greedy_decode_with_attention,
)
from autograder.reference.experiments import build
from autograder.reference.seq2seq import Encoder, lengths_to_mask, sequence_loss

V_SRC, V_TGT, E, H_DEC, H_ENC, A = 9, 11, 4, 6, 5, 3


def decoder(input_feeding=True, attention="global", d_enc=H_ENC, seed=0):
    torch.manual_seed(seed)
    return AttentionDecoder(
        V_TGT,
        E,
        H_DEC,
        d_enc=d_enc,
        d_attn=A,
        attention=attention,
        window=1,
        input_feeding=input_feeding,
    )


def source(B=3, S=7, d_enc=H_ENC, seed=1):
    """Random encoder states (B, S, d_enc), zero at padding, and their mask (B, S)."""
    g = torch.Generator().manual_seed(seed)
    mask = lengths_to_mask(torch.tensor([S, S - 3, 1][:B]), S)
    states = torch.randn(B, S, d_enc, generator=g) * mask[:, :, None]
    return states, mask


def model(input_feeding=True, attention="global", seed=0):
    torch.manual_seed(seed)
    dec = AttentionDecoder(
        V_TGT, E, H_DEC, d_attn=A, attention=attention, window=1, input_feeding=input_feeding
    )
    return Seq2SeqAttention(Encoder(V_SRC, E, H_DEC), dec).eval()


def padded_source(lengths=(8, 5, 2), seed=2):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    src = torch.randint(3, V_SRC, (len(lengths), int(lengths.max())), generator=g)
    return src.masked_fill(~lengths_to_mask(lengths, src.size(1)), 0), lengths


@pytest.mark.parametrize("attention", ["global", "local-p"])
def test_shapes_of_a_step_and_of_the_state(attention):
    dec = decoder(attention=attention)
    h, mask = source()
    prev = torch.tensor([1, 4, 7])
    # the first step takes a bare s_0 and starts with c_0 = 0
    logits, state, alpha = dec.step(prev, torch.randn(3, H_DEC), h, mask)
    assert logits.shape == (3, V_TGT) and alpha.shape == (3, 7)
    s, c = state
    assert s.shape == (3, H_DEC) and c.shape == (3, H_ENC)
    torch.testing.assert_close(c, (alpha[:, :, None] * h).sum(1))  # what is fed is c_i
    # later steps take and return the pair (s_{i-1}, c_{i-1})
    logits, (s, c), alpha = dec.step(prev, state, h, mask)
    assert logits.shape == (3, V_TGT) and s.shape == (3, H_DEC) and c.shape == (3, H_ENC)
    # without input feeding the state stays a bare s
    logits, s, alpha = decoder(input_feeding=False).step(prev, torch.randn(3, H_DEC), h, mask)
    assert isinstance(s, torch.Tensor) and s.shape == (3, H_DEC)


@pytest.mark.parametrize("input_feeding", [True, False])
def test_the_fed_context_reaches_the_next_step_only_with_input_feeding(input_feeding):
    """Step 1 reads one copy of the source, step 2 another, and s_1 is detached: the only
    path left from step 1's attention to step 2's output is the fed c_1."""
    dec = decoder(input_feeding=input_feeding)
    h, mask = source()
    h1 = h.clone().requires_grad_()
    prev = torch.tensor([3, 4, 5])
    _, state, _ = dec.step(prev, torch.randn(3, H_DEC), h1, mask)
    state = (state[0].detach(), state[1]) if input_feeding else state.detach()
    logits, _, _ = dec.step(prev, state, h.clone(), mask)
    logits.square().sum().backward()
    if input_feeding:
        assert h1.grad is not None and h1.grad[mask].abs().sum() > 0
    else:
        assert h1.grad is None, "step 1's attention reached step 2 without input feeding"


def test_changing_the_fed_vector_changes_the_next_output():
    dec = decoder()
    h, mask = source()
    prev, s = torch.tensor([3, 4, 5]), torch.randn(3, H_DEC)
    c = torch.randn(3, H_ENC)
    logits, (s_next, _), alpha = dec.step(prev, (s, c), h, mask)
    logits2, (s_next2, _), alpha2 = dec.step(prev, (s, c + 1.0), h, mask)
    assert not torch.allclose(logits, logits2) and not torch.allclose(s_next, s_next2)
    # the fed vector enters the GRU, after this step's attention: the weights do not move
    torch.testing.assert_close(alpha, alpha2)


@pytest.mark.parametrize("attention", ["global", "local-p"])
def test_with_a_zero_fed_vector_the_step_is_the_one_without_input_feeding(attention):
    """Input feeding only adds GRU input columns: with their weights copied and c_{i-1} = 0,
    the step is exactly the decoder's without input feeding."""
    plain, fed = decoder(False, attention), decoder(True, attention, seed=1)
    state = plain.state_dict()
    state["cell.weight_ih"] = torch.cat(
        [state["cell.weight_ih"], fed.cell.weight_ih[:, E + H_ENC :].detach()], dim=1
    )
    fed.load_state_dict(state)
    h, mask = source()
    prev, s = torch.tensor([3, 4, 5]), torch.randn(3, H_DEC)
    expected, s_plain, alpha_plain = plain.step(prev, s, h, mask)
    logits, (s_fed, _), alpha_fed = fed.step(prev, s, h, mask)  # bare s_0: c_0 = 0
    torch.testing.assert_close(logits, expected)
    torch.testing.assert_close(s_fed, s_plain)
    torch.testing.assert_close(alpha_fed, alpha_plain)


@pytest.mark.parametrize("attention", ["global", "local-p"])
@pytest.mark.parametrize("d_enc", [H_ENC, 8])
def test_parameters_grow_by_the_extra_input_columns_only(attention, d_enc):
    def count(m):
        return sum(p.numel() for p in m.parameters())

    plain, fed = decoder(False, attention, d_enc), decoder(True, attention, d_enc)
    # d_enc more input columns in the GRU's three gates, W_ir, W_iz and W_in
    assert count(fed) - count(plain) == 3 * H_DEC * d_enc
    assert fed.cell.weight_ih.shape == (3 * H_DEC, E + 2 * d_enc)
    shapes = {n: p.shape for n, p in plain.named_parameters() if n != "cell.weight_ih"}
    assert shapes == {n: p.shape for n, p in fed.named_parameters() if n != "cell.weight_ih"}


@pytest.mark.parametrize("attention", ["global", "local-p"])
def test_teacher_forcing_equals_step_by_step_decoding(attention):
    """Greedy decoding feeds each step's own output; teacher forcing on those same tokens
    must give the same logits, choices and weights at every step."""
    m = model(attention=attention)
    src, lengths = padded_source()
    ids, weights = greedy_decode_with_attention(m, src, lengths, max_len=6, eos_id=99)
    assert ids.shape == (3, 6) and weights.shape == (3, 6, src.size(1))
    tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), ids[:, :-1]], dim=1)  # <bos>, ...
    with torch.no_grad():
        logits, forced_weights = m(src, lengths, tgt_in)
        memory = m.encode(src, lengths)
        hidden, stepped = memory.final, []
        for t in range(tgt_in.size(1)):
            step_logits, hidden, _ = m.decode_step(tgt_in[:, t], hidden, memory)
            stepped.append(step_logits)
    assert torch.equal(logits.argmax(-1), ids)
    torch.testing.assert_close(forced_weights, weights)
    torch.testing.assert_close(logits, torch.stack(stepped, dim=1))


def test_training_reaches_the_fed_columns():
    m = model().train()
    src, lengths = padded_source()
    tgt = torch.randint(3, V_TGT, (3, 5))
    logits, weights = m(src, lengths, tgt)
    assert logits.shape == (3, 5, V_TGT) and weights.shape == (3, 5, src.size(1))
    sequence_loss(logits, tgt).backward()
    fed_columns = m.decoder.cell.weight_ih.grad[:, E + H_DEC :]  # the columns of c_{i-1}
    assert fed_columns.abs().sum() > 0


def test_the_default_is_the_decoder_without_input_feeding():
    torch.manual_seed(0)
    default = AttentionDecoder(V_TGT, E, H_DEC, d_attn=A)
    assert default.input_feeding is False
    plain = decoder(input_feeding=False, d_enc=H_DEC)
    for (n1, p1), (n2, p2) in zip(
        default.named_parameters(), plain.named_parameters(), strict=True
    ):
        assert n1 == n2 and torch.equal(p1, p2)


def test_the_experiments_build_it_by_name():
    data = SimpleNamespace(src_vocab=range(V_SRC), tgt_vocab=range(V_TGT))  # only len() is read
    cfg = replace(FULL_SETTINGS, d_emb=E, d_hidden=H_DEC, d_attn=A)
    assert build("attention, input feeding", data, cfg).decoder.input_feeding is True
    assert build("attention", data, cfg).decoder.input_feeding is False
