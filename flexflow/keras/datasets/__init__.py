"""The data sets FlexFlow's examples load (`from flexflow.keras.datasets import mnist`), in
the arrays and layouts FlexFlow's own loaders return, read from Keras' cache directory
(`$KERAS_HOME/datasets`, else `~/.keras/datasets`) and downloaded there on first use."""

from flexflow.keras.datasets import cifar10, mnist, reuters

__all__ = ["cifar10", "mnist", "reuters"]
