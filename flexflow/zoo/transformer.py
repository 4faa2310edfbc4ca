"""A BERT-base-like Transformer encoder classifier: attention beyond the paper's six models (§8.1).

Devlin et al., "BERT" (2019), base size: token and position embeddings (two embedding layers on
two int inputs, added), layer norm, dropout, then 12 post-norm encoder layers of
multihead_attention (12 heads, hidden 768) -> dropout -> add -> layer norm -> dense 3072 GELU
-> dense 768 -> dropout -> add -> layer norm, at sequence length 128 with the 30,522-word
uncased WordPiece vocabulary. The pooler takes the first ([CLS]) token with `split` along the
length axis (not a mean over tokens), as BERT does, then dense 768 tanh -> dense to the
classes -> softmax.

Differences from BERT-base: no token-type (segment) embedding (2 x 768 parameters) and the
attention-probability dropout is left out (`multihead_attention` takes none); the position
table has BERT's 512 rows and the position ids are a second int input.
"""

from __future__ import annotations

from flexflow.layers import Tensor
from flexflow.model import FFModel
from flexflow.ops import ActiMode, DType

LENGTH = 1
"""The length (token) axis of a (sample, length, features) sequence."""

MAX_POSITIONS = 512
"""BERT's `max_position_embeddings`: rows of the position table."""


def _encoder_layer(
    model: FFModel, x: Tensor, layer: int, heads: int, ff_size: int, dropout: float
) -> Tensor:
    name, hidden = f"layer{layer}", x.shape[-1]
    attn = model.multihead_attention(x, x, x, hidden, heads, name=f"{name}_attention")
    attn = model.dropout(attn, dropout, seed=2 * layer + 1, name=f"{name}_attention_dropout")
    x = model.layer_norm(
        model.add(x, attn, name=f"{name}_attention_add"), name=f"{name}_attention_norm"
    )
    ff = model.dense(x, ff_size, ActiMode.AC_MODE_GELU, name=f"{name}_ff1")  # (B, T, 3072)
    ff = model.dense(ff, hidden, name=f"{name}_ff2")  # (B, T, 768)
    ff = model.dropout(ff, dropout, seed=2 * layer + 2, name=f"{name}_ff_dropout")
    return model.layer_norm(model.add(x, ff, name=f"{name}_ff_add"), name=f"{name}_ff_norm")


def build(
    model: FFModel,
    seq_length: int = 128,
    vocab_size: int = 30_522,
    hidden_size: int = 768,
    num_layers: int = 12,
    num_heads: int = 12,
    ff_size: int = 3072,
    num_classes: int = 2,
    dropout: float = 0.1,
) -> None:
    batch = model.config.batch_size
    tokens = model.create_tensor((batch, seq_length), DType.INT32, name="tokens")  # (B, T)
    positions = model.create_tensor((batch, seq_length), DType.INT32, name="positions")
    x = model.add(
        model.embedding(tokens, vocab_size, hidden_size, name="token_embed"),  # (B, T, H)
        model.embedding(
            positions, max(MAX_POSITIONS, seq_length), hidden_size, name="position_embed"
        ),
        name="embed_add",
    )
    x = model.layer_norm(x, name="embed_norm")
    x = model.dropout(x, dropout, seed=0, name="embed_dropout")
    for layer in range(num_layers):
        x = _encoder_layer(model, x, layer, num_heads, ff_size, dropout)
    if seq_length > 1:
        first, _ = model.split(x, [1, seq_length - 1], LENGTH, name="cls_split")  # (B, 1, H)
    else:
        first = x
    pooled = model.reshape(first, (batch, hidden_size), name="cls_reshape")  # (B, H)
    pooled = model.dense(pooled, hidden_size, ActiMode.AC_MODE_TANH, name="pooler")
    logits = model.dense(pooled, num_classes, name="classifier")  # (B, classes)
    model.softmax(logits, name="softmax")
