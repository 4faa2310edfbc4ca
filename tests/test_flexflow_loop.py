"""FlexFlow's hand-written loop as a state machine (flexflow.flexflow_loop), driven by a stub
model; the loop on Legate is tests/training/test_api.py's."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from flexflow.data import Batch
from flexflow.errors import FlexFlowError, ShapeError
from flexflow.flexflow_loop import HandWrittenLoop, Stage
from flexflow.runtime.training import Metrics


@dataclass
class _Stats:
    loss: float

    samples: int = 4
    predictions: int = 4

    def read(self) -> tuple[float, int]:
        return self.loss, 3


class _Tensor:
    name = "x"


class _Graph:
    input_tensors = (_Tensor(),)
    ops = ()


class _Trainer:
    def tally_metrics(self, tally, seconds: float) -> Metrics:
        return tally.metrics(-1, seconds, True)


class _Model:
    """What the loop asks of an FFModel: its graph, an open executor, issued batches."""

    def __init__(self) -> None:
        self.issued: list[tuple] = []
        self.refuse = False

    def graph(self):
        return _Graph()

    @property
    def executor(self):
        return self

    def check_open(self) -> None:
        pass

    def _compiled_trainer(self):
        return _Trainer()

    def _one_batch(self, x, y, method):
        if self.refuse:
            raise ShapeError("sparse_categorical_crossentropy: labels must lie in [0, 3)")
        return Batch(x, y, 4)

    def _issue_train_batch(self, batch, method):
        self.issued.append((batch.inputs["x"], batch.target))
        return _Stats(float(len(self.issued)))


def _iteration(loop: HandWrittenLoop, model: _Model, x, y) -> None:
    loop.set_input("x", x)
    loop.set_labels(y)
    loop.forward(model)
    loop.zero_gradients()
    loop.backward()
    loop.update(model)


def test_an_iteration_runs_at_update_on_the_batch_set_before_it():
    loop, model = HandWrittenLoop(), _Model()
    _iteration(loop, model, "x0", "y0")
    loop.set_input("x", "x1")
    loop.forward(model)
    loop.set_labels("y1")  # labels may come after forward(): backward reads them
    loop.backward()
    loop.update(model)
    assert model.issued == [("x0", "y0"), ("x1", "y1")] and loop.stage is Stage.IDLE
    metrics = loop.metrics(model)
    assert metrics.loss == 1.5 and metrics.accuracy == 0.75 and metrics.samples == 8
    loop.reset_metrics()
    assert loop.metrics(model) is None


def test_calls_out_of_order_are_refused_and_a_refused_update_may_be_retried():
    loop, model = HandWrittenLoop(), _Model()
    with pytest.raises(FlexFlowError, match="no batch was set for input"):
        loop.forward(model)
    loop.set_input("x", "x0")
    with pytest.raises(FlexFlowError, match=r"backward\(\) needs forward\(\) first"):
        loop.backward()
    loop.forward(model)
    with pytest.raises(FlexFlowError, match="no labels were set"):
        loop.backward()
    loop.set_labels("bad")
    loop.backward()
    with pytest.raises(FlexFlowError, match="would discard its gradients"):
        loop.zero_gradients()
    with pytest.raises(FlexFlowError, match="between backward"):
        loop.set_labels("y0")
    with pytest.raises(FlexFlowError, match="fit was called between backward"):
        loop.check_no_update_pending("fit")
    model.refuse = True
    with pytest.raises(ShapeError, match="labels must lie"):
        loop.update(model)
    assert loop.stage is Stage.FORWARD  # new labels, backward() and update() again
    model.refuse = False
    loop.set_labels("y0")
    loop.backward()
    loop.update(model)
    assert model.issued == [("x0", "y0")]
    with pytest.raises(FlexFlowError, match=r"update\(\) needs backward\(\) first"):
        loop.update(model)
    with pytest.raises(FlexFlowError, match="read between forward"):
        loop.output(model)


def test_metrics_are_read_as_iterations_go_not_all_kept():
    loop, model = HandWrittenLoop(), _Model()
    for k in range(5):
        _iteration(loop, model, f"x{k}", f"y{k}")
    assert len(loop.unread) == 1  # each update read the one before it
    assert loop.metrics(model).loss == 3.0 and not loop.unread
