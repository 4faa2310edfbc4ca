"""What the C block builders (native/blocks.c) read of a task graph besides its per-task arrays.

A delta rebuilds an op's blocks and those of its neighbours; the edge and sync blocks name the
ops' tasks. Rather than gathering those tasks in Python for every block (a shared weight of an
unrolled layer has dozens of users), the task graph keeps them where the C side reads them: the
op table (every op's current task ids and devices) and, for every parameter, its users with the
sync template (`SimContext.op_sync_parts`) of each one's configuration. A sync job is then just
the parameter, and an edge job the two ops and their overlaps.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from flexflow.simulator.native_blocks import SyncTemplate


class BlockTables:
    """The op table (`ff_op_table`) and the parameters' users (`ff_sync_jobs`) of one task graph.

    Op o's tasks are `ids[op_at[o] : op_at[o] + op_count[o]]`, forward and backward task ids
    interleaved, with their devices at the same places of `device`; a rebuilt op's tasks are
    appended (the C op builder writes them) and the old entries left until `compact`. The
    users of parameter p are `user_op[users_at[p] : users_at[p + 1]]`, in op order, each with
    its template id now in `user_template`; `max_tasks[p]` and `max_edges[p]` sum the users'
    templates' bounds: the room p's sync block may need.
    """

    def __init__(self, op_parameters: Sequence[tuple[int, ...]], num_parameters: int) -> None:
        """`op_parameters[o]`: the parameters op o uses, each once, in the order of its
        templates (`SimContext.op_sync_parts`)."""
        num_ops = len(op_parameters)
        self.op_at = array("i", bytes(4 * num_ops))
        self.op_count = array("i", bytes(4 * num_ops))  # set through `set_count`
        self._entries = 0  # sum(op_count): the entries in use, for `needs_compacting`
        self.ids, self.device = array("i"), array("i")
        users: dict[int, list[int]] = {}
        for op, pids in enumerate(op_parameters):
            for pid in pids:
                users.setdefault(pid, []).append(op)
        self.users_at, self.user_op = array("i", [0]), array("i")
        slot_of: dict[tuple[int, int], int] = {}
        for pid in range(num_parameters):
            for op in users.get(pid, ()):
                slot_of[op, pid] = len(self.user_op)
                self.user_op.append(op)
            self.users_at.append(len(self.user_op))
        self.slots: list[tuple[tuple[int, int], ...]] = [
            tuple((slot_of[op, pid], pid) for pid in pids) for op, pids in enumerate(op_parameters)
        ]
        """Each op's users' entries and their parameters, in its templates' order."""
        self.user_template = array("i", [-1] * len(self.user_op))
        self.max_tasks, self.max_edges = [0] * num_parameters, [0] * num_parameters
        self.templates: list[tuple[SyncTemplate, ...] | None] = [None] * num_ops
        """Each op's templates now, one per parameter it uses (None before it is built)."""

    def use_templates(self, op: int, templates: tuple[SyncTemplate, ...]) -> None:
        """`op`'s tasks read its parameters as `templates` say (a new configuration's, or the
        old one's when a change is taken back), in the order of `slots[op]`."""
        old = self.templates[op]
        if old is templates:
            return
        user_template, max_tasks, max_edges = self.user_template, self.max_tasks, self.max_edges
        if old is None:
            for (slot, pid), new in zip(self.slots[op], templates, strict=True):
                user_template[slot] = new.id
                max_tasks[pid] += new.max_tasks
                max_edges[pid] += new.max_edges
        else:
            for (slot, pid), new, before in zip(self.slots[op], templates, old, strict=True):
                user_template[slot] = new.id
                max_tasks[pid] += new.max_tasks - before.max_tasks
                max_edges[pid] += new.max_edges - before.max_edges
        self.templates[op] = templates

    def set_count(self, op: int, count: int) -> None:
        """`op` has `count` entries (its tasks; `op_at[op]`, where they start, is set by the C
        op builder or an undo)."""
        self._entries += count - self.op_count[op]
        self.op_count[op] = count

    def grow(self, entries: int) -> int:
        """Room for `entries` more op-table entries; returns where they start."""
        start, zeros = len(self.ids), bytes(4 * entries)
        self.ids.frombytes(zeros)
        self.device.frombytes(zeros)
        return start

    def truncate(self, size: int) -> None:
        del self.ids[size:], self.device[size:]

    def needs_compacting(self) -> bool:
        return len(self.ids) > 2 * self._entries + 4096

    def compact(self) -> None:
        """Drop the entries of ops' earlier tasks."""
        ids, device = array("i"), array("i")
        for op, (at, count) in enumerate(zip(self.op_at, self.op_count, strict=True)):
            self.op_at[op] = len(ids)
            ids += self.ids[at : at + count]
            device += self.device[at : at + count]
        self.ids, self.device = ids, device
