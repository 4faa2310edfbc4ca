"""Fused tasks: consecutive ops whose tiles line up run as one Legate task per device.

FlexFlow's runtime fuses ops with the same parallel configuration (its FusedOp); so do we, as
a runtime choice that leaves the strategy untouched. Every Legate task costs the issuing
thread and the runtime a fixed price (measured here: LeNet's 38 tasks per data-parallel
iteration cost 5 ms with empty task bodies), and on a small host that thread competes with the
task threads for the cores. One task per device for a chain of ops pays that price once.

Op b joins the group of the ops just before it when it has no batch statistics its tasks
share (their all-reduce sits between forward steps: batch norm under a sample split, or on
GPUs, whose variant runs it alone; each CPU task of a batch norm whose tiles hold whole
samples computes its own statistics in the group, `shared_statistics`), runs the same number
of tasks on the same devices,
reads at least one tensor made in the group or nothing but model inputs (a second input's
embedding, as NMT's target), and reads every tensor it reads from the group through exactly
the tile its producer's task wrote (or, on CPUs, once and part of it: an LSTM step reads its
time step of the embedding's tile, as a view; a tensor read twice, as attention's keys and
values, is read whole both times, its gradient summed in memory). A group ends before the first op
that reads a tensor of the group which an op after the group also reads. The tensors a group
makes and only its ops read are *internal*: inside the fused task their values and gradients
pass in memory (a gradient summed over the group's readers; zeros for a tensor nothing reads). Internal values are still
written to their stores (the backward task reads them), internal gradients never touch a
store. So a chain of ops fuses, and so does a graph whose tensors have several readers (an
LSTM step's output feeds the next step and the layer above): under data parallelism a whole
unrolled RNN is one task per device.

A fused task's store arguments are named by `Slot`s; `TaskLayout` fixes their order, once per
(group, task, pass), for both the issuing side (flexflow.runtime.executor) and the task bodies
(flexflow.runtime.fused_body, flexflow.gpu.variant), which run it with `flexflow.fused_run`.

The package: `groups` (which ops fuse), `layout` (a fused task's store arguments), `steps`
(what one device's fused task computes, op by op); their names are re-exported here.

In training, the last group also computes the loss and, where its backward reads nothing but
what the task already holds (`FusedTask.step_ready`), its backward: one task per device for a
data-parallel chain. Partial weight gradients that one task per device writes whole
(`sole_gradients`) are overwritten each iteration instead of zeroed and accumulated.
`joins_previous` lets the simulator charge a fused op no launch when planning a run.
"""

from __future__ import annotations

from flexflow.fusion.groups import (
    FusedGroup,
    FusionMemo,
    cpu_devices,
    fuse,
    joins_previous,
    make_room,
    shared_statistics,
    window,
)
from flexflow.fusion.layout import (
    Slot,
    SlotKind,
    TaskLayout,
    backward_layout,
    forward_layout,
    running_slot,
    sole_gradients,
)
from flexflow.fusion.steps import (
    FusedTask,
    OpStep,
    fused_task,
    inputs_read_in_step,
    op_steps,
    updates_in_step,
)

__all__ = [
    "FusedGroup",
    "FusedTask",
    "FusionMemo",
    "OpStep",
    "Slot",
    "SlotKind",
    "TaskLayout",
    "backward_layout",
    "cpu_devices",
    "forward_layout",
    "fuse",
    "fused_task",
    "inputs_read_in_step",
    "joins_previous",
    "make_room",
    "op_steps",
    "running_slot",
    "shared_statistics",
    "sole_gradients",
    "updates_in_step",
    "window",
]
