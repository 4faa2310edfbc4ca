"""flexflow.keras models trained in one Legate process (run by test_training.py with -b 32):
what each measured, as one JSON line on stdout."""

from __future__ import annotations

import json

import numpy as np

import flexflow.core as ff
from flexflow.errors import FlexFlowError
from flexflow.keras.callbacks import (
    Callback,
    EpochVerifyMetrics,
    LearningRateScheduler,
    VerifyMetrics,
)
from flexflow.keras.layers import (
    Activation,
    Concatenate,
    Conv2D,
    Dense,
    Flatten,
    Input,
    MaxPooling2D,
)
from flexflow.keras.models import Model, Sequential
from flexflow.keras.optimizers import SGD

SAMPLES, CLASSES = 256, 4


class Recorder(Callback):
    """Every hook fit calls, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def on_train_begin(self, logs=None):
        self.calls.append("train_begin")

    def on_epoch_begin(self, epoch, logs=None):
        self.calls.append(f"epoch_begin {epoch}")

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(f"epoch_end {epoch} {sorted(logs)}")

    def on_train_end(self, logs=None):
        self.calls.append("train_end")


def data(shape: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Learnable samples: the class is the largest of CLASSES fixed projections."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((SAMPLES, *shape)).astype(np.float32)
    w = rng.standard_normal((int(np.prod(shape)), CLASSES))
    y = np.argmax(x.reshape(SAMPLES, -1) @ w, axis=1).astype(np.int32).reshape(-1, 1)
    return x, y


def losses(history) -> list[float]:
    return [float(v) for v in history.history["loss"]]


def mlp_keras(x, y) -> dict:
    model = Sequential()
    model.add(Dense(32, input_shape=(12,), activation="relu", name="h"))
    model.add(Dense(CLASSES, name="logits"))
    model.add(Activation("softmax", name="probs"))
    model.compile(SGD(learning_rate=0.1), "sparse_categorical_crossentropy", ["accuracy"])
    recorder = Recorder()
    history = model.fit(x, y, epochs=3, callbacks=[recorder])
    return {"losses": losses(history), "calls": recorder.calls, "model": model}


def mlp_ffmodel(x, y) -> list[float]:
    model = ff.FFModel(ff.FFConfig())
    t = model.create_tensor((model.config.batch_size, 12), name="mlp_in")
    t = model.dense(t, 32, ff.ActiMode.AC_MODE_RELU, name="h")
    t = model.dense(t, CLASSES, name="logits")
    model.softmax(t, name="probs")
    model.compile(ff.SGDOptimizer(model, 0.1), "sparse_categorical_crossentropy", ["accuracy"])
    return [m.loss for m in model.fit(x, y, epochs=3)]


def cnn_keras(x, y) -> list[float]:
    a, b = Input(shape=(1, 8, 8), name="cnn_a"), Input(shape=(1, 8, 8), name="cnn_b")
    t1 = Conv2D(4, kernel_size=3, padding="same", activation="relu", name="ca")(a)
    t2 = Conv2D(4, kernel_size=3, padding=(1, 1), activation="relu", name="cb")(b)
    t = Concatenate(axis=1, name="cat")([t1, t2])
    t = MaxPooling2D(pool_size=(2, 2), name="pool")(t)
    t = Flatten(name="flat")(t)
    out = Activation("softmax", name="probs")(Dense(CLASSES, name="logits")(t))
    model = Model([a, b], out)
    model.compile("sgd", "sparse_categorical_crossentropy", ["accuracy"])
    model.optimizer.set_learning_rate(0.05)
    return losses(model.fit([x, x[:, :, ::-1]], y, epochs=3))


def cnn_ffmodel(x, y) -> list[float]:
    model = ff.FFModel(ff.FFConfig())
    batch = model.config.batch_size
    a = model.create_tensor((batch, 1, 8, 8), name="cnn_a")
    b = model.create_tensor((batch, 1, 8, 8), name="cnn_b")
    relu = ff.ActiMode.AC_MODE_RELU
    t1 = model.conv2d(a, 4, 3, 3, 1, 1, 1, 1, relu, name="ca")
    t2 = model.conv2d(b, 4, 3, 3, 1, 1, 1, 1, relu, name="cb")
    t = model.concat([t1, t2], 1, name="cat")
    t = model.pool2d(t, 2, 2, 2, 2, 0, 0, name="pool")
    t = model.dense(model.flat(t, name="flat"), CLASSES, name="logits")
    model.softmax(t, name="probs")
    model.compile(ff.SGDOptimizer(model, 0.05), "sparse_categorical_crossentropy", ["accuracy"])
    return [m.loss for m in model.fit([x, x[:, :, ::-1]], y, epochs=3)]


def callbacks_of_flexflow(model, x, y) -> dict:
    said = {}
    scheduler = LearningRateScheduler(lambda epoch: 0.02 if epoch == 0 else 0.01)
    model.fit(x, y, epochs=2, callbacks=[scheduler])
    said["rate_after_schedule"] = model.optimizer.lr
    said["ffmodel_rate"] = model.ffmodel.optimizer.learning_rate
    early = model.fit(x, y, epochs=5, callbacks=[EpochVerifyMetrics(0.0)])
    said["epochs_before_early_stop"] = len(early.epoch)
    try:
        model.fit(x, y, epochs=1, callbacks=[VerifyMetrics(100.5)])
    except FlexFlowError as problem:
        said["verify_refused"] = str(problem)
    model.fit(x, y, epochs=1, callbacks=[VerifyMetrics(10)])  # passes its own threshold
    return said


def weights_copied(teacher, x, y) -> dict:
    student = Sequential()
    student.add(Dense(32, input_shape=(12,), activation="relu", name="s_h"))
    student.add(Dense(CLASSES, name="s_logits"))
    student.add(Activation("softmax", name="s_probs"))
    student.compile(SGD(learning_rate=0.1), "sparse_categorical_crossentropy", ["accuracy"])
    for index in range(2):
        kernel, bias = teacher.get_layer(index=index).get_weights(teacher.ffmodel)
        student.get_layer(index=index).set_weights(student.ffmodel, kernel, bias)
    return {
        "teacher": teacher.evaluate({teacher.inputs[0].name: x}, y),  # by input name too
        "student": student.evaluate(x, y),
        "kernel_shape": list(teacher.get_layer(name="h").get_weights(teacher.ffmodel)[0].shape),
    }


class StopAfterTwo(Callback):
    """Keras' way to stop: set the model's stop_training."""

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            self.model.stop_training = True


class FlexFlowStyle(Callback):
    """A callback as FlexFlow writes them: on_epoch_end(self, logs), given the epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def on_epoch_end(self, logs=None):
        self.seen.append(logs)


def fixes(x, y) -> dict:
    """What a review found: recompiling keeps the weights; a schedule's rate is the one
    trained with; stop_training and FlexFlow-style callbacks; an optimizer of another model;
    Keras arguments evaluate and predict take or refuse; verbose=0."""
    said = {}
    model = Sequential([Dense(8, input_shape=(12,), name="r_h"), Dense(CLASSES, name="r_out"),
                        Activation("softmax", name="r_probs")])  # fmt: skip
    model.compile(SGD(learning_rate=0.1), "sparse_categorical_crossentropy", ["accuracy"])
    model.fit(x, y, epochs=7, verbose=0)  # no line 'epoch k/7'
    trained = model.get_layer(name="r_h").get_weights(model.ffmodel)[0]
    before = model.evaluate(x, y)
    model.compile(SGD(learning_rate=1e-12), "sparse_categorical_crossentropy", ["accuracy"])
    said["recompiled_kernel_kept"] = bool(
        np.array_equal(model.get_layer(name="r_h").get_weights(model.ffmodel)[0], trained)
    )
    said["recompiled_evaluation"] = [model.evaluate(x, y), before]
    model.fit(x, y, epochs=1, callbacks=[LearningRateScheduler(lambda epoch: 1e-12)])
    said["tiny_rate_kept_kernel"] = bool(
        np.allclose(model.get_layer(name="r_h").get_weights(model.ffmodel)[0], trained,
                    rtol=0, atol=1e-9)
    )  # fmt: skip
    said["stopped_after"] = model.fit(x, y, epochs=5, callbacks=[StopAfterTwo()]).epoch
    style = FlexFlowStyle()
    model.fit(x, y, epochs=2, initial_epoch=0, callbacks=[style])
    said["flexflow_style_given"] = style.seen
    other = Sequential([Dense(CLASSES, input_shape=(12,), name="o_out")])
    try:
        other.compile(model.optimizer, "sparse_categorical_crossentropy")
    except FlexFlowError as problem:
        said["shared_optimizer"] = str(problem)
    other.compile(SGD(learning_rate=0.1), "mean_squared_error")
    targets = np.eye(CLASSES, dtype=np.float32)[y.reshape(-1)]  # (N, CLASSES)
    said["evaluate_without_metrics"] = other.evaluate(x, targets)
    try:
        model.evaluate(x, y, batch_sizee=999)
    except FlexFlowError as problem:
        said["evaluate_typo"] = str(problem)
    said["predict_shape"] = list(model.predict(x, verbose=0, workers=2).shape)
    model.compile("sgd", "sparse_categorical_crossentropy", ["accuracy"], run_eagerly=False)
    return said


def main() -> None:
    x, y = data((12,), seed=1)
    keras_mlp = mlp_keras(x, y)
    images, labels = data((1, 8, 8), seed=2)
    report = {
        "mlp_keras": keras_mlp["losses"],
        "mlp_ffmodel": mlp_ffmodel(x, y),
        "calls": keras_mlp["calls"],
        "cnn_keras": cnn_keras(images, labels),
        "cnn_ffmodel": cnn_ffmodel(images, labels),
        "weights": weights_copied(keras_mlp["model"], x, y),
        "callbacks": callbacks_of_flexflow(keras_mlp["model"], x, y),
        "summary": keras_mlp["model"].summary(),
        "fixes": fixes(x, y),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
