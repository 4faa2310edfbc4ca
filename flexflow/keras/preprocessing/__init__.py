"""FlexFlow's `flexflow.keras.preprocessing` (text tokenizing, sequence padding for its
Reuters example): refused by name, as the Reuters data set is."""

from flexflow.keras.preprocessing import sequence, text

__all__ = ["sequence", "text"]
