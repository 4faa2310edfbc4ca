"""flexflow.keras' layers and models build the graphs FFModel's layer calls build (no Legate)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow import ActiMode, DataType, FFModel, PoolType
from flexflow.errors import ShapeError
from flexflow.keras import backend as K
from flexflow.keras import regularizers
from flexflow.keras.backend.internal import Gather, gather, rsqrt
from flexflow.keras.layers import (
    Activation,
    Add,
    AveragePooling2D,
    BatchNormalization,
    Concatenate,
    Conv2D,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    Input,
    Maximum,
    MaxPooling2D,
    Minimum,
    Multiply,
    Permute,
    Reshape,
    Subtract,
    concatenate,
)
from flexflow.keras.models import Model, Sequential
from flexflow.layers import LayerAPI

BATCH = 8


def ops_of(api: LayerAPI) -> list[tuple]:
    """What makes two graphs the same: each op's name, definition and shapes, in order."""
    graph = api.graph()
    inputs = [(t.name, t.spec) for t in graph.input_tensors]
    return inputs + [(n.name, n.op, n.sig.output_shape) for n in graph.ops]


def built(model) -> LayerAPI:
    api = LayerAPI()
    model.build_into(api, BATCH)
    return api


def test_a_sequential_mlp_builds_the_graph_of_the_same_ffmodel_calls():
    model = Sequential()
    model.add(Dense(16, input_shape=(20,), activation="relu", name="d1"))
    model.add(Dropout(0.2, name="drop"))
    model.add(Dense(4, name="d2"))
    model.add(Activation("softmax", name="out"))

    ff = FFModel()
    x = ff.create_tensor((BATCH, 20), name=model.inputs[0].name)
    t = ff.dense(x, 16, ActiMode.AC_MODE_RELU, name="d1")
    t = ff.dropout(t, 0.2, name="drop")
    t = ff.dense(t, 4, name="d2")
    ff.softmax(t, name="out")
    assert ops_of(built(model)) == ops_of(ff)
    assert [layer.name for layer in model.layers] == ["d1", "drop", "d2", "out"]
    assert model.output.batch_shape == (None, 4)


def test_a_dense_kernel_regularizer_builds_the_same_ffmodel_call():
    """FlexFlow's examples/python/keras/regularizer.py: Dense(16, 'relu',
    kernel_regularizer=keras.regularizers.L2(0.001)), passed on to FFModel.dense as FlexFlow's
    Keras Dense passes it: the kernel's parameter carries the lambda."""
    x = Input(shape=(10,), name="x")
    hidden = Dense(16, activation="relu", kernel_regularizer=regularizers.L2(0.001), name="d1")
    model = Model(x, Dense(1, name="d2")(hidden(x)))

    ff = FFModel()
    t = ff.create_tensor((BATCH, 10), name="x")
    t = ff.dense(t, 16, ActiMode.AC_MODE_RELU, kernel_regularizer=regularizers.L2(0.001),
                 name="d1")  # fmt: skip
    ff.dense(t, 1, name="d2")
    api = built(model)
    assert ops_of(api) == ops_of(ff)
    assert api.graph().parameters == ff.graph().parameters
    assert [p.l2 for p in api.graph().parameters] == [0.001, 0.0, 0.0, 0.0]


def test_a_functional_cnn_with_concat_builds_the_graph_of_the_same_ffmodel_calls():
    a = Input(shape=(3, 16, 16), name="in_a")
    b = Input(shape=(3, 16, 16), name="in_b")
    t1 = Conv2D(8, kernel_size=(3, 3), padding=(1, 1), activation="relu", name="c1")(a)
    t2 = Conv2D(8, kernel_size=3, padding="same", name="c2")(b)
    t = Concatenate(axis=1, name="cat")([t1, t2])
    t = MaxPooling2D(pool_size=(2, 2), name="pool")(t)
    t = AveragePooling2D(pool_size=2, strides=2, name="avg")(t)
    t = Flatten(name="flat")(t)
    out = Dense(10, activation="softmax", name="d")(t)
    model = Model([a, b], out)

    ff = FFModel()
    x1 = ff.create_tensor((BATCH, 3, 16, 16), name="in_a")
    x2 = ff.create_tensor((BATCH, 3, 16, 16), name="in_b")
    u1 = ff.conv2d(x1, 8, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, name="c1")
    u2 = ff.conv2d(x2, 8, 3, 3, 1, 1, 1, 1, name="c2")
    u = ff.concat([u1, u2], 1, name="cat")
    u = ff.pool2d(u, 2, 2, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool")
    u = ff.pool2d(u, 2, 2, 2, 2, 0, 0, PoolType.POOL_AVG, name="avg")
    u = ff.flat(u, name="flat")
    u = ff.dense(u, 10, name="d")
    ff.softmax(u, name="d_softmax")
    assert ops_of(built(model)) == ops_of(ff)
    assert out.batch_shape == (None, 10)


@pytest.mark.parametrize(
    ("layer", "shape", "kind", "out"),
    [
        (lambda: Dense(7), (5,), "dense", (None, 7)),
        (lambda: Dense(7, activation="gelu"), (5,), "element_unary", (None, 7)),
        (lambda: Conv2D(4, kernel_size=3), (2, 9, 9), "conv2d", (None, 4, 7, 7)),
        (lambda: Conv2D(4, kernel_size=3, strides=2, padding="same"), (2, 9, 9), "conv2d",
         (None, 4, 5, 5)),
        (lambda: MaxPooling2D(), (2, 8, 8), "pool2d", (None, 2, 4, 4)),
        (lambda: Flatten(), (2, 3, 4), "flat", (None, 24)),
        (lambda: Reshape((6, 4)), (2, 3, 4), "reshape", (None, 6, 4)),
        (lambda: Permute((2, 1)), (3, 4), "transpose", (None, 4, 3)),
        (lambda: Permute((0, 2, 1)), (3, 4), "transpose", (None, 4, 3)),  # FlexFlow's
        (lambda: BatchNormalization(), (3, 4, 4), "batch_norm", (None, 3, 4, 4)),
        (lambda: Activation("tanh"), (3,), "element_unary", (None, 3)),
        (lambda: Dropout(0.5), (3,), "dropout", (None, 3)),
    ],
)  # fmt: skip
def test_each_layer_adds_its_op_with_its_shape(layer, shape, kind, out):
    x = Input(shape=shape)
    y = layer()(x)
    model = Model(x, y)
    assert y.batch_shape == out
    graph = built(model).graph()
    assert graph.ops[-1].kind == kind
    assert graph.ops[-1].sig.output_shape == (BATCH, *out[1:])


def test_embedding_sums_a_samples_ids_as_flexflows_keras_embedding():
    ids = Input(shape=(5,), dtype="int32")
    out = Embedding(100, 8)(ids)
    assert out.batch_shape == (None, 8)


@pytest.mark.parametrize(
    ("layer", "kind"),
    [(Add, "add"), (Subtract, "subtract"), (Multiply, "multiply"), (Maximum, "max"),
     (Minimum, "min")],
)  # fmt: skip
def test_merge_layers_add_their_element_wise_op(layer, kind):
    a, b = Input(shape=(4,)), Input(shape=(4,))
    model = Model([a, b], layer()([a, b]))
    graph = built(model).graph()
    assert [n.op.op_type.value for n in graph.ops] == [kind]


def test_multiply_broadcasts_as_flexflows_elementwise_mul_broadcast_example():
    """FlexFlow's examples/python/keras/elementwise_mul_broadcast.py: (B, 10, 1) times
    (B, 10, 2), either way round, and (B, 1, 2) times (B, 10, 1): the FFModel call's graph."""
    for first, second, out in [((10, 1), (10, 2), (10, 2)), ((10, 2), (10, 1), (10, 2)),
                               ((1, 2), (10, 1), (10, 2))]:  # fmt: skip
        a, b = Input(shape=(2 * 16,)), Input(shape=(10,))
        x0 = Reshape(first, name="r0")(Dense(first[0] * first[1], name="d0")(a))
        x1 = Reshape(second, name="r1")(Dense(second[0] * second[1], name="d1")(b))
        m = Multiply(name="times")([x0, x1])
        assert m.batch_shape == (None, *out)
        keras = built(Model([a, b], Dense(1, name="out")(Reshape((20,), name="flat")(m))))

        ff = LayerAPI()
        fa = ff.create_tensor((BATCH, 32), name=a.name)
        fb = ff.create_tensor((BATCH, 10), name=b.name)
        y0 = ff.reshape(ff.dense(fa, first[0] * first[1], name="d0"), (BATCH, *first), name="r0")
        y1 = ff.reshape(ff.dense(fb, second[0] * second[1], name="d1"), (BATCH, *second), name="r1")
        y = ff.multiply(y0, y1, name="times")
        ff.dense(ff.reshape(y, (BATCH, 20), name="flat"), 1, name="out")
        assert ops_of(keras) == ops_of(ff)


@pytest.mark.parametrize("layer", [Add, Subtract, Multiply, Maximum, Minimum])
def test_merge_layers_refuse_shapes_that_do_not_broadcast(layer):
    a, b = Input(shape=(10, 2)), Input(shape=(10, 3))
    match = r"called on \(None, 10, 2\), \(None, 10, 3\): .* cannot be broadcast: dimension 2"
    with pytest.raises(ShapeError, match=match):
        layer()([a, b])


def test_backend_functions_and_tensor_arithmetic_build_flexflows_element_wise_ops():
    a, b = Input(shape=(20,)), Input(shape=(20,))
    t = rsqrt(Dense(20)(a) + b)  # FlexFlow's rsqrt.py
    t = K.exp(K.sin(K.cos(K.pow(t * 2.0, 2.0))))
    out = K.sum(Reshape((10, 2))(t), axis=[1, 2], keepdims=True)
    assert out.batch_shape == (None, 1, 1)
    kinds = [n.kind for n in built(Model([a, b], out)).graph().ops]
    assert kinds[:2] == ["dense", "element_binary"]
    assert kinds[-1] == "reduce_sum"


def test_functional_concatenate_and_layer_connections_are_flexflows():
    a = Input(shape=(4,))
    d1, d2 = Dense(3), Dense(5)
    out = concatenate([d1(a), d2(a)], axis=1)
    assert out.batch_shape == (None, 8)
    assert a.to_layers == [d1, d2]
    assert out.from_layer.prev_layers == [d1, d2]
    assert d1.output.to_layers == [out.from_layer]


def test_nested_models_chain_their_layers_into_one_sequential():
    inner = Sequential([Dense(8, input_shape=(4,), name="n1"), Dense(6, name="n2")])
    x = Input(shape=(6,))
    head = Model(x, Dense(2, name="n3")(x))
    model = Sequential()
    model.add(inner)
    model.add(head)
    assert [layer.name for layer in model.layers] == ["n1", "n2", "n3"]
    assert [n.sig.output_shape for n in built(model).graph().ops] == [(8, 8), (8, 6), (8, 2)]


def test_get_layer_by_name_and_index():
    model = Sequential([Dense(3, input_shape=(2,), name="first"), Flatten(name="flat_x")])
    assert model.get_layer(name="flat_x") is model.layers[1]
    assert model.get_layer(index=0).name == "first"


def test_summary_lists_each_layer_with_its_shape_and_parameters():
    model = Sequential([Dense(3, input_shape=(2,), name="only")])
    table = model.summary()
    assert "only (Dense)" in table and "(None, 3)" in table and "Total params: 9" in table


@settings(max_examples=30, deadline=None)
@given(
    widths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    features=st.integers(1, 10),
)
def test_any_dense_chain_builds_as_the_same_ffmodel_calls(widths, features):
    model = Sequential()
    for i, width in enumerate(widths):
        shape = {"input_shape": (features,)} if i == 0 else {}
        model.add(Dense(width, activation="relu", name=f"h{i}", **shape))
    ff = FFModel()
    t = ff.create_tensor((BATCH, features), name=model.inputs[0].name)
    for i, width in enumerate(widths):
        t = ff.dense(t, width, ActiMode.AC_MODE_RELU, name=f"h{i}")
    assert ops_of(built(model)) == ops_of(ff)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(3, 20), kernel=st.sampled_from([1, 3, 5]))
def test_same_padding_keeps_the_size_at_stride_one(size, kernel):
    x = Input(shape=(1, size, size))
    assert Conv2D(2, kernel_size=kernel, padding="same")(x).shape == (2, size, size)
    assert MaxPooling2D(kernel, strides=1, padding="same")(x).shape == (1, size, size)
    assert AveragePooling2D(kernel, strides=1, padding="same")(x).shape == (1, size, size)


@pytest.mark.parametrize(
    ("size", "pool", "stride", "want"),
    [
        # Keras' values (TensorFlow's avg_pool, SAME): a corner averages its 4 real cells,
        # an edge its 6; dividing by 9 (the padding counted) would give 10/9 at (0, 0)
        (4, 3, 1, [[2.5, 3, 4, 4.5], [4.5, 5, 6, 6.5], [8.5, 9, 10, 10.5], [10.5, 11, 12, 12.5]]),
        (5, 3, 2, [[3, 4.5, 6], [10.5, 12, 13.5], [18, 19.5, 21]]),
    ],
)
def test_average_pooling_same_leaves_the_padding_out_as_keras_does(size, pool, stride, want):
    """AveragePooling2D(padding='same') is pool2d's average with 'same''s padding, which
    divides each window by its cells inside the image, as Keras' does."""
    x = Input(shape=(1, size, size), name="image")
    out = AveragePooling2D(pool_size=pool, strides=stride, padding="same", name="avg")(x)
    assert out.shape == (1, len(want), len(want))
    ff = FFModel()
    t = ff.create_tensor((BATCH, 1, size, size), name="image")
    ff.pool2d(t, pool, pool, stride, stride, 1, 1, PoolType.POOL_AVG, name="avg")
    api = built(Model(x, out))
    assert ops_of(api) == ops_of(ff)
    (node,) = api.graph().ops
    image = np.arange(size * size, dtype=np.float32).reshape(1, 1, size, size)
    (y,) = node.op.forward([image], [])
    np.testing.assert_array_equal(y[0, 0], want)


def test_functional_concatenate_joins_on_flexflows_axis_1_by_default():
    """FlexFlow's `concatenate(input_tensors, _axis=1)`: its CNN scripts join channels."""
    from flexflow.keras.layers import concatenate

    a, b = Input(shape=(32, 28, 28)), Input(shape=(32, 28, 28))
    assert concatenate([a, b]).shape == (64, 28, 28)
    assert concatenate([a, b], _axis=3).shape == (32, 28, 56)  # FlexFlow's keyword
    assert concatenate([a, b], axis=-1).shape == (32, 28, 56)  # Keras'


def test_unseeded_random_initializers_draw_per_layer():
    """Two layers of one unseeded RandomUniform start from different values, as in Keras;
    a seed given is kept."""
    from flexflow.keras.initializers import GlorotUniform, RandomNormal, RandomUniform

    init = RandomUniform()
    first, second = init.for_layer("dense_1"), init.for_layer("dense_2")
    assert None not in (first.seed, second.seed) and first.seed != second.seed
    assert first == init.for_layer("dense_1")  # a layer's draw is the same in every run
    assert RandomNormal(seed=5).for_layer("dense_1").seed == 5
    assert GlorotUniform().for_layer("dense_1") == GlorotUniform()  # the layer's own draw


def test_adam_takes_keras_and_flexflows_keras_epsilon():
    from flexflow.keras.optimizers import Adam

    assert Adam().ffhandle.epsilon == 1e-7


def test_gather_builds_flexflows_keras_example_as_the_same_ffmodel_calls():
    """FlexFlow's examples/python/keras/gather.py: (B, 20, 3) gathered along axis 1 by an
    int32 (B, 6, 3) input."""
    a, index = Input(shape=(10,), dtype="float32"), Input(shape=(6, 3), dtype="int32")
    h = Reshape((20, 3), name="r1")(Dense(60, activation="relu", name="d1")(a))
    g = gather(h, index, axis=1)
    assert g.batch_shape == (None, 6, 3) and isinstance(g.from_layer, Gather)
    out = Dense(1, name="d2")(Reshape((18,), name="r2")(g))
    model = Model([a, index], out)

    ff = FFModel()
    x = ff.create_tensor((BATCH, 10), name=a.name)
    i = ff.create_tensor((BATCH, 6, 3), DataType.DT_INT32, name=index.name)
    t = ff.reshape(ff.dense(x, 60, ActiMode.AC_MODE_RELU, name="d1"), (BATCH, 20, 3), name="r1")
    t = ff.gather(t, i, 1, name=g.from_layer.name)
    ff.dense(ff.reshape(t, (BATCH, 18), name="r2"), 1, name="d2")
    assert ops_of(built(model)) == ops_of(ff)


def test_gather_refuses_an_index_of_other_sizes_naming_the_layer():
    h, index = Input(shape=(20, 3)), Input(shape=(6, 4), dtype="int32")
    match = (
        r"Gather 'g' called on \(None, 20, 3\), \(None, 6, 4\): gather 'g': index must match "
        r"the input on every dim but dim 1"
    )
    with pytest.raises(ShapeError, match=match):
        Gather(1, name="g")([h, index])
    with pytest.raises(ShapeError, match=r"cannot gather along dim 0, the sample dimension"):
        Gather(name="g0")([h, Input(shape=(20, 3), dtype="int32")])  # FlexFlow's default axis 0
