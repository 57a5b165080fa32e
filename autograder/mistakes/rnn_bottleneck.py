"""Chapter 01, the RNN bottleneck: its known mistakes (the format: ``autograder/mistakes/__init__.py``)."""

from autograder.mistakes import mistake

MISTAKES = [
    mistake(
        "encoder-reads-padding",
        "encoder",
        "the GRU runs over the padding (the batch is not packed), so a short source's final state has read pad tokens",
        (
            "        packed = pack_padded_sequence(x, src_lengths.cpu(), batch_first=True, enforce_sorted=False)\n"
            "        packed_states, h_n = self.rnn(packed)  # h_n: (1, B, H), in the batch's own order\n"
            "        states, _ = pad_packed_sequence(packed_states, batch_first=True, total_length=src.size(1))"
        ),
        "        states, h_n = self.rnn(x)  # the GRU runs over the padding too",
        "test_encoder",
    ),
    mistake(
        "encoder-needs-sorted-lengths",
        "encoder",
        "the encoder only works on a batch sorted by length, longest first, as some tutorials' "
        "batches are; the course's batches come in any order",
        "enforce_sorted=False",
        "enforce_sorted=True",
        "test_encoder",
    ),
    mistake(
        "encoder-final-from-last-column",
        "encoder",
        "the final state is read from the last column of the padded states instead of from h_n",
        "final = h_n[-1]",
        "final = states[:, -1]",
        "test_encoder",
    ),
    mistake(
        "logits-from-previous-state",
        "decoder",
        "the logits come from the previous state s_{t-1} instead of the new state s_t",
        ("        hidden = self.cell(y, hidden)  # s_t  (B, H)\n        logits = self.out(hidden)"),
        ("        logits = self.out(hidden)\n        hidden = self.cell(y, hidden)"),
        "test_decoder_step",
    ),
    mistake(
        "teacher-forcing-shifted-by-one",
        "seq2seq",
        "step t reads tgt_in[:, t - 1] instead of tgt_in[:, t]",
        "self.decode_step(tgt_in[:, t], hidden, memory)",
        "self.decode_step(tgt_in[:, t - 1], hidden, memory)",
        "test_teacher_forcing",
    ),
    mistake(
        "decoder-ignores-the-source",
        "seq2seq",
        "the decoder starts from zeros instead of the encoder's final state",
        "hidden = memory.final  # s_0",
        "hidden = torch.zeros_like(memory.final)  # s_0",
        "test_teacher_forcing",
    ),
    mistake(
        "loss-counts-padding",
        "sequence_loss",
        "the loss also averages over padding positions (no ignore_index)",
        "tgt_out.reshape(-1), ignore_index=pad_id)",
        "tgt_out.reshape(-1))",
        "test_sequence_loss",
    ),
    mistake(
        "loss-pad-id-hard-coded",
        "sequence_loss",
        "the loss skips the targets equal to 0 instead of the pad_id argument",
        "ignore_index=pad_id)",
        "ignore_index=0)",
        "test_sequence_loss",
    ),
    mistake(
        "greedy-does-not-stop-per-sequence",
        "greedy_decode",
        "a finished sequence goes on emitting tokens after its <eos> instead of padding",
        "logits.argmax(dim=-1).masked_fill(done, pad_id)",
        "logits.argmax(dim=-1)",
        "test_greedy_decode",
    ),
    mistake(
        "greedy-stops-at-first-eos",
        "greedy_decode",
        "decoding stops as soon as any sequence emits <eos>, not when all of them have",
        "if done.all():",
        "if done.any():",
        "test_greedy_decode",
    ),
    mistake(
        "greedy-feeds-bos-every-step",
        "greedy_decode",
        "the decoder is fed <bos> at every step instead of its own previous prediction",
        (
            "        prev = logits.argmax(dim=-1).masked_fill(done, pad_id)  # (B,)\n"
            "        tokens.append(prev)\n"
            "        done = done | (prev == eos_id)"
        ),
        (
            "        token = logits.argmax(dim=-1).masked_fill(done, pad_id)  # (B,)\n"
            "        tokens.append(token)\n"
            "        done = done | (token == eos_id)"
        ),
        "test_greedy_decode",
    ),
    mistake(
        "gru-one-bias",
        "gru_parameters",
        "the GRU's biases are undercounted: check how many bias vectors PyTorch's GRU keeps "
        "per gate",
        "3 * (E * H + H * H + 2 * H)",
        "3 * (E * H + H * H + H)",
        "test_gru_parameters",
    ),
    mistake(
        "gru-four-gates",
        "gru_parameters",
        "the GRU is counted with four blocks of weights, as if it had an LSTM's gates",
        "3 * (E * H + H * H + 2 * H)",
        "4 * (E * H + H * H + 2 * H)",
        "test_gru_parameters",
    ),
    mistake(
        "gru-one-block",
        "gru_parameters",
        "only the candidate state's weights are counted, not those of the two gates",
        "3 * (E * H + H * H + 2 * H)",
        "E * H + H * H + 2 * H",
        "test_gru_parameters",
    ),
    mistake(
        "steps-one-sequence-at-a-time",
        "sequential_steps",
        "the steps of every sequence are added up, as if the batch ran one sequence at a time",
        "max(src_lengths) + max(tgt_lengths)",
        "sum(src_lengths) + sum(tgt_lengths)",
        "test_sequential_steps",
    ),
    mistake(
        "steps-per-sequence",
        "sequential_steps",
        "each sequence's own source plus target length, as if its decoder started when its own source was read",
        "max(src_lengths) + max(tgt_lengths)",
        "max(s + t for s, t in zip(src_lengths, tgt_lengths))",
        "test_sequential_steps",
    ),
    mistake(
        "steps-stop-at-first-eos",
        "sequential_steps",
        "the decoder's steps are counted until the first sequence ends, not the last",
        "max(tgt_lengths)",
        "min(tgt_lengths)",
        "test_sequential_steps",
    ),
    mistake(
        "steps-encoder-one-call",
        "sequential_steps",
        "the encoder is counted as one step because nn.GRU is called once, but it runs a step per token",
        "max(src_lengths) + max(tgt_lengths)",
        "1 + max(tgt_lengths)",
        "test_sequential_steps",
    ),
]
