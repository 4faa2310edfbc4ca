"""flexflow.core: FlexFlow's names over this API (no Legate: the Legate runs are
tests/training/test_api.py's port and tests/training/test_examples.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from flexflow.core import (
    ActiMode,
    DataType,
    FFModel,
    FlexFlowConfig,
    GlorotUniformInitializer,
    NetConfig,
    NormInitializer,
    PerfMetrics,
    RegularizerMode,
    SingleDataLoader,
    UniformInitializer,
    ZeroInitializer,
    flexflow_python_binding,
)
from flexflow.errors import FlexFlowError, GraphError, NotOfferedError, ShapeError
from flexflow.runtime.training import Metrics


def _mlp() -> tuple[FFModel, object]:
    model = FFModel(FlexFlowConfig(batch_size=4))
    x = model.create_tensor([4, 6], DataType.DT_FLOAT)
    model.softmax(model.dense(x, 3, ActiMode.AC_MODE_RELU))
    return model, x


def test_initializers_naming_the_layers_own_draw_are_taken_and_others_refused():
    model = FFModel(FlexFlowConfig(batch_size=4))
    x = model.create_tensor([4, 6], DataType.DT_FLOAT)
    model.dense(x, 3, kernel_initializer=GlorotUniformInitializer(123),
                bias_initializer=ZeroInitializer())  # fmt: skip
    with pytest.raises(ShapeError, match=r"kernel_initializer=UniformInitializer\(12, -1, 1\)"):
        model.embedding(
            model.create_tensor([4, 2], DataType.DT_INT32), 10, 4,
            kernel_initializer=UniformInitializer(12, -1, 1),
        )  # fmt: skip
    ids = model.create_tensor([4, 2], DataType.DT_INT32)
    with pytest.raises(ShapeError, match=r"embeddings start from a normal draw here"):
        model.embedding(ids, 10, 4, kernel_initializer=GlorotUniformInitializer(1))


def test_flexflows_loaders_become_arrays_by_input_and_labels():
    model, x = _mlp()
    images, labels = np.zeros((8, 6), np.float32), np.zeros((8, 1), np.int32)
    loader = model.create_data_loader(x, images)
    assert loader.num_samples == 8
    given = model._arrays(loader, model.create_data_loader(model.label_tensor, labels))
    assert given[0] == {x: images} and given[1] is labels
    with pytest.raises(GraphError, match="call FFModel.compile"):  # taken: it wants compile
        model.fit(x=loader, y=SingleDataLoader(model.label_tensor, labels))
    with pytest.raises(ShapeError, match=r"batch_size=8, but the model was built for batches of 4"):
        model.fit(loader, labels, 8)
    with pytest.raises(ShapeError, match="takes an input tensor or model.label_tensor"):
        model.create_data_loader("x", images)


def test_the_rest_of_flexflows_surface_says_what_to_use(monkeypatch):
    model, x = _mlp()
    with pytest.raises(FlexFlowError, match=r"forward\(\): no batch was set for input\(s\)"):
        model.forward()  # the loop itself runs under Legate: tests/training/test_api.py
    with pytest.raises(FlexFlowError, match="backward\\(\\) needs forward\\(\\) first"):
        model.backward()
    assert repr(model.get_layer_by_id(0)) == "Layer(0, 'dense_1', dense)"  # weights: Legate
    with pytest.raises(FlexFlowError, match=r"call ffmodel.compile\(...\) first"):
        model.get_layer_by_id(0).get_weight_tensor().get_weights(model)
    with pytest.raises(FlexFlowError, match=r"takes its own model first"):
        model.get_layer_by_id(0).get_weight_tensor().get_weights(None)
    with pytest.raises(FlexFlowError, match=r"no layer has that name; the model's layers are"):
        model.get_layer_by_name("conv1")
    with pytest.raises(NotOfferedError, match=r"FFModel.argmax .* is not offered here"):
        model.argmax(x, False)  # a bare AttributeError before
    assert not hasattr(model, "rms_norm") and not hasattr(model, "no_such_method")
    with pytest.raises(GraphError, match=r"call FFModel.compile\(...\) before fit"):
        model.executor  # noqa: B018 (its own message, not a refused FlexFlow name's)
    with pytest.raises(FlexFlowError, match=r"the model has 2 layer\(s\)"):
        model.get_layer_by_id(0.0)
    assert model.get_layer_by_id(0).get_bias_tensor().name == "dense_1.bias"
    with pytest.raises(FlexFlowError, match=r"softmax layer 1 'softmax_1' has no bias; its "):
        model.get_layer_by_id(1).get_bias_tensor()
    attention = FFModel(FlexFlowConfig(batch_size=4))
    q = attention.create_tensor([4, 5, 16], DataType.DT_FLOAT)
    attention.multihead_attention(q, q, q, 16, 4)
    layer = attention.get_layer_by_id(0)
    assert layer.get_weight_tensor().name == layer.get_parameter_by_id(0).name  # no kernel
    with pytest.raises(FlexFlowError, match=r"has no bias; its weights are 0: "):
        layer.get_bias_tensor()  # was its parameter 1, the key projection
    with pytest.raises(FlexFlowError, match=r"the model has no layers yet"):
        FFModel(FlexFlowConfig(batch_size=4)).get_last_layer()
    model.prefetch()  # FlexFlow's hint: nothing to do
    with pytest.raises(NotOfferedError, match=r"forward\(seq_length=2\): running part of a "
                       r"sequence is not offered; the inputs' sequence length is 6"):  # fmt: skip
        model.forward(seq_length=2)  # a TypeError before (FlexFlow's bert_proxy passes it)
    for whole in (6, 9, -1):  # the whole length, more, or FlexFlow's -1: taken
        with pytest.raises(FlexFlowError, match=r"forward\(\): no batch was set"):
            model.forward(seq_length=whole)
    with pytest.raises(FlexFlowError, match="no metrics yet"):
        model.get_perf_metrics()
    metrics = Metrics(0, 0.5, 0.875, 64, 1.0)
    assert PerfMetrics(metrics).get_accuracy() == 87.5  # a percentage, as FlexFlow's
    monkeypatch.setattr("sys.argv", ["example.py", "-b", "8"])
    assert NetConfig().dataset_path == ""
    monkeypatch.setattr("sys.argv", ["example.py", "-d", "/data/cifar"])
    assert NetConfig().dataset_path == "/data/cifar"
    assert not hasattr(DataType, "DT_DOUBLE")  # an AttributeError too
    with pytest.raises(FlexFlowError, match=r"DataType.DT_HALF is not one flexflow takes"):
        DataType.DT_HALF  # noqa: B018 (an AttributeError before)
    before = FlexFlowConfig.get_current_time()
    time.sleep(0.01)
    assert 9_000 < FlexFlowConfig.get_current_time() - before < 1_000_000  # microseconds


class _FlexFlowRegularizer:
    """A regularizer as FlexFlow's dense reads one: a `type` and a `_lambda` (its
    flexflow.keras.regularizers classes set just these)."""

    def __init__(self, mode: RegularizerMode, lam: float) -> None:
        self.type, self._lambda = mode, lam


def test_dense_takes_flexflows_l2_kernel_regularizer_and_refuses_the_rest():
    model, x = _mlp()
    model.dense(x, 5, kernel_regularizer=_FlexFlowRegularizer(RegularizerMode.REG_MODE_L2, 0.01))
    # by position, as FlexFlow's dense(input, out_dim, activation, use_bias, datatype,
    # shared_op, kernel_initializer, bias_initializer, kernel_regularizer)
    model.dense(x, 5, ActiMode.AC_MODE_NONE, True, DataType.DT_FLOAT, None, None, None,
                _FlexFlowRegularizer(RegularizerMode.REG_MODE_L2, 0.5), name="d")  # fmt: skip
    model.dense(x, 5, kernel_regularizer=_FlexFlowRegularizer(RegularizerMode.REG_MODE_NONE, 1))
    lambdas = {p.name: p.l2 for p in model.graph().parameters if p.l2}
    assert lambdas == {"dense_2.kernel": 0.01, "d.kernel": 0.5}
    with pytest.raises(NotOfferedError, match=r"dense 'e': kernel_regularizer .* is an L1 "
                       r"penalty, which is not offered \(FlexFlow's kernels compute only L2\)"):  # fmt: skip
        model.dense(x, 5, kernel_regularizer=_FlexFlowRegularizer(RegularizerMode.REG_MODE_L1,
                                                                  0.1), name="e")  # fmt: skip
    # past float32's range (inf there), an int past float64's, below its smallest (0 there)
    for bad in (-1.0, float("inf"), None, 1e39, 10**400, 1e-46):
        with pytest.raises(FlexFlowError, match=r"dense 'e': kernel_regularizer's lambda must "
                           r"be a number >= 0 that float32 holds"):  # fmt: skip
            model.dense(x, 5, kernel_regularizer=_FlexFlowRegularizer(
                RegularizerMode.REG_MODE_L2, bad), name="e")  # fmt: skip
    assert "e" not in {node.name for node in model.graph().ops}  # refused before it was added
    assert RegularizerMode.REG_MODE_L2.value == 19  # FlexFlow's flexflow.type values


def test_a_regularizer_subclassed_as_flexflows_own_sets_its_lambda():
    """FlexFlow's keras.regularizers.L2 sets `self.type` and `self._lambda` in __init__."""
    from flexflow.regularizers import Regularizer

    class MyL2(Regularizer):
        def __init__(self, l2: float) -> None:
            self.type, self._lambda = RegularizerMode.REG_MODE_L2, l2

    model, x = _mlp()
    model.dense(x, 5, kernel_regularizer=MyL2(0.25), name="d")
    assert {p.name: p.l2 for p in model.graph().parameters if p.l2} == {"d.kernel": 0.25}


def test_flexflows_other_forms_are_taken_or_refused_naming_the_way():
    model, x = _mlp()
    images = model.create_tensor([4, 3, 8, 8], DataType.DT_FLOAT)
    model.conv2d(images, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, True)  # groups: True is 1
    assert model.graph().ops[-1].op.groups == 1
    model.dense(x, 5, kernel_initializer=NormInitializer(7, 0.0, 0.5))
    model.dense(x, 5, kernel_initializer=UniformInitializer(12, -1, 1))
    assert [name for name, _ in model._drawn] == ["dense_2.kernel", "dense_3.kernel"]
    assert UniformInitializer(12, -1, 1).draw((3, 4)).max() < 1.0
    with pytest.raises(ShapeError, match="by keyword"):
        model.dense(x, 5, ActiMode.AC_MODE_NONE, True, None, None, UniformInitializer(1, 0, 1))
    with pytest.raises(FlexFlowError, match=r"pass CompMode.TRAINING or CompMode.INFERENCE"):
        model.compile(comp_mode="inference")  # INFERENCE itself: tests/training/test_api.py
    with pytest.raises(FlexFlowError, match=r"inline_map takes the model first"):
        x.inline_map(None)  # FlexFlow's older inline_map(ffconfig)
    with pytest.raises(FlexFlowError, match=r"attach_numpy_array takes the model first"):
        x.attach_numpy_array(None, None, np.zeros((4, 6), np.float32))  # demo_gather.py's
    assert flexflow_python_binding() == "legate"


def test_flexflows_newer_script_openings_and_defaults_are_taken():
    from flexflow.core import get_configs, init_flexflow_runtime

    init_flexflow_runtime(get_configs())  # FlexFlow's scripts begin so
    model, x = _mlp()
    model.dense(x, 3, ActiMode.AC_MODE_NONE, True, DataType.DT_NONE)  # DT_NONE: the input's type
    hidden = model.gelu(x, True)  # FlexFlow's gelu(input, inplace, name)
    model.softmax(hidden)
    with pytest.raises(
        NotOfferedError, match="inline_map of 'element_unary_1:0': only the model's inputs"
    ):
        hidden.inline_map(model, None)  # refused where get_array would be, not later


def test_a_hand_written_loops_batches_are_checked_as_they_are_set():
    model, x = _mlp()
    other, y = _mlp()
    with pytest.raises(ShapeError, match=r"input 'input_1' takes samples of shape \(6,\)"):
        x.set_tensor(model, np.zeros((4, 5), np.float32))
    with pytest.raises(
        ShapeError, match=r"a batch holds 4 samples .*, got an array of shape \(8, 6\)"
    ):
        x.set_tensor(model, np.zeros((8, 6), np.float32))
    with pytest.raises(
        FlexFlowError,
        match=r"tensor \(4, 6\) belongs to another FFModel; pass the FFModel that created it",
    ):
        y.set_tensor(model, np.zeros((4, 6), np.float32))
    with pytest.raises(ShapeError, match=r"input 'input_1' takes numbers \(FLOAT32\), got <U1"):
        x.set_tensor(model, np.full((4, 6), "a"))  # a ValueError inside the feed before
    x.set_tensor(model, np.ones((4, 6), np.float32))
    assert x.get_array(model).sum() == 24.0  # an input's batch reads back
    with pytest.raises(ValueError, match="read-only"):
        x.get_array(model)[:] = 2.0  # FlexFlow would write the tensor: not lost silently
    copied = x.get_tensor(model)
    copied *= 2  # FlexFlow's get_tensor fills a new array: the script's own
    assert x.get_array(model).sum() == 24.0
    with pytest.raises(
        ShapeError, match=r"set_tensor of the labels: a batch holds 4 samples .* shape \(3, 1\)"
    ):
        model.label_tensor.set_tensor(model, np.zeros((3, 1), np.int32))
    loader = model.create_data_loader(model.label_tensor, np.zeros((6, 1), np.int32))
    loader.next_batch(model)
    with pytest.raises(FlexFlowError, match="loader of label_tensor has given every full batch"):
        loader.next_batch(model)  # 2 samples left: no full batch
    with pytest.raises(GraphError, match="call FFModel.compile"):
        model.forward()  # every input has a batch: it wants compile


def test_gather_takes_flexflows_arguments_and_names_the_layer_in_its_errors():
    """FlexFlow's demo_gather.py: a (bs, 16, 5) tensor gathered along dim 1 by (bs, 6, 5)."""
    model = FFModel(FlexFlowConfig(batch_size=4))
    x = model.create_tensor([4, 16, 5], DataType.DT_FLOAT)
    index = model.create_tensor([4, 6, 5], DataType.DT_INT32)
    x0 = model.dense(x, 5, ActiMode.AC_MODE_NONE, False)
    out = model.gather(input=x0, index=index, dim=1, name="g")
    assert out.shape == (4, 6, 5) and out.dtype == DataType.DT_FLOAT
    assert repr(model.get_layer_by_name("g")) == "Layer(1, 'g', gather)"
    layers = len(model.get_layers())
    with pytest.raises(ShapeError, match=r"gather 'bad': cannot gather along dim 0, the sample"):
        model.gather(x0, index, 0, name="bad")
    with pytest.raises(ShapeError, match=r"gather 'bad': index must match the input on every "
                       r"dim but dim 2, got input \(4, 16, 5\) and index \(4, 6, 5\)"):  # fmt: skip
        model.gather(x0, index, 2, name="bad")
    assert len(model.get_layers()) == layers  # a refused call adds nothing


def test_attach_numpy_array_sets_the_batch_and_holds_the_array_until_detached():
    """FlexFlow's demo_gather.py attaches its inputs and labels: the batch is set from the
    array, which stays read-only while attached (FlexFlow's tensor would see a later write;
    here it would be lost, so it raises)."""
    model = FFModel(FlexFlowConfig(batch_size=4))
    x = model.create_tensor([4, 6], DataType.DT_FLOAT)
    model.dense(x, 3)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    x.attach_numpy_array(model, model.config, data)
    np.testing.assert_array_equal(x.get_array(model, model.config), data)
    with pytest.raises(ValueError, match="read-only"):
        data[0, 0] = 5.0
    x.detach_numpy_array(model.config)
    data[0, 0] = 5.0  # writable again; the batch set stays as attached
    assert x.get_array(model, model.config)[0, 0] == 0.0
    with pytest.raises(ShapeError, match=r"set_tensor of .*: a batch holds 4 samples"):
        x.attach_numpy_array(model, model.config, data[:2])
