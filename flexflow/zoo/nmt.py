"""NMT, the paper's LSTM encoder-decoder with attention (§8.1, Table 2; WMT English-German).

The model follows Wu et al., "Google's Neural Machine Translation System" (2016), at the size
FlexFlow ran it: source and target word ids (B, 40) -> one embedding each -> 2 encoder LSTM
layers over the source and 2 decoder LSTM layers over the target (4 in all), each unrolled 40
steps (§8.1) -> single-head attention of the top decoder states over the top encoder states ->
dense over the target vocabulary at every step -> softmax.

Sizes and where they come from:
- 2 encoder + 2 decoder layers, 40 steps, hidden 1024, embedding 1024, vocabulary 32K:
  flexflow/FlexFlow `nmt/nmt.cc` at 5e4871f6f (April 2018): `num_layers = 2; seq_length = 40;
  hidden_size = 1024; embed_size = 1024; vocab_size = 32 * 1024`, where `nmt/rnn.cu` builds
  `num_layers` encoder and `num_layers` decoder LSTM layers; FlexFlow's simulator
  (`scripts/simulator.cc` at 4e7e6e843) models the same NMT with `VOCAB_SIZE = 32000,
  EMBEDDING_SIZE = 1024, HIDDEN_SIZE = 1024`. 32,000 is used here; GNMT likewise uses 1024
  LSTM units and a 32K wordpiece vocabulary.
- attention: FlexFlow's 2018 code does not implement it (its simulator stands in an LSTM-sized
  op); here it is `multihead_attention` with one head and embed_dim = hidden size, i.e.
  projected dot-product attention, whose output feeds the vocabulary projection.

`FFModel.lstm` starts every layer from a zero state, so the decoder does not take the
encoder's final state as its initial state (FlexFlow's `nmt/rnn.cu` does); the decoder reaches
the encoder through the attention, which is where the real dependency and data transfer are.
"""

from __future__ import annotations

from flexflow.model import FFModel
from flexflow.ops import DType


def build(
    model: FFModel,
    seq_length: int = 40,
    vocab_size: int = 32_000,
    embed_size: int = 1024,
    hidden_size: int = 1024,
    num_layers: int = 2,
) -> None:
    """`num_layers` is per side: 2 encoder and 2 decoder layers by default."""
    batch = model.config.batch_size
    source = model.create_tensor((batch, seq_length), DType.INT32, name="source")  # (B, T)
    target = model.create_tensor((batch, seq_length), DType.INT32, name="target")  # (B, T)
    encoded = model.embedding(source, vocab_size, embed_size, name="source_embed")  # (B, T, E)
    decoded = model.embedding(target, vocab_size, embed_size, name="target_embed")  # (B, T, E)
    for layer in range(num_layers):
        encoded = model.lstm(encoded, hidden_size, name=f"encoder{layer + 1}")  # (B, T, H)
    for layer in range(num_layers):
        decoded = model.lstm(decoded, hidden_size, name=f"decoder{layer + 1}")  # (B, T, H)
    # each target step attends over every source step: (B, T_target, H)
    context = model.multihead_attention(decoded, encoded, encoded, hidden_size, 1, name="attention")
    logits = model.dense(context, vocab_size, name="projection")  # (B, T, V)
    model.softmax(logits, name="softmax")
