"""ResNet-101, the paper's 101-layer residual CNN benchmark (§8.1, Table 2), from torchvision.

He et al., "Deep Residual Learning for Image Recognition" (2016), in torchvision's layout
(ResNet v1.5: the stride of a downsampling bottleneck sits on its 3x3 conv). A 7x7/2 stem conv
and a 3x3/2 max pool, then four stages of [3, 4, 23, 3] bottleneck blocks with 64, 128, 256 and
512 planes (x4 channels out), a global average pool and a dense layer to 1000 classes. Every
conv has no bias and is followed by batch norm; a block adds its shortcut (a 1x1 conv + batch
norm where the shape changes) before the final ReLU. At 224x224 it has 44,549,160 parameters
(torchvision's `ResNet101_Weights.IMAGENET1K_V1.meta["num_params"]`) and 7.80 G multiply-adds
per image (15.6 GFLOPs).
"""

from __future__ import annotations

from flexflow.layers import Tensor
from flexflow.model import FFModel
from flexflow.ops.pool2d import PoolType

EXPANSION = 4
"""A bottleneck block's output has 4x the channels of its 3x3 conv."""

STAGES = ((64, 3, 1), (128, 4, 2), (256, 23, 2), (512, 3, 2))
"""(planes, blocks, stride of the first block) per stage: ResNet-101's [3, 4, 23, 3]."""


def _conv_bn(
    model: FFModel,
    x: Tensor,
    channels: int,
    kernel: int,
    stride: int,
    name: str,
    relu: bool = True,
) -> Tensor:
    """conv (no bias, 'same' padding for odd kernels) then batch norm, optionally fused ReLU."""
    pad = kernel // 2
    x = model.conv2d(
        x, channels, kernel, kernel, stride, stride, pad, pad, use_bias=False, name=f"{name}_conv"
    )
    return model.batch_norm(x, relu=relu, name=f"{name}_bn")


def _bottleneck(model: FFModel, x: Tensor, planes: int, stride: int, name: str) -> Tensor:
    out = _conv_bn(model, x, planes, 1, 1, f"{name}_1")
    out = _conv_bn(model, out, planes, 3, stride, f"{name}_2")
    out = _conv_bn(model, out, planes * EXPANSION, 1, 1, f"{name}_3", relu=False)
    shortcut = x
    if stride != 1 or x.shape[1] != planes * EXPANSION:
        shortcut = _conv_bn(model, x, planes * EXPANSION, 1, stride, f"{name}_down", relu=False)
    out = model.add(out, shortcut, name=f"{name}_add")
    return model.relu(out, name=f"{name}_relu")


def build(model: FFModel, image_size: int = 224, num_classes: int = 1000) -> None:
    batch = model.config.batch_size
    x = model.create_tensor((batch, 3, image_size, image_size), name="image")  # (B, 3, H, W)
    x = _conv_bn(model, x, 64, 7, 2, "stem")  # (B, 64, 112, 112) at 224
    x = model.pool2d(x, 3, 3, 2, 2, 1, 1, PoolType.POOL_MAX, name="stem_pool")  # (B, 64, 56, 56)
    for stage, (planes, blocks, stride) in enumerate(STAGES, start=1):
        for block in range(blocks):
            x = _bottleneck(model, x, planes, stride if block == 0 else 1, f"layer{stage}_{block}")
    # (B, 2048, 7, 7) at 224: the global average pool covers whatever spatial size is left
    height, width = x.shape[2], x.shape[3]
    x = model.pool2d(x, height, width, 1, 1, 0, 0, PoolType.POOL_AVG, name="avgpool")
    x = model.flat(x, name="flat")  # (B, 2048)
    x = model.dense(x, num_classes, name="fc")
    model.softmax(x, name="softmax")
