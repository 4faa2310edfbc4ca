"""FlexFlow's hand-written training loop, over `FFModel.train_on_batch`.

FlexFlow scripts may train without `fit`: they set a batch (`loader.next_batch(ffmodel)` or
`tensor.set_tensor(ffmodel, array)`), then call `forward()`, `zero_gradients()`,
`backward()` and `update()`, and read tensors with `get_array`. Here one Legate step runs
the whole iteration, so the loop is kept as a small state machine: `update()` runs the
iteration the calls before it asked for, on the batch set before `forward()`. Calls out of
that order (a `backward` with no `forward`, a new batch between `backward` and `update`)
are refused rather than run with other data than FlexFlow would use. The loop is part of
`flexflow.core.FFModel`, and issues its batches through the model's own (private) entry
points, `_issue_train_batch` and `_issue_eval_batch`; each batch is checked as `fit` checks
its data once, when it is set (labels set before compile: at `_one_batch` when issued).
"""

from __future__ import annotations

import enum
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from flexflow.data import Batch
from flexflow.errors import FlexFlowError
from flexflow.runtime.training import Tally

if TYPE_CHECKING:
    from flexflow.model import FFModel
    from flexflow.runtime.batches import BatchStats
    from flexflow.runtime.training import Metrics


class Stage(enum.Enum):
    """Where an iteration of the loop stands."""

    IDLE = "no iteration begun (or the last one updated)"
    FORWARD = "forward() called"
    BACKWARD = "backward() called, update() not yet"


class HandWrittenLoop:
    """The batch a script set (inputs by name, labels), where its iteration stands, and the
    metrics of the iterations updated since `reset_metrics`."""

    def __init__(self) -> None:
        self.inputs: dict[str, Any] = {}
        self.labels: Any = None
        self.labels_checked = False
        """Whether the labels were checked against the compiled loss when set (else the
        batch is checked when it is issued); the inputs always are (`flexflow_data`)."""
        self.stage = Stage.IDLE
        self.tally = Tally()
        """The metrics of the iterations since `reset_metrics` read so far."""
        self.unread: deque[BatchStats] = deque()
        """Those not read yet: each update reads the one before it (which waits for it
        while its own runs, as `fit` reads a launch while the next runs)."""
        self.began: float | None = None  # when the first of them was issued
        self._output: Any = None  # the forward pass's output, once read

    def set_input(self, name: str, array: Any) -> None:
        self._check_not_backward(f"input '{name}'")
        self.inputs[name] = array
        self.stage, self._output = Stage.IDLE, None  # a forward pass alone is done with

    def set_labels(self, array: Any, checked: bool = False) -> None:
        """The labels' batch: after forward() too (backward reads them, as FlexFlow's)."""
        self._check_not_backward("the labels")
        self.labels, self.labels_checked = array, checked

    def _batch(self, model: FFModel, method: str) -> Batch:
        """The batch set, checked once: when set, or here for labels set before compile."""
        if not self.labels_checked:
            return model._one_batch(dict(self.inputs), self.labels, method)
        return Batch(dict(self.inputs), self.labels, len(self.labels))

    def _check_not_backward(self, what: str) -> None:
        if self.stage is Stage.BACKWARD:
            raise FlexFlowError(
                f"a new batch of {what} was set between backward() and update(); FlexFlow "
                "would update with the gradients of the batch before it: call update() first."
            )

    def check_no_update_pending(self, call: str) -> None:
        """Refuse `call` (one that trains) between backward() and update(), whose update
        would then apply to weights it changed."""
        if self.stage is Stage.BACKWARD:
            raise FlexFlowError(
                f"{call} was called between backward() and update(); call update() first."
            )

    def forward(self, model: FFModel) -> None:
        inputs = [t.name for t in model.graph().input_tensors]
        missing = [name for name in inputs if name not in self.inputs]
        if missing:
            raise FlexFlowError(
                f"forward(): no batch was set for input(s) {missing}; call "
                "loader.next_batch(ffmodel) or tensor.set_tensor(ffmodel, array) first."
            )
        model.executor.check_open()
        self.stage, self._output = Stage.FORWARD, None

    def zero_gradients(self) -> None:
        """Nothing to zero (each iteration's gradients start from zero); refused after
        `backward`, where FlexFlow would throw that iteration's gradients away."""
        if self.stage is Stage.BACKWARD:
            raise FlexFlowError(
                "zero_gradients() after backward() would discard its gradients; call it "
                "before backward(), as forward(), zero_gradients(), backward(), update()."
            )

    def backward(self) -> None:
        if self.stage is not Stage.FORWARD:
            raise FlexFlowError(
                f"backward() needs forward() first (the loop stands at: {self.stage.value}); "
                "call forward(), zero_gradients(), backward(), update() for each batch."
            )
        if self.labels is None:
            raise FlexFlowError(
                "backward(): no labels were set; call the label loader's next_batch(ffmodel) "
                "or ffmodel.label_tensor.set_tensor(ffmodel, labels) first."
            )
        self.stage = Stage.BACKWARD

    def update(self, model: FFModel) -> None:
        """Issue the iteration (forward, loss, backward, update) on the batch."""
        if self.stage is not Stage.BACKWARD:
            raise FlexFlowError(
                f"update() needs backward() first (the loop stands at: {self.stage.value}); "
                "call forward(), zero_gradients(), backward(), update() for each batch."
            )
        try:
            stats = model._issue_train_batch(self._batch(model, "update()"), "update()")
        except Exception:
            # back to after forward(): new labels, then backward() and update() again (new
            # inputs need forward() again)
            self.stage = Stage.FORWARD
            raise
        self.stage, self._output = Stage.IDLE, None
        self._add(stats)

    def compute_metrics(self, model: FFModel) -> None:
        """Issue the evaluation (forward and loss, no update) of the batch forward() ran on,
        into the metrics (FlexFlow's evaluation loop: forward(), then compute_metrics())."""
        if self.stage is not Stage.FORWARD:
            raise FlexFlowError(
                f"compute_metrics() evaluates the batch forward() ran on (the loop stands at: "
                f"{self.stage.value}); call forward() first."
            )
        if self.labels is None:
            raise FlexFlowError(
                "compute_metrics(): no labels were set; call the label loader's "
                "next_batch(ffmodel) or ffmodel.label_tensor.set_tensor(ffmodel, labels) first."
            )
        self._add(model._issue_eval_batch(self._batch(model, "compute_metrics"), "compute_metrics"))

    def _add(self, stats: BatchStats) -> None:
        if self.began is None:
            self.began = time.perf_counter()
        self.unread.append(stats)
        while len(self.unread) > 1:
            self.tally.add(self.unread.popleft())

    def forget_output(self) -> None:
        """Drop the output read since forward() (the weights it came from changed)."""
        self._output = None

    def recompiled(self) -> None:
        """The model was compiled again: its weights and loss may have changed."""
        self._output, self.labels_checked = None, False

    def output(self, model: FFModel) -> Any:
        """The model's output for the batch `forward()` ran on (computed at the first read;
        the weights are those of that forward pass until `update()`)."""
        if self.stage is Stage.IDLE:
            raise FlexFlowError(
                "the model's output is read between forward() and update() (update changes "
                "the weights it came from); call forward() first, or use predict(x)."
            )
        graph = model.graph()
        # their training-mode output would take a training pass of its own
        modal = sorted({n.name for n in graph.ops if n.op.training_mode})
        if modal:
            raise FlexFlowError(
                f"the model's training-mode output cannot be read here: {modal} compute "
                "differently in training (dropout, batch norm) and the loop runs its "
                "training pass inside update(); predict(x) gives the inference-mode output."
            )
        if self._output is None:
            self._output = model.executor.forward(self.inputs)
        return self._output

    def metrics(self, model: FFModel) -> Metrics | None:
        """The iterations since `reset_metrics` as one: the loss and accuracy over all
        their samples, and the seconds since the first was issued (None before the first
        update). Waits for them."""
        if self.began is None:
            return None
        while self.unread:
            self.tally.add(self.unread.popleft())
        return model._compiled_trainer().tally_metrics(self.tally, time.perf_counter() - self.began)

    def reset_metrics(self) -> None:
        self.tally, self.began = Tally(), None
        self.unread.clear()
