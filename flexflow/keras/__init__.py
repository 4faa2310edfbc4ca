"""FlexFlow's `flexflow.keras`, as far as its Python examples need it: the data sets they
load (`flexflow.keras.datasets`: mnist, cifar10). FlexFlow's Keras-style model API itself
(`flexflow.keras.models`, `layers`, ...) is not offered: models are built with `FFModel`'s
layer API here."""
