"""Inception-v3, the paper's 102-layer branching CNN benchmark (§8.1, Table 2), from torchvision.

Szegedy et al., "Rethinking the Inception Architecture for Computer Vision" (2016), in
torchvision's layout without the auxiliary classifier: a stem of five BasicConv2d (conv without
bias + batch norm + ReLU) and two max pools, Inception blocks A x3 (35x35), B, C x4 (17x17),
D, E x2 (8x8) whose branches are concatenated along the channel axis, an 8x8 average pool,
dropout 0.5 and a dense layer 2048 -> 1000. At 299x299 it has 23,834,568 parameters
(torchvision's `Inception_V3_Weights.IMAGENET1K_V1.meta["num_params"]` of 27,161,264 less the
auxiliary head's 3,326,696) and 5.71 G multiply-adds per image (11.4 GFLOPs).

Branch average pools are 3x3/1 with padding 1, averaging each window's real cells as FlexFlow's
(cuDNN's COUNT_EXCLUDE_PADDING); torchvision's counts the padding (count_include_pad=True),
which changes values at the border, not shapes or costs.
"""

from __future__ import annotations

from flexflow.layers import Tensor
from flexflow.model import FFModel
from flexflow.ops.pool2d import PoolType

CHANNELS = 1
"""Concatenation axis of NCHW images."""


def _conv(
    model: FFModel,
    x: Tensor,
    channels: int,
    kernel: tuple[int, int],
    name: str,
    stride: int = 1,
    padding: tuple[int, int] = (0, 0),
) -> Tensor:
    """torchvision's BasicConv2d: conv without bias, then batch norm with a fused ReLU."""
    x = model.conv2d(
        x,
        channels,
        kernel[0],
        kernel[1],
        stride,
        stride,
        padding[0],
        padding[1],
        use_bias=False,
        name=f"{name}_conv",
    )
    return model.batch_norm(x, relu=True, name=f"{name}_bn")


def _avg_pool_branch(model: FFModel, x: Tensor, channels: int, name: str) -> Tensor:
    x = model.pool2d(x, 3, 3, 1, 1, 1, 1, PoolType.POOL_AVG, name=f"{name}_pool")
    return _conv(model, x, channels, (1, 1), f"{name}_1x1")


def _max_pool(model: FFModel, x: Tensor, name: str) -> Tensor:
    return model.pool2d(x, 3, 3, 2, 2, 0, 0, PoolType.POOL_MAX, name=name)


def _inception_a(model: FFModel, x: Tensor, pool_features: int, name: str) -> Tensor:
    b1 = _conv(model, x, 64, (1, 1), f"{name}_b1x1")
    b5 = _conv(model, x, 48, (1, 1), f"{name}_b5x5_1")
    b5 = _conv(model, b5, 64, (5, 5), f"{name}_b5x5_2", padding=(2, 2))
    b3 = _conv(model, x, 64, (1, 1), f"{name}_b3x3dbl_1")
    b3 = _conv(model, b3, 96, (3, 3), f"{name}_b3x3dbl_2", padding=(1, 1))
    b3 = _conv(model, b3, 96, (3, 3), f"{name}_b3x3dbl_3", padding=(1, 1))
    bp = _avg_pool_branch(model, x, pool_features, f"{name}_bpool")
    return model.concat([b1, b5, b3, bp], CHANNELS, name=f"{name}_concat")


def _inception_b(model: FFModel, x: Tensor, name: str) -> Tensor:
    b3 = _conv(model, x, 384, (3, 3), f"{name}_b3x3", stride=2)
    bd = _conv(model, x, 64, (1, 1), f"{name}_b3x3dbl_1")
    bd = _conv(model, bd, 96, (3, 3), f"{name}_b3x3dbl_2", padding=(1, 1))
    bd = _conv(model, bd, 96, (3, 3), f"{name}_b3x3dbl_3", stride=2)
    bp = _max_pool(model, x, f"{name}_bpool")
    return model.concat([b3, bd, bp], CHANNELS, name=f"{name}_concat")


def _inception_c(model: FFModel, x: Tensor, c7: int, name: str) -> Tensor:
    row, col = ((1, 7), (0, 3)), ((7, 1), (3, 0))  # factorized 7x7: (kernel, padding)
    b1 = _conv(model, x, 192, (1, 1), f"{name}_b1x1")
    b7 = _conv(model, x, c7, (1, 1), f"{name}_b7x7_1")
    b7 = _conv(model, b7, c7, row[0], f"{name}_b7x7_2", padding=row[1])
    b7 = _conv(model, b7, 192, col[0], f"{name}_b7x7_3", padding=col[1])
    bd = _conv(model, x, c7, (1, 1), f"{name}_b7x7dbl_1")
    bd = _conv(model, bd, c7, col[0], f"{name}_b7x7dbl_2", padding=col[1])
    bd = _conv(model, bd, c7, row[0], f"{name}_b7x7dbl_3", padding=row[1])
    bd = _conv(model, bd, c7, col[0], f"{name}_b7x7dbl_4", padding=col[1])
    bd = _conv(model, bd, 192, row[0], f"{name}_b7x7dbl_5", padding=row[1])
    bp = _avg_pool_branch(model, x, 192, f"{name}_bpool")
    return model.concat([b1, b7, bd, bp], CHANNELS, name=f"{name}_concat")


def _inception_d(model: FFModel, x: Tensor, name: str) -> Tensor:
    b3 = _conv(model, x, 192, (1, 1), f"{name}_b3x3_1")
    b3 = _conv(model, b3, 320, (3, 3), f"{name}_b3x3_2", stride=2)
    b7 = _conv(model, x, 192, (1, 1), f"{name}_b7x7x3_1")
    b7 = _conv(model, b7, 192, (1, 7), f"{name}_b7x7x3_2", padding=(0, 3))
    b7 = _conv(model, b7, 192, (7, 1), f"{name}_b7x7x3_3", padding=(3, 0))
    b7 = _conv(model, b7, 192, (3, 3), f"{name}_b7x7x3_4", stride=2)
    bp = _max_pool(model, x, f"{name}_bpool")
    return model.concat([b3, b7, bp], CHANNELS, name=f"{name}_concat")


def _split_3x3(model: FFModel, x: Tensor, name: str) -> Tensor:
    """Inception-E's expanded 3x3: parallel 1x3 and 3x1 convs, concatenated."""
    a = _conv(model, x, 384, (1, 3), f"{name}a", padding=(0, 1))
    b = _conv(model, x, 384, (3, 1), f"{name}b", padding=(1, 0))
    return model.concat([a, b], CHANNELS, name=f"{name}_concat")


def _inception_e(model: FFModel, x: Tensor, name: str) -> Tensor:
    b1 = _conv(model, x, 320, (1, 1), f"{name}_b1x1")
    b3 = _conv(model, x, 384, (1, 1), f"{name}_b3x3_1")
    b3 = _split_3x3(model, b3, f"{name}_b3x3_2")
    bd = _conv(model, x, 448, (1, 1), f"{name}_b3x3dbl_1")
    bd = _conv(model, bd, 384, (3, 3), f"{name}_b3x3dbl_2", padding=(1, 1))
    bd = _split_3x3(model, bd, f"{name}_b3x3dbl_3")
    bp = _avg_pool_branch(model, x, 192, f"{name}_bpool")
    return model.concat([b1, b3, bd, bp], CHANNELS, name=f"{name}_concat")


def build(model: FFModel, image_size: int = 299, num_classes: int = 1000) -> None:
    batch = model.config.batch_size
    x = model.create_tensor((batch, 3, image_size, image_size), name="image")  # (B, 3, 299, 299)
    x = _conv(model, x, 32, (3, 3), "conv_1a", stride=2)  # (B, 32, 149, 149)
    x = _conv(model, x, 32, (3, 3), "conv_2a")  # (B, 32, 147, 147)
    x = _conv(model, x, 64, (3, 3), "conv_2b", padding=(1, 1))  # (B, 64, 147, 147)
    x = _max_pool(model, x, "pool_1")  # (B, 64, 73, 73)
    x = _conv(model, x, 80, (1, 1), "conv_3b")  # (B, 80, 73, 73)
    x = _conv(model, x, 192, (3, 3), "conv_4a")  # (B, 192, 71, 71)
    x = _max_pool(model, x, "pool_2")  # (B, 192, 35, 35)
    x = _inception_a(model, x, 32, "mixed_5b")  # (B, 256, 35, 35)
    x = _inception_a(model, x, 64, "mixed_5c")  # (B, 288, 35, 35)
    x = _inception_a(model, x, 64, "mixed_5d")  # (B, 288, 35, 35)
    x = _inception_b(model, x, "mixed_6a")  # (B, 768, 17, 17)
    for name, c7 in (("mixed_6b", 128), ("mixed_6c", 160), ("mixed_6d", 160), ("mixed_6e", 192)):
        x = _inception_c(model, x, c7, name)  # (B, 768, 17, 17)
    x = _inception_d(model, x, "mixed_7a")  # (B, 1280, 8, 8)
    x = _inception_e(model, x, "mixed_7b")  # (B, 2048, 8, 8)
    x = _inception_e(model, x, "mixed_7c")  # (B, 2048, 8, 8)
    height, width = x.shape[2], x.shape[3]  # a global average pool at any image size
    x = model.pool2d(x, height, width, 1, 1, 0, 0, PoolType.POOL_AVG, name="avgpool")
    x = model.flat(x, name="flat")  # (B, 2048)
    x = model.dropout(x, 0.5, seed=1, name="dropout")
    x = model.dense(x, num_classes, name="fc")
    model.softmax(x, name="softmax")
