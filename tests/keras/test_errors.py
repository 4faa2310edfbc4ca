"""flexflow.keras refuses what it cannot do with errors naming the layer, the shape and the
fix (no Legate: every check runs before compile starts it)."""

from __future__ import annotations

import pytest

from flexflow.errors import FlexFlowError, GraphError, NotOfferedError, ShapeError
from flexflow.keras import regularizers
from flexflow.keras.callbacks import Callback, VerifyMetrics
from flexflow.keras.datasets import reuters
from flexflow.keras.layers import Add, Conv2D, Dense, Flatten, Input, MaxPooling2D
from flexflow.keras.models import Model, Sequential
from flexflow.keras.models.base import check_callbacks
from flexflow.keras.preprocessing.text import Tokenizer


def mlp() -> Sequential:
    return Sequential([Dense(4, input_shape=(3,)), Dense(2, activation="softmax")])


def test_a_layer_fed_the_wrong_shape_names_itself_the_shape_and_the_fix():
    with pytest.raises(ShapeError, match=r"Conv2D 'c'.*\(None, 10\).*channels-first"):
        Conv2D(4, kernel_size=3, name="c")(Input(shape=(10,)))
    with pytest.raises(ShapeError, match=r"Add 'a' called on \(None, 3\), \(None, 4\)"):
        Add(name="a")([Input(shape=(3,)), Input(shape=(4,))])


def test_a_layer_called_on_another_shape_than_its_input_shape():
    with pytest.raises(ShapeError, match=r"Dense 'd': input_shape=\(5,\).*\(None, 3\)"):
        Dense(2, input_shape=(5,), name="d")(Input(shape=(3,)))


def test_a_sequential_whose_first_layer_lacks_input_shape():
    with pytest.raises(FlexFlowError, match=r"first layer, Flatten 'f', has no input_shape"):
        Sequential().add(Flatten(name="f"))


def test_unknown_activation_names_the_choices():
    with pytest.raises(FlexFlowError, match=r"Dense 'd': unknown activation 'relux'.*relu"):
        Dense(2, activation="relux", name="d")


@pytest.mark.parametrize(
    ("compile_args", "message"),
    [
        ({"optimizer": "adagrad", "loss": "mse"}, "unknown optimizer 'adagrad'"),
        ({"optimizer": "sgd", "loss": "hinge"}, "unknown loss 'hinge'"),
        ({"optimizer": "sgd", "loss": "identity", "metrics": ["accuracy"]},
         "'accuracy' does not apply to the identity loss"),
        ({"optimizer": "sgd"}, "name a loss"),
        ({"optimizer": "sgd", "loss": "mse", "metrics": ["mean_absolute_error"]},
         "MeanAbsoluteError is not offered"),
        ({"optimizer": "sgd", "loss": "mse", "metrics": ["auc"]}, "unknown metric 'auc'"),
        ({"optimizer": "sgd", "loss": "mse", "loss_weights": [1.0]}, "loss_weights"),
    ],
)  # fmt: skip
def test_compile_refuses_what_it_does_not_know_before_starting_legate(compile_args, message):
    with pytest.raises(FlexFlowError, match=message):
        mlp().compile(**compile_args)


@pytest.mark.parametrize("call", ["fit", "evaluate", "predict"])
def test_training_before_compile_says_to_compile(call):
    with pytest.raises(FlexFlowError, match=rf"{call}: the model is not compiled"):
        getattr(mlp(), call)([[1.0, 2.0, 3.0]])


def test_regularizers_other_than_a_dense_kernels_l2_are_refused_naming_the_layer():
    """As FlexFlow's: only a Dense layer's kernel_regularizer, an L2 one, is taken."""
    Dense(2, kernel_regularizer=regularizers.L2(0.01))  # taken
    with pytest.raises(NotOfferedError, match=r"Dense 'd': kernel_regularizer L1\(l1=0.01\) "
                       r"is an L1 penalty.*only L2.*L2\(0.001\)"):  # fmt: skip
        Dense(2, kernel_regularizer=regularizers.L1(0.01), name="d")
    with pytest.raises(NotOfferedError, match="Dense 'd': kernel_regularizer L1L2"):
        Dense(2, kernel_regularizer=regularizers.L1L2(l1=0.01, l2=0.01), name="d")
    for keyword in ("bias_regularizer", "activity_regularizer"):
        with pytest.raises(NotOfferedError, match=rf"Dense 'd': {keyword} not offered.*only a "
                           "Dense layer's kernel_regularizer"):  # fmt: skip
            Dense(2, name="d", **{keyword: regularizers.L2(0.01)})
    with pytest.raises(NotOfferedError, match=r"Conv2D 'c': kernel_regularizer not offered"):
        Conv2D(2, kernel_size=3, kernel_regularizer=regularizers.L2(0.01), name="c")
    for bad in (-0.1, float("nan"), float("inf"), "0.1"):
        with pytest.raises(FlexFlowError, match=r"Dense 'd': kernel_regularizer's lambda must "
                           r"be a number >= 0 that float32 holds"):  # fmt: skip
            Dense(2, kernel_regularizer=regularizers.L2(bad), name="d")
    with pytest.raises(FlexFlowError, match=r"Dense 'd': kernel_regularizer must be a "
                       r"regularizer.*got 'l2'"):  # fmt: skip
        Dense(2, kernel_regularizer="l2", name="d")


def test_what_flexflow_keras_does_not_offer_is_refused_by_name():
    with pytest.raises(NotOfferedError, match="channels_last"):
        Conv2D(2, kernel_size=3, data_format="channels_last")
    with pytest.raises(NotOfferedError, match="reuters"):
        reuters.load_data()
    with pytest.raises(NotOfferedError, match="Tokenizer is not offered"):
        Tokenizer(num_words=1000)
    with pytest.raises(NotOfferedError, match="float16"):
        Input(shape=(3,), dtype="float16")
    with pytest.raises(NotOfferedError, match="pop"):
        mlp().pop()


def test_same_padding_that_cannot_be_split_evenly_is_refused_with_why():
    with pytest.raises(ShapeError, match=r"padding='same'.*odd one at the bottom or right"):
        MaxPooling2D(pool_size=2, strides=1, padding="same")(Input(shape=(1, 4, 4)))


def test_a_model_must_read_each_input_and_take_its_inputs_from_input():
    a, b = Input(shape=(3,), name="a_in"), Input(shape=(3,), name="b_in")
    with pytest.raises(GraphError, match="'b_in' are not read"):
        Model([a, b], Dense(2)(a))
    with pytest.raises(GraphError, match="depends on input 'b_in'"):
        Model(a, Add()([a, b]))


def test_a_layer_called_twice_in_one_model_is_refused():
    x = Input(shape=(3,))
    shared = Dense(3, name="twice")
    with pytest.raises(GraphError, match="'twice' is called twice.*make a second layer"):
        Model(x, shared(shared(x)))


def test_callbacks_with_batch_hooks_are_refused_since_an_epoch_is_one_call():
    class PerBatch(Callback):
        def on_batch_end(self, batch, logs=None):
            pass

    with pytest.raises(NotOfferedError, match="PerBatch.on_batch_end would not be called"):
        check_callbacks([PerBatch()])
    with pytest.raises(FlexFlowError, match="a percentage"):
        VerifyMetrics("high")


def test_an_embedding_initializer_object_is_refused_not_ignored():
    from flexflow.keras.initializers import RandomNormal
    from flexflow.keras.layers import Embedding

    with pytest.raises(NotOfferedError, match=r"Embedding 'e': embeddings_initializer Random"):
        Embedding(10, 4, embeddings_initializer=RandomNormal(), name="e")


def test_a_failed_first_add_leaves_the_sequential_empty():
    model = Sequential()
    with pytest.raises(ShapeError):
        model.add(Conv2D(4, input_shape=(10,), kernel_size=3, name="c"))
    model.add(Dense(3, input_shape=(5,), name="d"))  # a corrected first layer is taken
    assert model.output.shape == (3,)


def test_metrics_given_as_a_string_are_refused_as_one():
    with pytest.raises(FlexFlowError, match=r"compile: metrics is a list, e\.g\. metrics="):
        mlp().compile("sgd", "sparse_categorical_crossentropy", metrics="accuracy")
