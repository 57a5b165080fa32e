"""Chapter 01's reference, and the measurement its last question is checked against.

Chapter 01's reference: the course hands it to chapter 02 and 03's experiments, so it
lives with the student kit (:mod:`attention_course.handed_out.rnn_bottleneck`); this module
keeps the grader's name for it."""

from attention_course.handed_out.rnn_bottleneck import (  # noqa: F401
    Decoder,
    Encoder,
    EncoderOutput,
    Seq2Seq,
    greedy_decode,
    lengths_to_mask,
    sequence_loss,
)


def measured_sequential_steps(src_lengths, tgt_lengths) -> tuple[int, int]:
    """(steps of the encoder's GRU, calls of decode_step) when greedy decoding translates a
    batch of sources of ``src_lengths`` into targets of ``tgt_lengths`` (each <eos> last):
    the chapter's encoder, counted by a hook on its GRU, and a scripted decoder."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class CountingTranslator(nn.Module):
        def __init__(self, tgt_lengths):
            super().__init__()
            self.encoder = Encoder(12, 4, 6)
            self.tgt_lengths = torch.tensor(tgt_lengths)
            self.encoder_steps, self.decoder_steps = 0, 0
            self.encoder.rnn.register_forward_hook(self.count_encoder_steps)

        def count_encoder_steps(self, rnn, inputs, outputs):
            self.encoder_steps += len(inputs[0].batch_sizes)  # one GRU step per time step

        def encode(self, src, src_lengths):
            states, final = self.encoder(src, src_lengths)  # (B, S, H), (B, H)
            return EncoderOutput(states, final, lengths_to_mask(src_lengths, src.size(1)))

        def decode_step(self, prev_token, hidden, memory):
            self.decoder_steps += 1
            said = torch.where(self.tgt_lengths == self.decoder_steps, 2, 5)  # (B,)
            return F.one_hot(said, 12).float(), hidden

    torch.manual_seed(0)
    model = CountingTranslator(tgt_lengths)
    lengths = torch.tensor(src_lengths)
    src = torch.randint(3, 12, (len(src_lengths), max(src_lengths)))
    src = src * (torch.arange(src.size(1))[None, :] < lengths[:, None])  # right-padded
    ids = greedy_decode(model, src, lengths, max_len=50)
    assert (ids == 2).sum(dim=1).tolist() == [1] * len(src_lengths)
    return model.encoder_steps, model.decoder_steps
