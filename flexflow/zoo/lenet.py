"""LeNet for MNIST, the small CNN of the paper's search-quality experiment (§8.4).

The Caffe/FlexFlow LeNet: conv 20 5x5, max pool 2, conv 50 5x5, max pool 2, flatten, dense 500
with ReLU, dense 10, softmax. On 28x28x1 MNIST images it has 431,080 parameters
(520 + 25,050 + 400,500 + 5,010). `image_size` and `channels` resize the input, e.g. for a
32x32x3 variant.
"""

from __future__ import annotations

from flexflow.model import FFModel
from flexflow.ops import ActiMode
from flexflow.ops.pool2d import PoolType


def build(model: FFModel, image_size: int = 28, channels: int = 1, num_classes: int = 10) -> None:
    batch = model.config.batch_size
    x = model.create_tensor((batch, channels, image_size, image_size), name="image")
    x = model.conv2d(x, 20, 5, 5, 1, 1, 0, 0, name="conv1")  # (B, 20, 24, 24) at 28x28
    x = model.pool2d(x, 2, 2, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool1")  # (B, 20, 12, 12)
    x = model.conv2d(x, 50, 5, 5, 1, 1, 0, 0, name="conv2")  # (B, 50, 8, 8)
    x = model.pool2d(x, 2, 2, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool2")  # (B, 50, 4, 4)
    x = model.flat(x, name="flat")  # (B, 800)
    x = model.dense(x, 500, ActiMode.AC_MODE_RELU, name="fc1")
    x = model.dense(x, num_classes, name="fc2")
    model.softmax(x, name="softmax")
