"""RNNTC, the paper's 4-layer LSTM text classifier (§8.1, Table 2; Movie Reviews).

Word ids (B, 40) -> embedding -> 4 LSTM layers, each unrolled 40 steps (§8.1) -> the last
step's hidden state of the top layer -> dense to the classes -> softmax.

Sizes and where they come from:
- hidden 1024, embedding 1024: FlexFlow's own RNN code of the paper's time uses 1024 for both,
  with 40 unrolled steps (flexflow/FlexFlow `nmt/nmt.cc` at 5e4871f6f, April 2018:
  `seq_length = 40; hidden_size = 1024; embed_size = 1024`; `scripts/simulator.cc` at
  4e7e6e843: `EMBEDDING_SIZE = 1024; HIDDEN_SIZE = 1024`). That code builds the NMT model; the
  repository has no RNNTC code, and the paper gives no RNNTC sizes, so the same RNN sizes are
  assumed here.
- 2 classes: Movie Reviews (Pang and Lee 2005 sentence polarity) is positive/negative.
- vocabulary 20,000: not found in FlexFlow's code or paper. The Movie Reviews sentence data
  has about 18.8K distinct words (Kim 2014, Table 1, |V| = 18,765, quoted from memory and not
  checked against the paper here); 20,000 rounds that up.
"""

from __future__ import annotations

from flexflow.model import FFModel
from flexflow.ops import DType


def build(
    model: FFModel,
    seq_length: int = 40,
    vocab_size: int = 20_000,
    embed_size: int = 1024,
    hidden_size: int = 1024,
    num_layers: int = 4,
    num_classes: int = 2,
) -> None:
    batch = model.config.batch_size
    words = model.create_tensor((batch, seq_length), DType.INT32, name="words")  # (B, T)
    x = model.embedding(words, vocab_size, embed_size, name="embed")  # (B, T, E)
    for layer in range(num_layers):
        last = layer == num_layers - 1
        # (B, T, H) for the lower layers; the top layer returns only its last step: (B, H)
        x = model.lstm(x, hidden_size, return_sequences=not last, name=f"lstm{layer + 1}")
    x = model.dense(x, num_classes, name="classifier")  # (B, classes)
    model.softmax(x, name="softmax")
