"""Which ops the runtime fuses into one task per device, and the store arguments of a fused task.

Fused execution's numbers are checked end to end by tests/runtime (every strategy trains to the
single-device numbers, and each strategy fuses differently); these pin the grouping rules.
"""

from __future__ import annotations

from collections import Counter

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.fusion import Slot, SlotKind, fuse, fused_task
from flexflow.machine import parse_machine
from flexflow.strategies import data_parallel_over, named_strategy
from flexflow.strategy import ParallelConfig, Strategy
from flexflow.zoo import load_model


def _groups(graph, strategy):
    regions = [
        c.task_regions(n.sig.output_shape) for n, c in zip(graph.ops, strategy.configs, strict=True)
    ]
    return fuse(graph, strategy, regions), regions


def _names(graph, groups):
    return [[graph.ops[op].name for op in group.ops] for group in groups]


def test_a_data_parallel_chain_is_one_group_with_every_intermediate_in_memory():
    graph = load_model("lenet", FFConfig(batch_size=8)).graph()
    strategy = named_strategy("dp", graph, parse_machine("p100:2"))
    (group,), _ = _groups(graph, strategy)
    assert group.ops == tuple(range(len(graph.ops)))
    produced = {t for node in graph.ops for t in node.outputs}
    assert group.internal == produced - {graph.ops[-1].outputs[0]}


def test_other_devices_or_a_halo_start_a_new_group():
    graph = load_model("lenet", FFConfig(batch_size=8)).graph()
    dp = named_strategy("dp", graph, parse_machine("p100:2"))
    moved = dp.replace("fc1", ParallelConfig((2, 1), (1, 0)))  # same degrees, swapped devices
    assert _names(graph, _groups(graph, moved)[0]) == [
        ["conv1", "pool1", "conv2", "pool2", "flat"],
        ["fc1"],
        ["fc2", "softmax"],
    ]
    # conv2 split by height reads rows across pool1's tiles (its halo): not the same tile
    spatial = dp.replace("pool1", ParallelConfig((1, 1, 2, 1), (0, 1))).replace(
        "conv2", ParallelConfig((1, 1, 2, 1), (0, 1))
    )
    assert [g[0] for g in _names(graph, _groups(graph, spatial)[0])] == [
        "conv1",
        "pool1",
        "conv2",
        "pool2",
    ]


def test_a_tensor_with_several_readers_in_the_group_is_internal():
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 6), name="x")
    h = model.dense(x, 6, ActiMode.AC_MODE_RELU, name="h")
    y = model.dense(h, 6, name="y")
    model.add(h, y, name="residual")  # h has two readers: its gradient sums both, in memory
    graph = model.graph()
    strategy = named_strategy("dp", graph, parse_machine("p100:2"))
    (group,), _ = _groups(graph, strategy)
    assert _names(graph, (group,)) == [["h", "y", "residual"]]
    assert group.internal == {graph.ops[0].outputs[0], graph.ops[1].outputs[0]}


def test_a_group_ends_before_reading_a_tensor_that_escapes_it():
    """c1 is read by c2 and by `res` after the batch norm's group break: were c2 to read it in
    memory, c1's gradient would come from the task and from its store at once."""
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3, 8, 8), name="x")
    c1 = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, name="c1")
    c2 = model.conv2d(c1, 4, 3, 3, 1, 1, 1, 1, name="c2")
    b = model.batch_norm(c2, name="bn")
    model.add(b, c1, name="res")
    graph = model.graph()
    strategy = named_strategy("dp", graph, parse_machine("p100:2"))
    groups, _ = _groups(graph, strategy)
    assert _names(graph, groups) == [["c1"], ["c2"], ["bn"], ["res"]]
    assert all(not group.internal for group in groups)


def test_a_tensor_read_twice_joins_whole_and_batch_statistics_break_the_chain():
    """An op reading a tensor of the group twice (attention's keys and values) joins, reading
    it whole each time; an op reading only model inputs (a second input's embedding) joins
    too; a batch norm whose statistics its tasks share breaks the chain."""
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 6), name="x")
    h = model.dense(x, 6, ActiMode.AC_MODE_RELU, name="h")
    model.add(h, h, name="double")  # one op reading h twice
    model.dense(model.create_tensor((4, 6), name="y"), 6, name="other")  # model inputs only
    graph = model.graph()
    strategy = named_strategy("dp", graph, parse_machine("p100:2"))
    assert _names(graph, _groups(graph, strategy)[0]) == [["h", "double", "other"]]

    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3, 8, 8), name="x")
    c = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, name="conv")
    b = model.batch_norm(c, name="bn")
    model.relu(b, name="act")
    graph = model.graph()
    strategy = named_strategy("dp", graph, parse_machine("p100:2"))
    assert _names(graph, _groups(graph, strategy)[0]) == [["conv"], ["bn"], ["act"]]


def _conv_bn_act(batch: int = 4):
    model = FFModel(FFConfig(batch_size=batch))
    x = model.create_tensor((batch, 3, 8, 8), name="x")
    c = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, name="conv")
    b = model.batch_norm(c, name="bn")
    model.relu(b, name="act")
    return model.graph()


def _cpu_groups(graph, strategy, cpus: int = 2):
    regions = [
        c.task_regions(n.sig.output_shape) for n, c in zip(graph.ops, strategy.configs, strict=True)
    ]
    return fuse(graph, strategy, regions, frozenset(range(cpus)))


def test_a_batch_norm_whose_tiles_hold_whole_samples_fuses_on_cpus():
    """Each CPU task computes its tile's own statistics where the tile holds every sample (one
    device, or a channel split); a sample split shares them (alone, `shared_statistics`), and
    so does any batch norm on GPUs (see above)."""
    graph = _conv_bn_act()
    one = data_parallel_over(graph, 1)
    (group,) = _cpu_groups(graph, one)
    assert _names(graph, [group]) == [["conv", "bn", "act"]] and not group.shared_statistics
    bn = next(node.id for node in graph.ops if node.name == "bn")
    task = fused_task(graph, group, 0, [r[0] for r in _regions(graph, one)])
    running = Slot(SlotKind.RUNNING, bn, ((0, 2), (0, 4)))
    assert task.forward.states == (running,)
    assert running in task.forward.inputs and running in task.forward.outputs
    assert task.steps[1].running is task.forward.states[0]  # the layout's own slot object
    assert running not in task.backward.inputs and task.step_ready
    dp = data_parallel_over(graph, 2)
    groups = _cpu_groups(graph, dp)
    assert _names(graph, groups) == [["conv"], ["bn"], ["act"]]
    assert [g.shared_statistics for g in groups] == [False, True, False]
    tiles = _regions(graph, dp)
    for g in groups:  # the shared batch norm runs from its stores, not a fused task
        assert fused_task(graph, g, 0, [tiles[op][0] for op in g.ops]).forward.states == ()
    # channels split over 2 CPUs, every op alike: each task holds its channels' samples
    channels = Strategy(
        dp.ops,
        tuple(ParallelConfig((1, 2, 1, 1), (0, 1)) for _ in graph.ops),
    )
    (group,) = _cpu_groups(graph, channels)
    assert not group.shared_statistics
    task = fused_task(graph, group, 1, [r[1] for r in _regions(graph, channels)])
    assert task.forward.states == (Slot(SlotKind.RUNNING, bn, ((0, 2), (2, 4))),)


def _regions(graph, strategy):
    return [
        c.task_regions(n.sig.output_shape) for n, c in zip(graph.ops, strategy.configs, strict=True)
    ]


def test_a_fused_task_names_each_store_tile_once_and_keeps_internal_gradients_out():
    graph = load_model("lenet", FFConfig(batch_size=8)).graph()
    strategy = named_strategy("dp", graph, parse_machine("p100:2"))
    (group,), regions = _groups(graph, strategy)
    task = fused_task(graph, group, 1, [regions[op][1] for op in group.ops])
    for layout in (task.forward, task.backward):
        slots = layout.inputs + layout.outputs + layout.reductions + layout.accumulators
        assert not [s for s, n in Counter(layout.inputs).items() if n > 1]
        assert not [s for s in slots if s.kind is SlotKind.GRAD and s.id in group.internal]
    x, out = graph.input_tensors[0].id, graph.ops[-1].outputs[0]
    # forward reads only the model input's tile and the weights, and writes every output tile
    assert {s.kind for s in task.forward.inputs} == {SlotKind.TENSOR, SlotKind.WEIGHT}
    assert [s.id for s in task.forward.inputs if s.kind is SlotKind.TENSOR] == [x]
    assert len(task.forward.outputs) == len(graph.ops)
    # backward: the loss gradient comes in; nothing reads the model input's gradient, so none
    # goes out; each weight's gradient is this device's partial, read and written
    assert [s.id for s in task.backward.inputs if s.kind is SlotKind.GRAD] == [out]
    assert task.backward.reductions == ()
    assert sorted(s.id for s in task.backward.accumulators) == [p.id for p in graph.parameters]
    assert task.tiles == tuple(regions[op][1] for op in group.ops)


def test_one_device_strategy_groups_like_data_parallelism():
    graph = load_model("lenet", FFConfig(batch_size=8)).graph()
    single = Strategy(
        tuple(n.name for n in graph.ops),
        tuple(ParallelConfig.single(len(n.sig.output_shape)) for n in graph.ops),
    )
    (group,), _ = _groups(graph, single)
    assert len(group.ops) == len(graph.ops)


def test_forward_loss_and_backward_share_a_task_even_with_an_unread_output():
    graph = load_model("lenet", FFConfig(batch_size=8)).graph()
    strategy = named_strategy("dp", graph, parse_machine("p100:2"))
    (group,), regions = _groups(graph, strategy)
    assert fused_task(graph, group, 0, [regions[op][0] for op in group.ops]).step_ready

    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 6), name="x")
    kept, _unread = model.split(model.dense(x, 6, name="h"), 2, axis=1, name="halves")
    model.dense(kept, 2, name="out")
    graph = model.graph()
    strategy = named_strategy("dp", graph, parse_machine("p100:2"))
    (group,), regions = _groups(graph, strategy)
    # the unread half is internal: its gradient, zeros, is made in memory, not read from a store
    unread = graph.ops[1].outputs[1]
    assert unread in group.internal and graph.ops[-1].outputs[0] not in group.internal
    task = fused_task(graph, group, 0, [regions[op][0] for op in group.ops])
    assert task.step_ready
    assert all(s.id != unread for s in task.backward.inputs if s.kind is SlotKind.GRAD)


def test_a_weight_whole_on_one_task_per_device_is_written_not_accumulated():
    from flexflow.fusion import sole_gradients

    graph = load_model("lenet", FFConfig(batch_size=8)).graph()
    machine = parse_machine("p100:1")  # 4 GPUs
    dp = named_strategy("dp", graph, machine)
    everything = frozenset(p.id for p in graph.parameters)
    assert sole_gradients(graph, dp, *reversed(_groups(graph, dp))) == everything
    fc1 = [p.id for p in graph.parameters if p.name.startswith("fc1.")]
    # fc1 split by output features: each task reads its rows of the kernel, not all of it
    split = dp.replace("fc1", ParallelConfig((1, 4), (0, 1, 2, 3)))
    assert sole_gradients(graph, split, *reversed(_groups(graph, split))) == everything - set(fc1)
    # two of fc1's tasks on device 0: their contributions add up there
    doubled = dp.replace("fc1", ParallelConfig((4, 1), (0, 0, 1, 2)))
    assert sole_gradients(graph, doubled, *reversed(_groups(graph, doubled))) == everything - set(
        fc1
    )
    (group,), regions = _groups(graph, dp)
    task = fused_task(graph, group, 0, [regions[op][0] for op in group.ops], everything)
    assert task.backward.accumulators == ()
    assert sorted(s.id for s in task.backward.overwrites) == sorted(everything)


def _decisions(graph, strategy, kinds):
    from flexflow.fusion import inputs_read_in_step, sole_gradients, updates_in_step

    groups, regions = _groups(graph, strategy)
    sole = sole_gradients(graph, strategy, regions, groups)
    tasks = [
        tuple(
            fused_task(graph, g, i, [regions[op][i] for op in g.ops], sole)
            for i in range(strategy[g.ops[0]].num_tasks)
        )
        for g in groups
    ]
    return (
        updates_in_step(graph, strategy, groups, tasks, sole, kinds),
        inputs_read_in_step(graph, strategy, groups, tasks, kinds),
    )


def test_data_parallel_steps_on_cpus_update_their_own_copies_and_read_the_batch():
    graph = load_model("lenet", FFConfig(batch_size=8)).graph()
    machine = parse_machine("p100:1")  # 4 devices; the decisions take their kinds
    dp = named_strategy("dp", graph, machine)
    (image,) = graph.input_tensors
    # one step task per device: each reads its shard of the batch (4 readers in all)
    assert _decisions(graph, dp, ["cpu"] * 4) == (True, {image.id: 4})
    # the GPU variant reads stores and runs update tasks
    assert _decisions(graph, dp, ["gpu"] * 4) == (False, {})
    # fc1 split by channel: each device reads part of its weight, and the model is 3 groups
    split = dp.replace("fc1", ParallelConfig((1, 4), (0, 1, 2, 3)))
    assert _decisions(graph, split, ["cpu"] * 4) == (False, {})


def test_a_step_reading_part_of_a_weight_keeps_update_tasks():
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 6), name="x")
    model.dense(x, 8, name="a")
    graph = model.graph()
    (x_id,) = (t.id for t in graph.input_tensors)
    # split by channel: one step task per device, each reading half of a's weight rows and
    # the whole input
    channel = Strategy(("a",), (ParallelConfig((1, 2), (0, 1)),))
    assert _decisions(graph, channel, ["cpu", "cpu"]) == (False, {x_id: 2})
    dp = named_strategy("dp", graph, parse_machine("p100:1"))
    assert _decisions(graph, dp, ["cpu"] * 4)[0]  # dp on all four: copies of every weight


def test_each_op_step_names_its_tiles_with_the_layouts_own_slot_objects():
    graph = load_model("lenet", FFConfig(batch_size=8)).graph()
    strategy = named_strategy("dp", graph, parse_machine("p100:2"))
    (group,), regions = _groups(graph, strategy)
    task = fused_task(graph, group, 1, [regions[op][1] for op in group.ops])
    layout_slots = {
        id(s): s
        for layout in (task.forward, task.backward)
        for s in layout.inputs + layout.outputs + layout.accumulators + layout.overwrites
    }
    assert [step.node.id for step in task.steps] == list(group.ops)
    for step, (in_regions, w_regions, out_regions) in zip(task.steps, task.op_tiles, strict=True):
        node = step.node
        pairs = zip(node.inputs, in_regions, strict=True)
        assert [s for _, s in step.inputs] == [Slot(SlotKind.TENSOR, t, r) for t, r in pairs]
        assert [s.region for s in step.weights] == list(w_regions)
        assert [s.region for _, _, s in step.outputs] == list(out_regions)
        assert [s.kind for _, s in step.output_grads] == [SlotKind.GRAD] * len(node.outputs)
        assert [s.kind for s in step.weight_grads] == [SlotKind.WEIGHT_GRAD] * len(node.weights)
        # what a task body looks up is the very object its layout holds: no field compares
        for slot in (*step.weights, *step.weight_grads):
            assert layout_slots.get(id(slot)) is slot
    assert task.output_slot is task.steps[-1].outputs[0][2]


def test_slots_hash_and_compare_by_their_fields():
    a = Slot(SlotKind.WEIGHT, 3, ((0, 4), (0, 2)))
    b = Slot(SlotKind.WEIGHT, 3, ((0, 4), (0, 2)))
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != Slot(SlotKind.WEIGHT_GRAD, 3, ((0, 4), (0, 2)))
    assert {a: 1}[b] == 1
    assert repr(a) == "Slot(kind=<SlotKind.WEIGHT: 1>, id=3, region=((0, 4), (0, 2)))"


def test_data_parallel_batch_norms_exchange_statistics_in_concurrent_launches():
    """`run_groups`: batch norms that share statistics join groups split by sample alone over
    consecutive CPUs of one process, whose launches' points exchange them (the whole model
    under data parallelism, or part of it); several processes, GPUs, devices out of order or
    tiles that do not stack by device keep each such batch norm alone."""
    from flexflow.launches import iteration_tasks, run_groups

    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3, 8, 8), name="x")
    b = model.batch_norm(model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, name="conv"), name="bn")
    model.dense(model.flat(b), 5, name="out")
    graph = model.graph()
    cpus = ["cpu", "cpu"]
    dp = data_parallel_over(graph, 2)
    (group,) = run_groups(graph, dp, _regions(graph, dp), cpus)
    assert group.exchanges and not group.shared_statistics
    task = fused_task(graph, group, 1, [r[1] for r in _regions(graph, dp)])
    bn = task.steps[1]
    assert bn.exchange and bn.running is task.forward.states[0]
    assert [s.exchange for s in task.steps] == [False, True, False, False]
    counted = iteration_tasks(graph, dp, cpus)
    assert (counted.steps, counted.statistics) == (2, 0)  # a step per point, no statistics
    alone = [False, True, False]
    assert [g.shared_statistics for g in run_groups(graph, dp, _regions(graph, dp), cpus, False)][
        :3
    ] == alone
    assert [
        g.shared_statistics for g in run_groups(graph, dp, _regions(graph, dp), ["gpu", "gpu"])
    ][:3] == alone
    flipped = Strategy(dp.ops, tuple(ParallelConfig(c.degrees, (1, 0)) for c in dp.configs))
    assert any(
        g.shared_statistics for g in run_groups(graph, flipped, _regions(graph, flipped), cpus)
    )
    # the convolution split by channel: alone; the batch norm and the rest by sample: one
    # group of concurrent launches (a backward launch of its own, adding into the conv's
    # output gradient)
    mixed = Strategy(dp.ops, (ParallelConfig((1, 2, 1, 1), (0, 1)),) + dp.configs[1:])
    groups = run_groups(graph, mixed, _regions(graph, mixed), cpus)
    assert _names(graph, groups) == [["conv"], ["bn", graph.ops[2].name, "out"]]
    assert [g.exchanges for g in groups] == [False, True]
    # split by sample and channel over 4 CPUs: tiles that do not stack by point, alone
    both = Strategy(
        dp.ops,
        (ParallelConfig((2, 2, 1, 1), (0, 1, 2, 3)),) * 2
        + tuple(
            ParallelConfig((4,) + (1,) * (len(c.degrees) - 1), (0, 1, 2, 3)) for c in dp.configs[2:]
        ),
    )
    groups = run_groups(graph, both, _regions(graph, both), ["cpu"] * 4)
    assert not any(g.exchanges for g in groups) and any(g.shared_statistics for g in groups)


def test_each_batch_norm_exchanges_where_its_own_group_can_launch_together():
    """The first conv and batch norm data parallel over CPUs 0 and 1 exchange statistics in
    their group; the second pair on the devices the other way round cannot launch together,
    so that batch norm runs alone."""
    from flexflow.launches import run_groups

    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3, 8, 8), name="x")
    b1 = model.batch_norm(model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, name="c1"), name="bn1")
    b2 = model.batch_norm(model.conv2d(b1, 4, 3, 3, 1, 1, 1, 1, name="c2"), name="bn2")
    model.dense(model.flat(b2), 5, name="out")
    graph = model.graph()
    dp = data_parallel_over(graph, 2)
    flipped = tuple(ParallelConfig(c.degrees, (1, 0)) for c in dp.configs[2:4])
    strategy = Strategy(dp.ops, dp.configs[:2] + flipped + dp.configs[4:])
    groups = run_groups(graph, strategy, _regions(graph, strategy), ["cpu", "cpu"])
    named = [(_names(graph, [g])[0], g.exchanges, g.shared_statistics) for g in groups]
    assert named[0] == (["c1", "bn1"], True, False)
    assert (["bn2"], False, True) in named


def test_the_last_group_always_runs_forward_loss_and_backward_in_one_task():
    """What `flexflow.launches.iteration_tasks` relies on instead of building the last group's
    tasks: nothing after the last group reads what it makes but the model's output, so every
    one of its tasks is step-ready, under any strategy, on CPUs and GPUs."""
    from flexflow.launches import run_groups
    from flexflow.machine_presets import LegateRanks, local_machine

    models = [
        load_model("lenet", FFConfig(batch_size=8)),
        load_model("resnet101", FFConfig(batch_size=8), image_size=32),
        load_model(
            "rnnlm",
            FFConfig(batch_size=8),
            seq_length=3,
            vocab_size=20,
            embed_size=8,
            hidden_size=8,
        ),  # fmt: skip
    ]
    cpus = local_machine("--cpus 2 --gpus 0", memory_bytes=1 << 34, ranks=LegateRanks(1, 1))
    for graph in (m.graph() for m in models):
        for machine in (cpus, parse_machine("p100:2")):
            kinds = [d.kind for d in machine.devices]
            for name, seed in [("dp", 0), ("expert", 0), ("model", 0)] + [
                ("random", s) for s in range(4)
            ]:
                strategy = named_strategy(name, graph, machine, seed)
                regions = _regions(graph, strategy)
                last = run_groups(graph, strategy, regions, kinds)[-1]
                if last.shared_statistics:
                    continue
                for index in range(strategy[last.ops[0]].num_tasks):
                    task = fused_task(graph, last, index, [regions[op][index] for op in last.ops])
                    assert task.step_ready, (graph.ops[0].name, machine.name, name, seed)


def test_batch_norm_weights_in_a_fused_task_are_written_and_alone_accumulate():
    from flexflow.fusion import sole_gradients, updates_in_step
    from flexflow.launches import run_groups

    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 3, 6, 6), name="x")
    x = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, use_bias=False, name="conv")
    x = model.batch_norm(x, name="bn")
    model.dense(model.flat(x), 2, name="out")
    graph = model.graph()
    dp = named_strategy("dp", graph, parse_machine("p100:1"))
    kinds = ["cpu"] * 4
    bn = {p.id for p in graph.parameters if p.name.startswith("bn.")}
    everything = frozenset(p.id for p in graph.parameters)

    def decisions(strategy):
        regions = [
            c.task_regions(n.sig.output_shape)
            for n, c in zip(graph.ops, strategy.configs, strict=True)
        ]
        groups = run_groups(graph, strategy, regions, kinds)
        return groups, sole_gradients(graph, strategy, regions, groups)

    # data parallelism on consecutive CPUs: one group exchanging the statistics in memory,
    # each device's task writes its whole gamma and beta gradients
    (group,), sole = decisions(dp)
    assert group.exchanges and sole == everything
    # so each device keeps a flat copy of every weight and updates it in its step
    regions = [
        c.task_regions(n.sig.output_shape) for n, c in zip(graph.ops, dp.configs, strict=True)
    ]
    tasks = [
        tuple(
            fused_task(graph, group, i, [regions[op][i] for op in group.ops], sole)
            for i in range(4)
        )
    ]
    assert updates_in_step(graph, dp, (group,), tasks, sole, kinds)
    # on devices out of order the batch norm runs alone from its stores: its tasks add into
    # the partial gradients, which are zeroed each iteration
    shuffled = dp.replace("bn", ParallelConfig((4, 1, 1, 1), (1, 0, 3, 2)))
    groups, sole = decisions(shuffled)
    assert any(g.shared_statistics and g.ops == (1,) for g in groups)
    assert sole == everything - bn
