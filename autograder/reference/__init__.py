"""Reference implementations: the ground truth of hidden tests and the engine behind the
book's figures and the benchmarks. Models are named after what they implement; the
measurements behind a page's figures sit beside them:

- ``seq2seq``: an RNN encoder-decoder without attention (chapter 01);
- ``gradients``: how much a recurrent network's last state depends on early inputs
  (chapter 01's figure);
- ``bahdanau``: additive attention and a decoder that attends to the source (chapter 02);
- ``experiments``: the translation experiments of chapters 01 and 02, and chapter 02's GRU
  with attention that chapter 03 races against;
- ``convs2s``: convolutional sequence to sequence learning (chapter 03);
- ``attention``: scaled dot-product attention, masks, a self-attention layer (chapter 04);
- ``analysis``: the measurements behind chapter 04's figures;
- ``multi_head``: multi-head attention and exact attention in O(n) memory (chapter 05);
- ``decomposable``: decomposable attention for sentence pairs and an LSTM baseline
  (chapter 05);
- ``cost``: the measurements behind chapter 05's figures;
- ``transformer``: the Transformer, trained, decoded and taken apart (chapter 06);
- ``spatial``: spatial transformer networks (chapter 07);
- ``hard_attention``: soft against hard attention on the smallest case there is
  (chapter 07);
- ``language_model``: attention in today's decoder-only language models (chapter 08);
- ``vision_transformer``: the Vision Transformer and two ways to read it (chapter 09).
"""
