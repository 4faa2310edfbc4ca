"""Run in a Legate process by test_api.py: the Python training API a user drives by hand
(named optimizers, learning rate changes, compiling again, predict, closed executors, data
checked before training, FlexFlow's metric names, dropout seeds, lines per epoch). Prints one
JSON report; each entry is what a check saw (an error's text, or numbers to compare)."""

from __future__ import annotations

import functools
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import ActiMode, FFConfig, FFModel
from flexflow.data import DataLoader
from flexflow.errors import FlexFlowError
from flexflow.optimizers import AdamOptimizer, SGDOptimizer

rng = np.random.default_rng(0)
X = rng.standard_normal((96, 12)).astype(np.float32)
Y = ((X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0.5)).astype(np.int32)


def build_model(seed: int = 3, dropout: bool = False) -> FFModel:
    model = FFModel(FFConfig(batch_size=16, seed=seed))
    h = model.dense(model.create_tensor((16, 12), name="x"), 24, ActiMode.AC_MODE_RELU)
    if dropout:
        h = model.dropout(h, 0.5)
    model.softmax(model.dense(h, 3))
    return model


build = build_model


def error(call) -> str:
    """The text of the FlexFlowError `call` raises ('' when it raises none)."""
    try:
        call()
    except FlexFlowError as exc:
        return str(exc)
    return ""


def losses(model: FFModel, epochs: int, **fit) -> list[float]:
    return [m.loss for m in model.fit(X, Y, epochs, shuffle=False, **fit)]


def schedules() -> dict:
    """Epoch 3 at lr 0.05 after two at 0.1: by set_learning_rate, and by compiling again with
    plain SGD (no state to lose); and all three at 0.1. The model drops out: compiling again
    must not draw the first epoch's masks again."""
    build = functools.partial(build_model, dropout=True)
    by_setter = build()
    by_setter.compile(SGDOptimizer(0.1), progress=False)
    first = losses(by_setter, 2)
    by_setter.set_learning_rate(0.05)
    setter = first + losses(by_setter, 3)
    recompiled = build()
    recompiled.compile(SGDOptimizer(0.1), progress=False)
    again = losses(recompiled, 2)
    before = recompiled.eval(X, Y).loss
    recompiled.compile(SGDOptimizer(0.05), progress=False)
    after = recompiled.eval(X, Y).loss  # the weights trained before compile, kept
    again += losses(recompiled, 3)
    constant = build()
    constant.compile(SGDOptimizer(0.1), progress=False)
    return {
        "setter": setter,
        "recompiled": again,
        "constant": losses(constant, 3),
        "eval_around_compile": [before, after],
        "optimizer": repr(by_setter.optimizer),
        "switch_kind": error(lambda: setattr(by_setter, "optimizer", "adam")),
        "bad_rate": error(lambda: by_setter.set_learning_rate(-1.0)),
    }


def named_optimizers() -> dict:
    model = build()
    model.optimizer = "adam"  # FlexFlow sets the optimizer before compile
    model.compile(progress=False)
    named = model.optimizer
    return {
        "named": repr(named),
        "is_adam": isinstance(named, AdamOptimizer),
        "unknown": error(lambda: build().compile("rmsprop", progress=False)),
        "wrong_type": error(lambda: build().compile(0.1, progress=False)),
    }


def predictions() -> dict:
    model = build(dropout=True)
    model.compile(SGDOptimizer(0.1), progress=False)
    model.fit(X, Y, 1)
    some = X[:37]  # two full batches and a padded one
    out = model.predict(some)
    evaluated = model.eval(some, Y[:37])
    picked = out[np.arange(len(some)), Y[:37]]
    return {
        "shape": list(out.shape),
        "loss_from_predict": float(-np.mean(np.log(picked.astype(np.float64)))),
        "eval_loss": evaluated.loss,
        "first_rows_again": np.array_equal(model.predict(some[:16]), out[:16]),
    }


def data_checks() -> dict:
    import cupynumeric

    model = build()
    model.compile(SGDOptimizer(0.1), progress=False)
    late = Y.copy()
    late[-1] = 7  # in the last batch
    holey = X.copy()
    holey[[40, 70], 3] = (np.nan, np.inf)
    one_hot = np.eye(3, dtype=np.float32)[Y]
    one_hot[50] = (1.5, -0.5, 0.0)
    categorical = build()
    categorical.compile(SGDOptimizer(0.1), loss_type="categorical_crossentropy", progress=False)
    mse = build()
    mse.compile(SGDOptimizer(0.1), loss_type="mean_squared_error", progress=False)
    nan_target = np.eye(3, dtype=np.float32)[Y]
    nan_target[90, 1] = np.nan
    return {
        "no_targets": error(lambda: model.fit(X, None)),
        "late_label": error(lambda: model.fit(X, late)),
        "nan_input": error(lambda: model.fit(holey, Y)),
        "nan_cupynumeric_input": error(lambda: model.fit(cupynumeric.asarray(holey), Y)),
        "negative_probabilities": error(lambda: categorical.fit(X, one_hot)),
        "nan_target": error(lambda: mse.fit(X, nan_target)),
        "iterations_after_refusals": [m.executor.iteration for m in (model, categorical, mse)],
        "float_cupynumeric_labels": error(
            lambda: model.fit(cupynumeric.asarray(X), cupynumeric.asarray(Y.astype(np.float32)))
        ),
        "flexflow_metrics": error(
            lambda: build().compile(
                SGDOptimizer(0.1),
                metrics=["METRICS_ACCURACY", "METRICS_SPARSE_CATEGORICAL_CROSSENTROPY"],
                progress=False,
            )
        ),
        "other_loss_metric": error(
            lambda: build().compile(
                SGDOptimizer(0.1), metrics=["METRICS_MEAN_SQUARED_ERROR"], progress=False
            )
        ),
    }


def closing() -> dict:
    model = build()
    model.compile(SGDOptimizer(0.1), progress=False)
    model.fit(X, Y, 1)
    trained = model.eval(X, Y).loss
    model.executor.close()
    refused = error(lambda: model.fit(X, Y, 2))
    model.compile(SGDOptimizer(0.1), progress=False)  # takes the closed executor's weights
    return {"refused": refused, "trained": trained, "recompiled": model.eval(X, Y).loss}


def dropout_seeds() -> dict:
    """First-epoch losses from the same initial weights under run seeds 3, 3 and 4: only the
    dropout masks can tell the seeds apart."""
    start = build(seed=3, dropout=True)
    start.compile(SGDOptimizer(0.1), progress=False)
    weights = start.executor.get_weights()
    start.executor.close()

    def first_epoch(seed: int) -> float:
        model = build(seed=seed, dropout=True)
        model.compile(SGDOptimizer(0.1), progress=False)
        model.executor.set_weights(weights)
        return losses(model, 1)[0]

    return {"seed3": first_epoch(3), "seed3_again": first_epoch(3), "seed4": first_epoch(4)}


def flexflow_port() -> dict:
    """FlexFlow's mnist_mlp as FlexFlow writes it, through flexflow.core's names."""
    from flexflow.core import (
        AdamOptimizer,
        DataType,
        FFConfig,
        LossType,
        MetricsType,
        SGDOptimizer,
        UniformInitializer,
    )
    from flexflow.core import FFModel as CoreModel

    sys.argv = ["mnist_mlp.py", "-b", "16", "-e", "2", "--lr", "0.05"]
    ffconfig = FFConfig()
    ffmodel = CoreModel(ffconfig)
    input_tensor = ffmodel.create_tensor([ffconfig.batch_size, 12], DataType.DT_FLOAT)
    uniform = UniformInitializer(12, -1, 1)
    t = ffmodel.dense(input_tensor, 24, ActiMode.AC_MODE_RELU, kernel_initializer=uniform)
    ffmodel.softmax(ffmodel.dense(t, 3))
    ffmodel.optimizer = SGDOptimizer(ffmodel, ffconfig.learning_rate)
    ffmodel.compile(
        loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
        metrics=[MetricsType.METRICS_ACCURACY, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY],
        progress=False,
    )
    kernel = ffmodel.executor.get_weights()["dense_1.kernel"]
    drawn = bool(np.array_equal(kernel, uniform.draw(kernel.shape)))  # applied at compile
    history = ffmodel.fit(x={input_tensor: X}, y=Y, epochs=ffconfig.epochs)
    adam = AdamOptimizer(ffmodel, 0.002, 0.8, 0.99, 1e-4, 1e-7)  # FlexFlow's order
    return {
        "batch_epochs_lr": [ffconfig.batch_size, ffconfig.epochs, ffconfig.learning_rate],
        "epochs": [m.epoch for m in history],
        "accuracy": history[-1].accuracy,
        "adam": [adam.learning_rate, adam.beta1, adam.beta2, adam.weight_decay, adam.epsilon],
        "uniform_kernel_drawn": drawn,
    }


def hand_written_loop() -> dict:
    """FlexFlow's loop by hand (next_batch, forward, zero_gradients, backward, update, the
    output read between) against train_on_batch and fit on the same batches, from the same
    weights; and the calls out of order it refuses."""
    from flexflow.core import DataType, FlexFlowConfig, SGDOptimizer
    from flexflow.core import FFModel as CoreModel

    def core_model() -> tuple[CoreModel, object, object]:
        model = CoreModel(FlexFlowConfig(batch_size=16, seed=3))
        x = model.create_tensor([16, 12], DataType.DT_FLOAT, name="x")
        out = model.softmax(model.dense(model.dense(x, 24, ActiMode.AC_MODE_RELU), 3))
        model.compile(SGDOptimizer(None, 0.1), "sparse_categorical_crossentropy", progress=False)
        return model, x, out

    looped, x, out = core_model()
    start = looped.executor.get_weights()
    images = looped.create_data_loader(x, X)
    labels = looped.create_data_loader(looped.label_tensor, Y.reshape(-1, 1))
    refused = {"update_first": error(looped.update), "backward_first": error(looped.backward)}
    outputs_match, losses_by_batch = [], []
    for first in range(0, len(X), 16):
        images.next_batch(looped)
        labels.next_batch(looped)
        looped.forward()
        out.inline_map(looped, None)
        output = out.get_array(looped, None)
        out.inline_unmap(looped, None)
        predicted = looped.predict(X[first : first + 16])  # the same weights: update comes later
        outputs_match.append(bool(np.array_equal(output, predicted)))
        looped.zero_gradients()
        looped.backward()
        looped.update()
        losses_by_batch.append(looped.get_perf_metrics().metrics.loss)
    perf = looped.get_perf_metrics()
    looped_weights = looped.executor.get_weights()
    refused["past_the_end"] = error(lambda: images.next_batch(looped))
    refused["output_after_update"] = error(lambda: out.get_array(looped))
    refused["old_api"] = error(lambda: x.inline_map(FlexFlowConfig()))
    hidden = looped._handle(looped.graph().ops[0].outputs[0], (16, 24), x.dtype)
    refused["hidden"] = error(lambda: hidden.get_array(looped))
    images.reset()
    labels.reset()
    images.next_batch(looped)
    labels.next_batch(looped)
    looped.forward()
    looped.backward()
    refused["batch_before_update"] = error(lambda: labels.next_batch(looped))
    refused["zero_after_backward"] = error(looped.zero_gradients)
    refused["train_on_batch_before_update"] = error(lambda: looped.train_on_batch(X[:16], Y[:16]))
    refused["compile_before_update"] = error(lambda: looped.compile(SGDOptimizer(None, 0.1)))

    by_batch = core_model()[0]
    by_batch.executor.set_weights(start)
    batch_metrics = [
        by_batch.train_on_batch(X[i : i + 16], Y[i : i + 16]) for i in range(0, len(X), 16)
    ]
    batch_losses = [m.loss for m in batch_metrics]
    refused["short_batch"] = error(lambda: by_batch.train_on_batch(X[:5], Y[:5]))
    accuracy = sum(m.accuracy for m in batch_metrics) / len(batch_metrics)
    fitted = core_model()[0]
    fitted.executor.set_weights(start)
    fitted.fit(X, Y, epochs=1, shuffle=False)

    def same(model) -> bool:
        weights = model.executor.get_weights()
        return all(np.array_equal(looped_weights[name], weights[name]) for name in weights)

    return {
        "outputs_match": outputs_match,
        "loop_equals_train_on_batch": same(by_batch),
        "loop_equals_fit": same(fitted),
        "running_losses": losses_by_batch,
        "batch_losses": batch_losses,
        "perf_accuracy": perf.get_accuracy(),
        "batch_accuracy": 100 * accuracy,
        "refused": refused,
    }


def loop_edges() -> dict:
    """What a helper's stress runs of the loop found: one buffer refilled for every batch
    (FlexFlow copies at set_tensor), fit after iterations trained by hand, and bad labels."""
    from flexflow.core import DataType, FlexFlowConfig, SGDOptimizer
    from flexflow.core import FFModel as CoreModel

    def core_model() -> tuple[CoreModel, object]:
        model = CoreModel(FlexFlowConfig(batch_size=16, seed=3))
        x = model.create_tensor([16, 12], DataType.DT_FLOAT, name="x")
        model.softmax(model.dense(x, 3))
        model.compile(SGDOptimizer(None, 0.1), "sparse_categorical_crossentropy", progress=False)
        return model, x

    reused, x = core_model()
    start = reused.executor.get_weights()
    images, labels = np.empty((16, 12), np.float32), np.empty(16, np.int32)
    for first in range(0, len(X), 16):
        images[:], labels[:] = X[first : first + 16], Y[first : first + 16]  # one buffer
        x.set_tensor(reused, images)
        reused.label_tensor.set_tensor(reused, labels)
        reused.forward()
        reused.backward()
        reused.update()
    by_batch = core_model()[0]
    by_batch.executor.set_weights(start)
    for first in range(0, len(X), 16):
        by_batch.train_on_batch(X[first : first + 16], Y[first : first + 16])
    same = all(
        np.array_equal(w, by_batch.executor.get_weights()[k])
        for k, w in reused.executor.get_weights().items()
    )
    mixed = core_model()[0]
    mixed.train_on_batch(X[:16], Y[:16])
    mixed.fit(X, Y, epochs=1, shuffle=False)  # a whole epoch after it, not 5 of its batches
    bad = core_model()
    checked = error(lambda: bad[0].label_tensor.set_tensor(bad[0], np.full(16, 7)))
    bad[1].set_tensor(bad[0], X[:16])
    bad[0].forward()
    bad[0].label_tensor.set_tensor(bad[0], Y[:16])
    bad[0].backward()
    refused_fit = error(lambda: bad[0].fit(X, Y))
    bad[0].update()
    evaluated, x = bad  # FlexFlow's evaluation loop: forward(), compute_metrics()
    evaluated.reset_metrics()
    for first in range(0, len(X), 16):
        x.set_tensor(evaluated, X[first : first + 16])
        evaluated.label_tensor.set_tensor(evaluated, Y[first : first + 16])
        evaluated.forward()
        evaluated.compute_metrics()
    looped_eval = evaluated.get_perf_metrics().metrics
    whole_eval = evaluated.eval(X, Y)
    read = x.get_array(evaluated)
    try:
        read[:] = 7.0  # was a writable copy: the write was lost, silently
        written = "written"
    except ValueError as exc:
        written = str(exc)
    return {
        "compute_metrics_loss": [looped_eval.loss, whole_eval.loss],
        "compute_metrics_accuracy": [looped_eval.accuracy, whole_eval.accuracy],
        "get_array_is_a_copy": bool(np.array_equal(x.get_array(evaluated), X[80:96])),
        "get_array_write": written,
        "reused_buffer_equals_train_on_batch": same,
        "iterations_after_fit": mixed.executor.iteration,
        "bad_labels": checked,
        "fit_before_update": refused_fit,
        "none_labels": error(lambda: bad[0].label_tensor.set_tensor(bad[0], None)),
    }


def cached_views() -> dict:
    """The executor's cache of store views after more epochs of a model with batch norm
    (its steps are concurrent launches): it kept every batch's loss sums (a helper's long
    runs: +0.22 MB and slower epochs per 8 batches, without end)."""
    model = FFModel(FFConfig(batch_size=16, seed=3))
    images = model.create_tensor((16, 2, 4, 4), name="images")
    t = model.batch_norm(model.conv2d(images, 4, 3, 3, 1, 1, 1, 1))
    model.softmax(model.dense(model.flat(t), 3))
    model.compile(SGDOptimizer(0.1), progress=False)
    data = np.repeat(X[:, :8], 4, axis=1).reshape(-1, 2, 4, 4)
    model.fit(data, Y, 1)
    sizes = [model.executor.arguments.cached]
    model.fit(data, Y, 3)
    sizes.append(model.executor.arguments.cached)
    model.eval(data, Y)
    sizes.append(model.executor.arguments.cached)
    model.eval(data, Y)
    sizes.append(model.executor.arguments.cached)
    return {"sizes": sizes}


def forward_only() -> dict:
    """FlexFlow's single-op scripts: a model ending in a dense layer compiled with a
    cross-entropy, run forward() and read; training it is refused then, not at compile. And
    a model compiled with CompMode.INFERENCE (FlexFlow's attention scripts): forward() runs,
    training is refused."""
    from flexflow.core import CompMode, DataType, FlexFlowConfig, LossType
    from flexflow.core import FFModel as CoreModel

    model = CoreModel(FlexFlowConfig(batch_size=16, seed=3))
    x = model.create_tensor([16, 12], DataType.DT_FLOAT)
    out = model.dense(x, 4, ActiMode.AC_MODE_RELU)
    model.compile(loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, progress=False)
    x.set_tensor(model, X[:16])
    model.forward()
    read = out.get_array(model, None)
    kernel = model.executor.get_weights()["dense_1.kernel"]
    want = np.maximum(X[:16] @ kernel.T + model.executor.get_weights()["dense_1.bias"], 0)
    model.label_tensor.set_tensor(model, Y[:16])
    model.backward()
    inference = CoreModel(FlexFlowConfig(batch_size=16, seed=3))
    x = inference.create_tensor([16, 12], DataType.DT_FLOAT)
    out = inference.softmax(inference.dense(x, 3))
    inference.compile(
        loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
        comp_mode=CompMode.INFERENCE,
        progress=False,
    )
    x.set_tensor(inference, X[:16])
    inference.forward()
    return {
        "output_close": bool(np.allclose(read, want, rtol=1e-5, atol=1e-6)),
        "update": error(model.update),
        "fit": error(lambda: model.fit(X, Y)),
        "inference_output_is_predict": bool(
            np.array_equal(out.get_array(inference), inference.predict(X[:16]))
        ),
        "inference_fit": error(lambda: inference.fit(X, Y)),
    }


def layer_handles() -> dict:
    """FlexFlow's layer handles: layers by id and name, their tensors, and weights read and
    written through a parameter (set_weights, and a mapped array written back at unmap),
    which the next iteration trains from."""
    from flexflow.core import DataType, FlexFlowConfig, LossType, SGDOptimizer
    from flexflow.core import FFModel as CoreModel

    model = CoreModel(FlexFlowConfig(batch_size=16, seed=3))
    x = model.create_tensor([16, 12], DataType.DT_FLOAT)
    model.softmax(model.dense(model.dense(x, 24, ActiMode.AC_MODE_RELU), 3))
    dense1 = model.get_layer_by_id(0)
    before_compile = error(lambda: dense1.get_weight_tensor().get_weights(model))
    model.optimizer = SGDOptimizer(model, 0.1)
    model.compile(loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, progress=False)
    kernel = dense1.get_weight_tensor()
    read = kernel.get_weights(model)
    same = bool(np.array_equal(read, model.executor.get_weights()["dense_1.kernel"]))
    kernel.set_weights(model, np.full(kernel.dims, 0.01, np.float32))
    bias = model.get_layer_by_name("dense_2").get_bias_tensor()
    bias.inline_map(model, None)
    mapped = bias.get_array(model, None)
    mapped += 2.5  # FlexFlow's scripts write through the mapped array
    bias.inline_unmap(model, None)
    weights = model.executor.get_weights()
    model.fit(X, Y, epochs=1)
    read_only = dense1.get_weight_tensor()
    read_only.inline_map(model, None)
    mapped_twice = error(lambda: read_only.inline_map(model, None))
    trained = model.executor.get_weights()["dense_1.kernel"]
    model.fit(X, Y, epochs=1)  # the map only read: unmapping keeps what training made
    read_only.inline_unmap(model, None)
    kept = not np.array_equal(model.executor.get_weights()["dense_1.kernel"], trained)
    x.set_tensor(model, X[:16])
    model.forward()
    after_forward = error(lambda: kernel.set_weights(model, np.zeros(kernel.dims, np.float32)))
    model.label_tensor.set_tensor(model, Y[:16])
    model.backward()
    model.update()
    return {
        "mapped_twice": mapped_twice,
        "read_only_map_kept_training": bool(kept),
        "set_after_forward": after_forward,
        "before_compile": before_compile,
        "layers": [repr(layer) for layer in model.get_layers().values()],
        "last": repr(model.get_last_layer()),
        "dims": [list(kernel.dims), list(bias.dims)],
        "tensors": [list(dense1.get_input_tensor().dims), list(dense1.get_output_tensor().dims)],
        "read_is_the_weight": same,
        "kernel_set": bool(np.all(weights["dense_1.kernel"] == np.float32(0.01))),
        "bias_written_back": weights["dense_2.bias"].tolist(),
        "trained_from_them": bool(
            not np.all(model.executor.get_weights()["dense_1.kernel"] == np.float32(0.01))
        ),
        "wrong_shape": error(lambda: kernel.set_weights(model, np.zeros((3, 3), np.float32))),
        "by_global_id": model.get_tensor_by_id(1).name,
        "no_layer": error(lambda: model.get_layer_by_id(7)),
        "unmapped": error(lambda: kernel.get_array(model, None)),
    }


def data_forms() -> dict:
    """Keras' one-element list for a one-input model, and weights given as Python lists."""
    model = build()
    model.compile(SGDOptimizer(0.1), progress=False)
    model.executor.set_weights({"dense_2.bias": [0.5, -0.5, 0.0]})
    as_list = model.eval([X], Y).loss
    return {
        "list_equals_array": as_list == model.eval(X, Y).loss,
        "bias": model.executor.get_weights()["dense_2.bias"].tolist(),
    }


def resumed_schedule() -> dict:
    """A schedule that lowers the rate after epoch 2 (Adam, dropout), checkpointed each epoch;
    a new model loading the epoch-2 checkpoint and training on to epoch 4 with the same
    schedule, against the run that never stopped (the checkpoint kept the rate before the
    schedule changed it, and loading kept the model's own)."""

    def schedule(model: FFModel):
        def lower(metrics) -> None:
            if metrics.epoch + 1 == 2:
                model.set_learning_rate(0.0005)

        return lower

    with tempfile.TemporaryDirectory() as folder:
        whole = build(dropout=True)
        whole.compile(AdamOptimizer(0.002), progress=False)
        straight = losses(whole, 4, on_epoch=schedule(whole))
        first = build(dropout=True)
        first.compile(AdamOptimizer(0.002), progress=False)
        at_two = Path(folder) / "two.npz"
        losses(first, 2, on_epoch=schedule(first), checkpoint=str(at_two))
        resumed = build(dropout=True)
        resumed.compile(AdamOptimizer(0.002), progress=False)  # the rate it began with
        resumed.executor.load_checkpoint(at_two)
        rest = [
            m.loss
            for m in resumed.fit(
                X, Y, 4, shuffle=False, on_epoch=schedule(resumed),
                initial_epoch=resumed.executor.epochs_done,
            )
        ]  # fmt: skip
        other = build(dropout=True)
        other.compile(SGDOptimizer(0.1), progress=False)  # no states to miss: refused as such
        refused = error(lambda: other.executor.load_checkpoint(at_two))
        return {
            "straight": straight,
            "resumed": rest,
            "rate": repr(resumed.optimizer),
            "other_kind": refused,
        }


def validation() -> dict:
    """fit's validation_data: evaluated after every epoch, checked before the first batch."""
    model = build()
    model.compile(SGDOptimizer(0.1), progress=False)
    held_x, held_y = X[:40], Y[:40]
    history = model.fit(X, Y, 2, shuffle=False, validation_data=(held_x, held_y))
    after = model.eval(held_x, held_y)
    fresh = build()
    fresh.compile(SGDOptimizer(0.1), progress=False)
    bad_shape = error(lambda: fresh.fit(X, Y, 1, validation_data=(held_x[:, :5], held_y)))
    bad_form = error(lambda: fresh.fit(X, Y, 1, validation_data=(held_x, held_y, held_y)))
    refused_at = fresh.executor.iteration
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh.fit(X[:90], Y[:90], 1, shuffle=False)
        # a DataLoader keeps its own: a short last batch trains unless it drops it
        fresh.fit(DataLoader({"x": X[:90]}, Y[:90], 16), epochs=1, shuffle=False)
        fresh.fit(DataLoader({"x": X[:90]}, Y[:90], 16, drop_last=True), epochs=1)
    weights = model.executor.get_weights()
    name, shape = next((k, v.shape) for k, v in weights.items())
    text_weights = error(lambda: model.executor.set_weights({name: np.full(shape, "a")}))
    nan_weights = error(lambda: model.executor.set_weights({name: np.full(shape, np.nan)}))
    kept = all(np.array_equal(model.executor.get_weights()[k], v) for k, v in weights.items())
    return {
        "text_weights": text_weights,
        "nan_weights": nan_weights,
        "weights_kept": kept,
        "validation_losses": [m.validation.loss for m in history],
        "validation_samples": [m.validation.samples for m in history],
        "eval_after": after.loss,
        "described": history[-1].describe(),
        "bad_shape": bad_shape,
        "bad_form": bad_form,
        "iterations_after_refusals": refused_at,
        "partial_batch_warnings": [str(w.message) for w in caught],
    }


def epoch_lines() -> None:
    """fit with progress on and no on_epoch, its console a pipe: one line per epoch."""
    model = build()
    model.compile(SGDOptimizer(0.1))
    model.fit(X, Y, 2)


report = {
    "schedules": schedules(),
    "named_optimizers": named_optimizers(),
    "predictions": predictions(),
    "data_checks": data_checks(),
    "closing": closing(),
    "dropout_seeds": dropout_seeds(),
    "flexflow_port": flexflow_port(),
    "data_forms": data_forms(),
    "hand_written_loop": hand_written_loop(),
    "forward_only": forward_only(),
    "layer_handles": layer_handles(),
    "loop_edges": loop_edges(),
    "cached_views": cached_views(),
    "resumed_schedule": resumed_schedule(),
    "validation": validation(),
}
epoch_lines()
sys.stdout.write(json.dumps(report) + "\n")
