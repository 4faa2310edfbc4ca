"""ResNet-101 as FlexFlow's own code built it for the paper's search experiments (Table 4).

FlexFlow's research simulator (`scripts/simulator.cc`, `build_resnet_model`, commit 4e7e6e8 of
github.com/flexflow/FlexFlow, July 2018) and its SysML 2019 artifact (`inception.h`,
`BottleneckBlock`, commit 15fc11f, January 2019, the batch norms commented out) define
ResNet-101 as a plain chain of 105 ops: a 7x7/2 conv and a 3x3/2 max pool, then [3, 4, 23, 3]
bottleneck blocks of three convs each (1x1, 3x3 with the block's stride, 1x1 to 4x the
planes), every conv with its ReLU fused, no batch norm and no shortcut; then a 7x7 average
pool, flat, a dense layer to 1000 classes and softmax. The zoo's `resnet101` is the real
network (torchvision's: a batch norm after every conv, a shortcut add and a ReLU per block,
279 ops), which is 2.7x the ops to search and 1.9x the tasks to simulate; `benchmarks/
table4.py --models resnet101_flexflow` times the search on the graph the paper timed.
"""

from __future__ import annotations

from flexflow.layers import Tensor
from flexflow.model import FFModel
from flexflow.ops import ActiMode
from flexflow.ops.pool2d import PoolType

STAGES = ((64, 3), (128, 4), (256, 23), (512, 3))
"""(planes, blocks) per stage; a block's last conv has 4x the planes, the first block of
every stage but the first has stride 2."""

RELU = ActiMode.AC_MODE_RELU


def _bottleneck(model: FFModel, x: Tensor, planes: int, stride: int, name: str) -> Tensor:
    x = model.conv2d(x, planes, 1, 1, 1, 1, 0, 0, RELU, name=f"{name}_conv1")
    x = model.conv2d(x, planes, 3, 3, stride, stride, 1, 1, RELU, name=f"{name}_conv2")
    return model.conv2d(x, 4 * planes, 1, 1, 1, 1, 0, 0, RELU, name=f"{name}_conv3")


def build(model: FFModel, image_size: int = 224, num_classes: int = 1000) -> None:
    batch = model.config.batch_size
    x = model.create_tensor((batch, 3, image_size, image_size), name="image")
    x = model.conv2d(x, 64, 7, 7, 2, 2, 3, 3, RELU, name="conv1")  # (B, 64, 112, 112) at 224
    x = model.pool2d(x, 3, 3, 2, 2, 1, 1, PoolType.POOL_MAX, name="pool1")  # (B, 64, 56, 56)
    for stage, (planes, blocks) in enumerate(STAGES, start=1):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 1 else 1
            x = _bottleneck(model, x, planes, stride, f"block{stage}_{block}")
    height, width = x.shape[2], x.shape[3]  # 7x7 at 224
    x = model.pool2d(x, height, width, 1, 1, 0, 0, PoolType.POOL_AVG, name="avgpool")
    x = model.flat(x, name="flat")
    x = model.dense(x, num_classes, name="linear")
    model.softmax(x, name="softmax")
