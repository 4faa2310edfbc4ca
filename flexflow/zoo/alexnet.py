"""AlexNet, the 12-layer CNN benchmark of the paper (§8.1, Table 2), as torchvision builds it.

torchvision's AlexNet is the single-tower variant of Krizhevsky's "One weird trick for
parallelizing convolutional neural networks" (2014): conv 64 11x11/4 pad 2, max pool 3/2,
conv 192 5x5 pad 2, max pool, conv 384, 256, 256 3x3 pad 1, max pool, then the classifier
dropout, dense 4096, dropout, dense 4096, dense 1000. At 224x224 it has 61,100,840 parameters
(torchvision's `AlexNet_Weights.IMAGENET1K_V1.meta["num_params"]`) and 0.714 G multiply-adds
per image (1.43 GFLOPs).

The paper trains AlexNet on synthetic data with a batch size of 256. torchvision's adaptive
average pool to 6x6 is the identity at 224x224 and is left out; at other image sizes the first
dense layer takes whatever the last pool produces.
"""

from __future__ import annotations

from flexflow.model import FFModel
from flexflow.ops import ActiMode
from flexflow.ops.pool2d import PoolType

RELU = ActiMode.AC_MODE_RELU


def build(model: FFModel, image_size: int = 224, num_classes: int = 1000) -> None:
    batch = model.config.batch_size
    x = model.create_tensor((batch, 3, image_size, image_size), name="image")  # (B, 3, H, W)
    x = model.conv2d(x, 64, 11, 11, 4, 4, 2, 2, RELU, name="conv1")
    x = model.pool2d(x, 3, 3, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool1")
    x = model.conv2d(x, 192, 5, 5, 1, 1, 2, 2, RELU, name="conv2")
    x = model.pool2d(x, 3, 3, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool2")
    x = model.conv2d(x, 384, 3, 3, 1, 1, 1, 1, RELU, name="conv3")
    x = model.conv2d(x, 256, 3, 3, 1, 1, 1, 1, RELU, name="conv4")
    x = model.conv2d(x, 256, 3, 3, 1, 1, 1, 1, RELU, name="conv5")
    x = model.pool2d(x, 3, 3, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool5")  # (B, 256, 6, 6)
    x = model.flat(x, name="flat")  # (B, 9216)
    x = model.dropout(x, 0.5, seed=1, name="dropout6")
    x = model.dense(x, 4096, RELU, name="fc6")
    x = model.dropout(x, 0.5, seed=2, name="dropout7")
    x = model.dense(x, 4096, RELU, name="fc7")
    x = model.dense(x, num_classes, name="fc8")
    model.softmax(x, name="softmax")
