"""FFModel: names, shape inference at call time, errors naming the layer, LSTM unrolling and weight sharing."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow import ActiMode, AggrMode, DataType, FFConfig, FFModel, PoolType
from flexflow.errors import GraphError, ShapeError
from flexflow.model_inputs import inputs_by_name, model_loader


def test_every_layer_infers_its_shape_when_called():
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3, 16, 16))
    t = model.conv2d(x, 8, 3, 3, 2, 2, 1, 1, ActiMode.AC_MODE_RELU)
    assert t.dims == (4, 8, 8, 8)
    t = model.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_AVG)
    assert t.shape == (4, 8, 4, 4)
    a, b = model.split(t, 2, axis=1)
    assert a.shape == b.shape == (4, 4, 4, 4)
    t = model.concat([model.relu(a), model.batch_norm(b)], axis=1)
    assert t.shape == (4, 8, 4, 4)
    t = model.transpose(model.reshape(model.flat(t), (4, 16, 8)), (0, 2, 1))
    assert t.shape == (4, 8, 16)
    t = model.mean(model.dense(t, 5, ActiMode.AC_MODE_GELU), dims=(1,))
    assert t.shape == (4, 5)
    assert model.softmax(model.add(t, model.multiply(t, t))).shape == (4, 5)


def test_default_names_count_per_kind_and_user_names_are_kept():
    model = FFModel()
    x = model.create_tensor((2, 4))
    model.dense(model.dense(x, 3), 3, name="head")
    model.dense(x, 2)
    names = [op.name for op in model.graph().ops]
    assert names == ["dense_1", "head", "dense_2"]


def test_duplicate_layer_name_is_refused():
    model = FFModel()
    x = model.create_tensor((2, 4))
    model.dense(x, 3, name="fc")
    with pytest.raises(GraphError, match=r"dense 'fc': a layer with this name exists"):
        model.dense(x, 3, name="fc")


def test_an_lstm_step_s_op_name_is_taken_before_and_after_it():
    """An LSTM named 'enc' unrolls into ops enc_t0, enc_t1, ...: a user layer of such a name
    made two ops of one name, refused only when the graph was built, every time after."""
    model = FFModel()
    x = model.create_tensor((2, 3, 4))
    h = model.lstm(x, 5, return_sequences=False, name="enc")
    with pytest.raises(GraphError, match=r"dense 'enc_t0': step 0 of lstm 'enc' is an op of"):
        model.dense(h, 5, name="enc_t0")
    model.softmax(model.dense(h, 3))  # the refused call changed nothing
    assert [op.name for op in model.graph().ops] == ["enc_t0", "enc_t1", "enc_t2", "dense_1",
                                                     "softmax_1"]  # fmt: skip
    model = FFModel()
    y = model.dense(model.create_tensor((2, 3, 4)), 4, name="enc_t1")
    with pytest.raises(GraphError, match=r"lstm 'enc': its step 1 is an op named 'enc_t1', and a"):
        model.lstm(y, 5, name="enc")
    model.lstm(y, 5, name="rnn")
    assert [op.name for op in model.graph().ops][:2] == ["enc_t1", "rnn_t0"]


def test_a_tensor_from_another_model_is_refused():
    other_model = FFModel()
    other = other_model.create_tensor((2, 4))
    model = FFModel()
    model.create_tensor((2, 4))  # same id as `other` in its own model
    with pytest.raises(ShapeError, match=r"dense 'fc': input .* is not a tensor of this model"):
        model.dense(other, 3, name="fc")


@pytest.mark.parametrize("dims", [(), (0, 3), (2, -1)])
def test_create_tensor_rejects_non_positive_dims(dims):
    with pytest.raises(ShapeError, match=r"input 'x': dims must be positive integers"):
        FFModel().create_tensor(dims, name="x")


def test_layer_errors_name_the_layer_and_shapes():
    model = FFModel()
    x = model.create_tensor((2, 3, 8, 8))
    with pytest.raises(ShapeError, match=r"dense 'fc'"):
        model.dense(model.create_tensor((2,)), 4, name="fc")
    with pytest.raises(ShapeError, match=r"concat 'cat'.*\(2, 3, 8, 8\)"):
        model.concat([x, model.create_tensor((2, 3, 4, 8))], axis=1, name="cat")
    with pytest.raises(
        ShapeError, match=r"split 'sp': cannot split input \(2, 3, 8, 8\) into 2 equal parts"
    ):
        model.split(x, 2, axis=1, name="sp")
    with pytest.raises(
        ShapeError, match=r"lstm 'rnn': input must be a \(sample, length, features\)"
    ):
        model.lstm(x, 8, name="rnn")


def test_lstm_unrolls_one_op_per_step_sharing_one_set_of_weights():
    model = FFModel(FFConfig(batch_size=2))
    tokens = model.create_tensor((2, 5), DataType.DT_INT32)
    seq = model.lstm(model.embedding(tokens, 50, 8), 16, name="rnn")
    assert seq.shape == (2, 5, 16)
    graph = model.graph()
    steps = [op for op in graph.ops if op.kind == "lstm"]
    assert [op.name for op in steps] == [f"rnn_t{t}" for t in range(5)]
    assert {op.weights for op in steps} == {steps[0].weights}
    assert [graph.parameters[p].name for p in steps[0].weights] == [
        "rnn.w_ih",
        "rnn.w_hh",
        "rnn.bias",
    ]
    assert {op.layer for op in steps} == {"rnn"}
    # the unread sequence output is the model's output, produced by one stack op
    assert graph.ops[-1].kind == "stack" and graph.ops[-1].sig.output_shape == (2, 5, 16)


def test_stacked_lstms_read_each_step_directly_and_stack_only_when_needed():
    model = FFModel(FFConfig(batch_size=2))
    tokens = model.create_tensor((2, 4), DataType.DT_INT32)
    first = model.lstm(model.embedding(tokens, 50, 8), 16, name="l1")
    second = model.lstm(first, 16, name="l2")
    graph_before = model.graph()
    # l1's sequence is never stacked: l2's step t reads l1's step t
    assert [op.kind for op in graph_before.ops].count("stack") == 1
    l2_t1 = graph_before.op("l2_t1")
    assert graph_before.tensor(l2_t1.inputs[0]).producer == graph_before.op("l1_t1").id
    model.dense(second, 3)  # a non-recurrent reader: l2 is already stacked as the output
    last = model.lstm(first, 4, return_sequences=False, name="l3")
    assert last.shape == (2, 4)


def test_graph_inputs_and_outputs():
    model = FFModel()
    x = model.create_tensor((2, 4), name="x")
    model.softmax(model.dense(x, 3, name="fc"), name="prob")
    graph = model.graph()
    assert [t.name for t in graph.input_tensors] == ["x"]
    assert [t.name for t in graph.output_tensors] == ["prob:0"]
    assert [(e.src, e.dst) for e in graph.edges] == [(0, 1)]
    assert graph.num_parameters == 4 * 3 + 3


def test_data_of_another_sample_shape_is_refused_before_training():
    """The wrong feature width named as such (it was reported as a batch size problem, from
    deep in the runtime's feeding)."""
    model = FFModel(FFConfig(batch_size=32))
    model.dense(model.create_tensor((32, 20), name="x"), 4)
    x, y = np.zeros((64, 10), np.float32), np.zeros(64, np.int64)
    with pytest.raises(ShapeError, match=r"input 'x' takes samples of shape \(20,\).*\(64, 10\)"):
        model.fit(x, y)


def test_ffconfig_from_args_warns_of_a_misspelt_flag_and_leaves_the_scripts_own():
    with pytest.warns(UserWarning, match="--bugdet is not one of its flags.*did you mean --budget"):
        config = FFConfig.from_args(["--bugdet", "3", "--epochs", "2", "--data", "d.npz"])
    assert (config.epochs, config.search_budget) == (2, 0.0)


def test_ffconfig_from_args_prints_its_flags_for_help(capsys):
    with pytest.raises(SystemExit) as exited:
        FFConfig.from_args(["--help"])
    assert exited.value.code == 0 and "--budget SECONDS" in capsys.readouterr().out


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda m, x: m.conv2d(x, 8, 3, 3, 1.5, 1, 1, 1),
            r"conv2d .*stride_h must be a positive integer, got 1\.5",
        ),
        (
            lambda m, x: m.conv2d(x, None, 3, 3, 1, 1, 1, 1),
            r"out_channels must be a positive integer, got None",
        ),
        (
            lambda m, x: m.dense(m.flat(x), 2.5),
            r"dense .*out_dim must be a positive integer, got 2\.5",
        ),
        (
            lambda m, x: m.pool2d(x, 2, 2, 2, 2, 0.5, 0),
            r"pool2d .*padding_h must be an integer >= 0",
        ),
        (
            lambda m, x: m.layer_norm(m.flat(x), eps=float("nan")),
            r"eps must be a positive finite number, got nan",
        ),
        (
            lambda m, x: m.softmax(m.flat(x), axis=1.0),
            r"axis 1\.0 is out of range .*pass an integer axis",
        ),
        (lambda m, x: m.create_tensor((4, True)), r"dims must be positive integers"),
        (lambda m, x: m.dropout(x, "0.5"), r"dropout .*rate must be in \[0, 1\), got '0\.5'"),
        (lambda m, x: m.batch_norm(x, relu="yes"), r"relu must be True or False, got 'yes'"),
        (lambda m, x: m.dropout(x, 0.5, seed=-1), r"dropout: seed must be an integer >= 0"),
        (lambda m, x: m.transpose(m.flat(x), (0.0, 1.0)), r"is not a permutation of \(0, 1\)"),
        (
            lambda m, x: m.pool2d(x, 2, 2, 2, 2, 0, 0, pool_type=7),
            r"pool_type must be a member of PoolType, got 7; pass one of PoolType\.POOL_MAX",
        ),
        (
            lambda m, x: m.dense(m.flat(x), 4, activation="relu"),
            r"activation must be a member of ActiMode, got 'relu'; pass one of ActiMode\.AC_MODE_NONE",
        ),
        (  # FlexFlow's pool2d takes the pool type before the activation: another enum's member
            lambda m, x: m.pool2d(x, 2, 2, 2, 2, 0, 0, ActiMode.AC_MODE_RELU),
            r"pool_type must be a member of PoolType, got <ActiMode\.AC_MODE_RELU",
        ),
        (
            lambda m, x: m.dense(m.flat(x), 4, PoolType.POOL_MAX),
            r"activation must be a member of ActiMode, got <PoolType\.POOL_MAX",
        ),
        (
            lambda m, x: m.embedding(
                m.create_tensor((4, 3), DataType.DT_INT32), 10, 4, ActiMode.AC_MODE_RELU
            ),
            r"aggr must be a member of AggrMode, got <ActiMode\.AC_MODE_RELU",
        ),
        (
            lambda m, x: m.create_tensor((4, 2), "float16"),
            r"data type 'float16' is not one flexflow takes",
        ),
    ],
)
def test_a_layer_given_a_non_integer_size_or_a_bad_value_says_so(build, message):
    """Floats were kept or truncated (a stride of 1.5, 2.5 outputs), None was a TypeError."""
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3, 8, 8), name="x")
    with pytest.raises(ShapeError, match=message):
        build(model, x)


def _classifier_file(extra: str = "", last: str = "softmax"):
    model = FFModel(FFConfig(batch_size=8))
    x = model.dense(model.create_tensor((8, 12), name="features"), 4, name="fc")
    if last == "softmax":
        model.softmax(x, name="probs")
    if extra:
        model.dense(x, 16, name=extra)
    return model.graph()


def test_the_loss_must_read_the_only_output_and_a_cross_entropy_a_softmax():
    """The loss read an unused side layer added last (training nothing the user meant), and
    sparse cross-entropy took a dense layer's or a sigmoid's outputs as probabilities."""
    from flexflow.runtime.loss import check_loss_input, check_model_output

    with pytest.raises(ShapeError, match=r"nothing reads the output of softmax 'probs'; the loss "
                       r"reads the last layer added \(dense 'aux'\)"):  # fmt: skip
        check_model_output(_classifier_file("aux"), "sparse_categorical_crossentropy")
    for loss in ("sparse_categorical_crossentropy", "categorical_crossentropy"):
        with pytest.raises(ShapeError, match=r"reads probabilities .* ends in dense 'fc'"):
            check_loss_input(_classifier_file(last="dense"), loss)
    check_loss_input(_classifier_file(last="dense"), "mean_squared_error")
    check_loss_input(_classifier_file(), "sparse_categorical_crossentropy")
    model = FFModel(FFConfig(batch_size=8))
    model.softmax(model.dense(model.create_tensor((8, 4, 10)), 5), axis=1)
    with pytest.raises(ShapeError, match=r"ends in a softmax over axis 1"):
        check_loss_input(model.graph(), "sparse_categorical_crossentropy")
    with pytest.raises(ShapeError, match=r"ends in a softmax over axis 1"):
        model.compile(loss_type="sparse_categorical_crossentropy")  # before Legate starts


def test_an_input_made_with_another_batch_size_is_refused_before_training():
    model = FFModel(FFConfig(batch_size=32))
    model.softmax(model.dense(model.create_tensor((64, 12), name="features"), 4))
    x, y = np.zeros((64, 12), np.float32), np.zeros(64, np.int32)
    with pytest.raises(ShapeError, match=r"input 'features' was created with batch 64 .* the "
                       r"batch size is 32; create inputs with model.config.batch_size"):  # fmt: skip
        model.fit(x, y)


def test_ids_outside_an_embedding_or_not_integers_are_refused_naming_the_layer():
    """Both were 'a step task did not run: a token id outside [0, num_embeddings)', naming
    neither the layer nor the id."""
    model = FFModel(FFConfig(batch_size=4))
    ids = model.create_tensor((4, 3), DataType.DT_INT32, name="tokens")
    model.softmax(model.dense(model.flat(model.embedding(ids, 20, 8, name="embed")), 5))
    labels = np.zeros(8, np.int32)
    tokens = np.arange(24, dtype=np.int32).reshape(8, 3) + 2
    with pytest.raises(ShapeError, match=r"input 'tokens' holds id 25, outside \[0, 20\) of "
                       r"embedding 'embed' \(20 rows\)"):  # fmt: skip
        model.fit(tokens, labels)
    with pytest.raises(ShapeError, match=r"input 'tokens' takes integer ids \(.*\), got float32"):
        model.fit(tokens.astype(np.float32), labels)


def test_dropouts_draw_distinct_masks_and_the_run_seed_moves_them():
    """Two dropouts left at the default seed shared one mask stream (the same elements dropped
    in both); the run's seed did not reach them. Seed 0 keeps the layers' own seeds."""
    from flexflow.task_modes import run_seed_key, seeded_for_run

    model = FFModel(FFConfig(batch_size=4))
    x = model.dense(model.create_tensor((4, 8), name="x"), 8)
    a = model.dropout(x, 0.5)
    model.dropout(model.add(a, x), 0.5, seed=7)
    model.dropout(model.dense(a, 8), 0.5)
    graph = model.graph()
    seeds = [node.op.seed for node in graph.ops if node.kind == "dropout"]
    assert len(set(seeds)) == 3 and seeds[1] == 7
    assert seeded_for_run(graph, 0) is graph
    moved = [node.op.seed for node in seeded_for_run(graph, 2).ops if node.kind == "dropout"]
    assert moved == [s ^ run_seed_key(2) for s in seeds] and len(set(moved)) == 3
    keys = {run_seed_key(seed) for seed in range(1, 1000)}
    assert len(keys) == 999 and all(0 < k < 2**63 for k in keys)


def _two_inputs():
    model = FFModel(FFConfig(batch_size=4))
    a = model.create_tensor((4, 3), name="a")
    b = model.create_tensor((4, 5), name="b")
    model.softmax(model.dense(model.concat([a, b], axis=1), 2))
    return model, a, b


def test_inputs_are_taken_by_name_by_tensor_or_in_order_and_checked_before_compile():
    """FlexFlow ties arrays to the tensors create_tensor returned; a dict keyed by them (or a
    misspelt name) failed inside the first step, a list of arrays was refused."""
    model, a, b = _two_inputs()
    xa, xb, y = np.zeros((8, 3), np.float32), np.zeros((8, 5), np.float32), np.zeros(8, np.int32)
    for x in ({"a": xa, "b": xb}, {a: xa, b: xb}, [xa, xb], (xa, xb)):  # all taken: then
        with pytest.raises(GraphError, match=r"call FFModel.compile"):  # it wants compile
            model.fit(x, y)
    with pytest.raises(ShapeError, match=r"the data names \['c'\], which it has not"):
        model.fit({"a": xa, "c": xb}, y)
    with pytest.raises(ShapeError, match=r"the data lacks \['b'\]"):
        model.fit({a: xa}, y)
    with pytest.raises(ShapeError, match=r"x holds 3 arrays: pass one per input"):
        model.fit([xa, xb, xb], y)
    with pytest.raises(ShapeError, match=r"input 'b' takes samples of shape \(5,\)"):
        model.fit([xa, xa], y)


def test_a_data_loader_must_cut_the_models_batches_and_hold_its_targets():
    from flexflow.data import DataLoader

    model, _, _ = _two_inputs()
    data = {"a": np.zeros((8, 3), np.float32), "b": np.zeros((8, 5), np.float32)}
    y = np.zeros(8, np.int32)
    with pytest.raises(ShapeError, match=r"cuts batches of 2, but the model's batch size is 4"):
        model.fit(DataLoader(data, y, 2))
    with pytest.raises(ShapeError, match=r"y was given beside a DataLoader"):
        model.fit(DataLoader(data, y, 4), y)
    with pytest.raises(ShapeError, match=r"the data lacks \['b'\]"):
        model.fit(DataLoader({"a": data["a"]}, y, 4))


def test_an_input_no_layer_reads_is_refused_at_compile():
    """FlexFlow examples create a label tensor; here it asked fit for data for it."""
    from flexflow.runtime.loss import check_model_output

    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3), name="x")
    model.create_tensor((4, 1), DataType.DT_INT32, name="label")
    model.softmax(model.dense(x, 2))
    with pytest.raises(ShapeError, match=r"no layer reads the model input 'label' \(4, 1\)"):
        check_model_output(model.graph(), "sparse_categorical_crossentropy")


def test_layers_take_flexflows_positional_arguments():
    """FlexFlow's calls pass data types, in-place flags and the like before `name`; here they
    landed on `name` ("layer name must be a non-empty string, got DType.FLOAT32")."""
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor([4, 3, 8, 8], DataType.DT_FLOAT, True)
    t = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, 1, True, None, None, None)
    t = model.relu(model.flat(t), True)
    t = model.dense(t, 8, ActiMode.AC_MODE_RELU, True, DataType.DT_FLOAT, None, None, None, None)
    t = model.layer_norm(model.add(t, t, False), [-1], True, 1e-5, True)
    ids = model.create_tensor([4, 5], DataType.DT_INT32)
    e = model.embedding(ids, 100, 8, AggrMode.AGGR_MODE_NONE, DataType.DT_FLOAT)
    a = model.multihead_attention(e, e, e, 8, 2, 0, 0, 0.0, True, False, False, None, None)
    model.batch_matmul(a, model.transpose(a, (0, 2, 1)), 1, 2)
    assert [n.kind for n in model.graph().ops][:4] == ["conv2d", "flat", "element_unary", "dense"]


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda m, x: m.dense(m.flat(x), 8, ActiMode.AC_MODE_RELU, True, "fc1"),
            r"dense: datatype='fc1' is one of FlexFlow's .* \(a layer name goes by keyword: "
            r"name='fc1'\)",
        ),
        (
            lambda m, x: m.conv2d(x, 4, 3, 3, 1, 1, 1, 1, kernel_initializer=object()),
            r"conv2d: kernel_initializer=.* set other initial weights with model.executor.set_weights",
        ),
        (lambda m, x: m.dense(m.flat(x), 8, shared_op=1), r"do not share weights by shared_op"),
        (lambda m, x: m.relu(x, "r1"), r"relu: inplace='r1' .* name='r1'"),
        (lambda m, x: m.layer_norm(m.flat(x), use_bias=False), r"always has its bias"),
    ],
)
def test_flexflow_arguments_this_api_does_not_implement_are_refused_by_name(build, message):
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3, 8, 8), name="x")
    with pytest.raises(ShapeError, match=message):
        build(model, x)


def test_a_one_input_models_data_in_a_list_is_read_as_keras_reads_it():
    """[x] is the one input's array; a list of samples (or of numpy scalars) is the data."""
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3), name="x")
    model.softmax(model.dense(x, 2))
    data = np.zeros((8, 3), np.float32)
    graph, name = model.graph(), model._input_name
    assert inputs_by_name([data], graph, name)["x"] is data
    rows = inputs_by_name(list(data), graph, name)["x"]
    assert rows.shape == (8, 3)
    with pytest.raises(ShapeError, match=r"x gives input 'x' twice"):
        inputs_by_name({"x": data, x: data}, graph, name)


def test_a_refused_dropout_seed_leaves_the_layer_name_free():
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3), name="x")
    with pytest.raises(ShapeError, match="seed must be an integer >= 0"):
        model.dropout(x, 0.5, seed=-1, name="drop")
    model.dropout(x, 0.5, seed=1, name="drop")


@pytest.mark.parametrize(
    "build",
    [
        lambda m, x: m.dense(x, 0, name="fc1"),
        lambda m, x: m.lstm(x, -1, name="fc1"),
        lambda m, x: m.split(x, [1, 1], 1, name="fc1"),
        lambda m, x: m.multihead_attention(x, x, x, 3, 2, name="fc1"),
    ],
)
def test_a_failed_layer_call_leaves_the_model_as_it_was(build):
    """Its name was taken, so the corrected retry was refused as a duplicate."""
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3), name="x")
    before = (model.num_ops, model.graph())
    with pytest.raises(ShapeError):
        build(model, x)
    assert (model.num_ops, model.graph()) == before
    model.dense(x, 4, name="fc1")  # the corrected call takes the name
    model.dense(x, 4, name="inner")
    assert [n.name for n in model.graph().ops] == ["fc1", "inner"]


def test_a_failed_layer_reading_an_lstm_sequence_leaves_it_unstacked():
    """Reading an LSTM's sequence adds the `stack` op making it; a layer failing after that
    must take the stack back too."""
    model = FFModel(FFConfig(batch_size=4))
    sequence = model.lstm(model.create_tensor((4, 5, 3), name="x"), 6, name="rnn")
    before = model.num_ops
    with pytest.raises(ShapeError):
        model.dense(sequence, 0, name="fc")
    assert model.num_ops == before and sequence.id in model._sequences
    model.dense(sequence, 2, name="fc")
    assert [n.kind for n in model.graph().ops[before:]] == ["stack", "dense"]


def test_every_layer_method_is_one_step():
    """A layer method missing from LAYER_METHODS would keep half its work after an error."""
    import inspect

    from flexflow.layers import LAYER_METHODS

    returns_tensors = {
        name
        for cls in FFModel.__mro__  # the layer API's and any FFModel adds
        for name, method in vars(cls).items()
        if not name.startswith("_")
        and callable(method)
        and "Tensor" in str(inspect.signature(method).return_annotation)
    }
    assert returns_tensors == set(LAYER_METHODS)
    assert all(hasattr(getattr(FFModel, name), "__wrapped__") for name in LAYER_METHODS)


def test_numpy_integers_as_sizes_become_python_ones():
    """`dense(x, labels.max() + 1)` passed an np.int64, accepted, then compile failed on a
    JSON TypeError."""
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 6), name="x")
    out = model.dense(x, np.array([0, 2, 1]).max() + 1, name="fc")
    node = model.graph().ops[0]
    assert type(node.op.out_dim) is int and out.dims == (4, 3)
    assert type(node.sig.output_shape[1]) is int
    handle = model.create_tensor(np.array([4, 2]), name="y")
    assert all(type(d) is int for d in handle.dims)
    assert len(model.split(handle, np.int64(2), 1)) == 2


def test_no_samples_and_a_dims_number_are_refused_clearly():
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 3), name="x")
    model.softmax(model.dense(x, 2))
    with pytest.raises(ShapeError, match=r"x holds no samples .*pass at least one"):
        model._data(np.zeros((0, 3), np.float32), None, False, False)
    with pytest.raises(ShapeError, match=r"dims must be a sequence of positive integers .* got 8"):
        FFModel().create_tensor(8)
    assert FFModel().create_tensor(np.array([2, 3])).dims == (2, 3)
    with pytest.raises(ShapeError, match=r"dims must be a sequence"):
        FFModel().create_tensor(np.array(8))


def test_one_metric_given_as_a_string_is_that_metric():
    from flexflow.runtime.loss import metric_names

    assert metric_names("accuracy", "sparse_categorical_crossentropy") == ("accuracy",)


def test_an_id_below_zero_is_named_with_its_own_fix():
    model = FFModel(FFConfig(batch_size=4))
    ids = model.create_tensor((4, 3), DataType.DT_INT32, name="tokens")
    model.softmax(model.dense(model.flat(model.embedding(ids, 20, 8, name="embed")), 5))
    tokens = np.zeros((8, 3), np.int32)
    tokens[1, 1] = -1
    with pytest.raises(ShapeError, match=r"holds id -1, .* ids are row numbers from 0"):
        model.fit(tokens, np.zeros(8, np.int32))


def test_fit_without_inputs_says_x_is_none():
    """It said "input 'x' takes numbers (float32), got object data"."""
    model = FFModel(FFConfig(batch_size=4))
    model.softmax(model.dense(model.create_tensor((4, 3), name="x"), 2))
    with pytest.raises(ShapeError, match="x is None; pass the model's inputs"):
        model_loader(model.graph(), model.config, None, None, False, False, model._input_name)


def test_compile_refuses_an_input_of_another_batch_size_before_any_search():
    """fit refused it, after compile had searched and timed strategies for the wrong batch."""
    model = FFModel(FFConfig(batch_size=8, search_budget=30.0))
    model.softmax(model.dense(model.create_tensor((12, 5), name="x"), 3))
    with pytest.raises(ShapeError, match=r"input 'x' was created with batch 12 .* batch size is 8"):
        model.compile("sgd")


def test_a_gather_index_out_of_range_is_refused_naming_the_layer_through_reshapes():
    """An index fed whole to gather, or reshaped on its way there, is checked where it is fed:
    out of range in a Legate task it aborted the process with a native backtrace."""
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 6), name="x")
    index = model.create_tensor((4, 12), DataType.DT_INT32, name="index")
    h = model.reshape(model.dense(x, 40), (4, 20, 2))  # (4, 20, 2)
    g = model.gather(h, model.reshape(index, (4, 6, 2)), 1, name="pick")  # (4, 6, 2)
    model.dense(model.flat(g), 3)
    graph = model.graph()
    assert [(n.name, limit) for n, limit in graph.index_limits(1)] == [("pick", 20)]
    assert graph.token_vocabulary(1) == 20
    xs, ys = np.zeros((8, 6), np.float32), np.zeros((8, 3), np.float32)
    picks = np.zeros((8, 12), np.int32)
    for bad in (20, -1):
        picks[5, 7] = bad
        with pytest.raises(ShapeError, match=rf"input 'index' holds index {bad}, outside \[0, 20\) "
                           r"of gather 'pick' \(input \(4, 20, 2\), gathering along dim 1\); "
                           r"indices count from 0"):  # fmt: skip
            model.fit({"x": xs, "index": picks}, ys)
