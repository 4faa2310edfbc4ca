"""FlexFlow's MLP example as a FlexFlow script writes it, through `flexflow.core`.

    legate --cpus 2 --gpus 0 examples/flexflow_mlp.py -b 64 -e 10 --lr 0.05
    legate --cpus 2 --gpus 0 examples/flexflow_mlp.py -b 64 -e 10 --budget 5   # search first

FlexFlow's `mnist_mlp.py` on scikit-learn's handwritten digits (8x8 images, 64 features, no
download). What a FlexFlow user would change is marked "here:" (README "Porting a FlexFlow
script"). Prints the test accuracy; exits 1 below 90%.
"""

from __future__ import annotations

import sys

import numpy as np

from flexflow.core import (  # FlexFlow's examples: from flexflow.core import *
    ActiMode,
    DataType,
    FFConfig,
    FFModel,
    LossType,
    MetricsType,
    SGDOptimizer,
)


def digits(seed: int):
    """The digits as float32 features in [0, 1] and int32 labels, split 80/20."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    return train_test_split(
        x, data.target.astype(np.int32), test_size=0.2, random_state=seed, stratify=data.target
    )


def top_level_task() -> int:
    ffconfig = FFConfig()
    print(f"batch size {ffconfig.batch_size}, epochs {ffconfig.epochs}")
    ffmodel = FFModel(ffconfig)
    input_tensor = ffmodel.create_tensor([ffconfig.batch_size, 64], DataType.DT_FLOAT)
    t = ffmodel.dense(input_tensor, 128, ActiMode.AC_MODE_RELU)
    t = ffmodel.dense(t, 128, ActiMode.AC_MODE_RELU)
    t = ffmodel.dense(t, 10)
    t = ffmodel.softmax(t)
    ffmodel.optimizer = SGDOptimizer(ffmodel, ffconfig.learning_rate, 0.9)
    plan = ffmodel.compile(
        loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
        metrics=[MetricsType.METRICS_ACCURACY, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY],
    )
    print(f"strategy: {plan.describe()}")  # here: compile says how it chose the strategy
    x_train, x_test, y_train, y_test = digits(ffconfig.seed)
    # here: arrays go to fit by input tensor; labels to y (no label tensor or data loaders)
    ffmodel.fit(x={input_tensor: x_train}, y=y_train, epochs=ffconfig.epochs)
    result = ffmodel.eval(x={input_tensor: x_test}, y=y_test)
    # here: accuracy is a fraction (FlexFlow's get_accuracy() is a percentage)
    print(f"test accuracy {result.accuracy:.2%} (loss {result.loss:.4f})")
    return 0 if result.accuracy >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(top_level_task())
