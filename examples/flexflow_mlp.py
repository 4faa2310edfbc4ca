"""FlexFlow's MLP example (`examples/python/native/mnist_mlp.py`) as FlexFlow writes it.

    legate --cpus 2 --gpus 0 examples/flexflow_mlp.py -b 64 -e 10 --lr 0.05
    legate --cpus 2 --gpus 0 examples/flexflow_mlp.py -b 64 -e 10 --budget 5   # search first

Through `flexflow.core` (README "Porting a FlexFlow script"), on scikit-learn's handwritten
digits (8x8 images: 64 features, no download) instead of MNIST; the lines changed from
FlexFlow's are marked "here:". Prints the test accuracy; exits 1 below 90%.
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


def load_data(seed: int):
    """here: the digits, split 80/20, in place of keras' mnist.load_data()."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        data.data, data.target, test_size=0.2, random_state=seed, stratify=data.target
    )
    return (x_train, y_train), (x_test, y_test)


def top_level_task():
    ffconfig = FFConfig()
    print(
        "Python API batchSize(%d) workersPerNodes(%d) numNodes(%d)"  # noqa: UP031 (FlexFlow's)
        % (ffconfig.batch_size, ffconfig.workers_per_node, ffconfig.num_nodes)
    )
    ffmodel = FFModel(ffconfig)

    dims_input = [ffconfig.batch_size, 64]  # here: 8x8 digits
    input_tensor = ffmodel.create_tensor(dims_input, DataType.DT_FLOAT)

    t = ffmodel.dense(input_tensor, 128, ActiMode.AC_MODE_RELU)
    t = ffmodel.dense(t, 128, ActiMode.AC_MODE_RELU)
    t = ffmodel.dense(t, 10)
    t = ffmodel.softmax(t)

    ffoptimizer = SGDOptimizer(ffmodel, ffconfig.learning_rate, 0.9)
    ffmodel.optimizer = ffoptimizer
    plan = ffmodel.compile(
        loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
        metrics=[MetricsType.METRICS_ACCURACY, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY],
    )
    print(f"strategy: {plan.describe()}")  # here: compile says how it chose the strategy
    label_tensor = ffmodel.label_tensor

    (x_train, y_train), (x_test, y_test) = load_data(ffconfig.seed)
    x_train = x_train.astype("float32") / 16  # here: the digits' pixels go to 16
    y_train = np.reshape(y_train.astype("int32"), (len(y_train), 1))
    x_test = x_test.astype("float32") / 16
    y_test = np.reshape(y_test.astype("int32"), (len(y_test), 1))

    dataloader_input = ffmodel.create_data_loader(input_tensor, x_train)
    dataloader_label = ffmodel.create_data_loader(label_tensor, y_train)
    num_samples = dataloader_input.num_samples

    ffmodel.init_layers()

    epochs = ffconfig.epochs
    ts_start = ffconfig.get_current_time()
    ffmodel.fit(x=dataloader_input, y=dataloader_label, epochs=epochs)
    ts_end = ffconfig.get_current_time()
    run_time = 1e-6 * (ts_end - ts_start)
    print(
        "epochs %d, ELAPSED TIME = %.4fs, THROUGHPUT = %.2f samples/s"  # noqa: UP031
        % (epochs, run_time, num_samples * epochs / run_time)
    )

    # here: evaluated on the held-out digits (FlexFlow's example evaluates its training data)
    ffmodel.eval(
        x=ffmodel.create_data_loader(input_tensor, x_test),
        y=ffmodel.create_data_loader(label_tensor, y_test),
    )
    perf_metrics = ffmodel.get_perf_metrics()
    print(f"test accuracy {perf_metrics.get_accuracy():.2f}%")
    return perf_metrics


if __name__ == "__main__":
    sys.exit(0 if top_level_task().get_accuracy() >= 90.0 else 1)
