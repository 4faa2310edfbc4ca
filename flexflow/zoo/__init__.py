"""The benchmark model zoo (paper §8.1, Table 2) plus LeNet and a Transformer; user model files.

Each model lives in its own module with `build(model, **sizes)`, which adds its layers to an
`FFModel` at `model.config.batch_size`; the keyword arguments (image_size, seq_length,
vocab_size, ...) default to the paper's sizes and let a small machine shrink a model.
`load_model` turns a zoo name or a path to a user's `.py` file defining
`build(model: FFModel) -> None` into a built `FFModel`.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import flexflow
from flexflow.config import FFConfig
from flexflow.errors import FlexFlowError, ModelError
from flexflow.model import FFModel

from . import alexnet, inception_v3, lenet, nmt, resnet101, rnnlm, rnntc, transformer


@dataclass(frozen=True, slots=True)
class ZooModel:
    """A zoo entry: `build(model, **sizes)` adds the layers; `batch_size` is the paper's (§8.1)."""

    name: str
    build: Callable[..., None]
    batch_size: int
    description: str


_ENTRIES = (
    ZooModel("alexnet", alexnet.build, 256, "AlexNet (torchvision, one-weird-trick), 224x224"),
    ZooModel("inception_v3", inception_v3.build, 64, "Inception-v3 without aux head, 299x299"),
    ZooModel("resnet101", resnet101.build, 64, "ResNet-101 (torchvision), 224x224"),
    ZooModel("rnntc", rnntc.build, 64, "RNNTC: 4-layer LSTM text classifier, 40 steps"),
    ZooModel("rnnlm", rnnlm.build, 64, "RNNLM: 2-layer LSTM language model, 40 steps"),
    ZooModel("nmt", nmt.build, 64, "NMT: 2+2-layer LSTM encoder-decoder with attention"),
    ZooModel("lenet", lenet.build, 64, "LeNet for MNIST 28x28x1"),
    ZooModel("transformer", transformer.build, 64, "BERT-base-like encoder, length 128"),
)

ZOO: dict[str, ZooModel] = {entry.name: entry for entry in _ENTRIES}
"""Zoo models by name. AlexNet uses the paper's batch size 256, every other model 64."""


def load_model(name_or_path: str, config: FFConfig | None = None, **sizes: Any) -> FFModel:
    """Build a zoo model by name, or the model of a user's `.py` file defining `build(model)`.

    A zoo model gets its zoo batch size unless `config` is given; a model file gets `config`
    or the default `FFConfig()`. `sizes` are passed to `build` (e.g. `image_size=64`).
    Raises `ModelError` for an unknown name, a missing file, a file without a callable
    `build`, a file that fails with an error other than a `FlexFlowError` (which passes
    through unchanged, e.g. the `ShapeError` of a bad layer), or one that adds no layer.
    """
    entry = ZOO.get(name_or_path)
    if entry is not None:
        model = FFModel(config or FFConfig(batch_size=entry.batch_size))
        model.name = name_or_path
        entry.build(model, **sizes)
        return model
    path = Path(name_or_path)
    if path.is_dir():
        raise ModelError(
            f"model '{path}' is a directory; pass a zoo model ({', '.join(ZOO)}) or the path of "
            "a .py file that defines `def build(model: FFModel) -> None`."
        )
    if path.suffix != ".py" and path.is_file():
        raise ModelError(
            f"model file '{path}' is not a .py file; pass a Python file that defines "
            "`def build(model: FFModel) -> None`."
        )
    if path.suffix != ".py":
        raise ModelError(
            f"unknown model '{name_or_path}'; choose one of the zoo models "
            f"({', '.join(ZOO)}) or pass the path of a .py file that defines "
            "`def build(model: FFModel) -> None`."
        )
    if not path.is_file():
        raise ModelError(
            f"model file '{path}' does not exist; pass the path of an existing .py file that "
            f"defines `def build(model: FFModel) -> None`, or a zoo model ({', '.join(ZOO)})."
        )
    module = _import_file(path)
    build = getattr(module, "build", None)
    if not callable(build):
        raise ModelError(
            f"model file '{path}' has no callable `build`; define "
            "`def build(model: FFModel) -> None` that adds the model's layers."
        )
    if inspect.iscoroutinefunction(build) or inspect.isgeneratorfunction(build):
        kind = "a coroutine (async def)" if inspect.iscoroutinefunction(build) else "a generator"
        raise ModelError(
            f"model file '{path}': build is {kind} function, which adds no layers when called; "
            "define it with a plain `def build(model: FFModel) -> None`."
        )
    params = inspect.signature(build).parameters
    required = [  # after the model, none may lack a default: the size flags are optional
        name
        for name, p in list(params.items())[1:]
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and name not in sizes
    ]
    if required:
        raise ModelError(
            f"model file '{path}': build requires {', '.join(required)} without a default; give "
            f"it one (`def build(model, {required[0]}=...)`): a size is passed only where a "
            "command has its flag and it is given (examples/train.py's --image-size, "
            "--hidden-size, ...)."
        )
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(sizes) - set(params))
        if unknown:
            flags = ", ".join("--" + k.replace("_", "-") for k in unknown)
            raise ModelError(
                f"model file '{path}': build takes no {', '.join(unknown)} (given as {flags}); "
                f"leave {flags} out or add the parameter, e.g. "
                f"`def build(model, {unknown[0]}=...)`."
            )
    model = _model_class(module)(config or FFConfig())
    model.name = path.stem
    try:
        build(model, **sizes)
    except FlexFlowError:
        raise
    except SystemExit as exc:  # a script's exit() in build: not a model, and not success
        raise ModelError(
            f"model file '{path}'{_line_in(path, exc)}: build(model) called {_exit_call(exc)} "
            "instead of returning; build adds the model's layers and returns (a script's own "
            'code goes under `if __name__ == "__main__":`).'
        ) from None
    except Exception as exc:
        raise ModelError(
            f"model file '{path}'{_line_in(path, exc)}: build(model) raised "
            f"{type(exc).__name__}: {exc}; fix the model file (layers are added with the "
            "FFModel methods, e.g. model.dense)."
        ) from exc
    if model.num_ops == 0:  # nothing to parallelize, simulate or train
        raise ModelError(
            f"model file '{path}': build(model) added no layers; add the model's layers with "
            "the FFModel methods (x = model.create_tensor(...); model.dense(x, 10), ...)."
        )
    return model


def _exit_call(exc: SystemExit) -> str:
    """The exit call that raised `exc`, as the file wrote it: exit() or exit(3)."""
    return f"exit({'' if exc.code is None else repr(exc.code)})"


def _line_in(path: Path, exc: BaseException) -> str:
    """', line N' of the last frame of `exc`'s traceback in `path` ('' if none): where the
    user's file failed, which the one-line error would otherwise hide."""
    inside = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if Path(frame.filename).resolve() == path.resolve()
    ]
    return f", line {inside[-1].lineno}" if inside else ""


def _model_class(module: ModuleType) -> type[FFModel]:
    """FlexFlow's `FFModel` (`flexflow.core`) for a model file that imports FlexFlow's names
    (`from flexflow.core import *`, `import flexflow.core as ff`, or only some of the names
    FlexFlow's API has and ours does not, such as `GlorotUniformInitializer`): its layer calls
    follow FlexFlow's conventions (initializers by keyword, applied at compile; groups=True as
    1), which ours refuses as arguments it does not implement. Ours for any other file,
    including one importing only names both share (`ActiMode`)."""
    core = sys.modules.get("flexflow.core")
    if core is None:  # the file did not import it
        return FFModel
    flexflow_only = {
        id(value)
        for name in core.__all__
        if (value := getattr(core, name)) is not getattr(flexflow, name, None)
    }
    names = vars(module).values()
    return core.FFModel if any(v is core or id(v) in flexflow_only for v in names) else FFModel


def _import_file(path: Path) -> ModuleType:
    """Execute a user's model file as a fresh module; its own errors become `ModelError`."""
    spec = importlib.util.spec_from_file_location(f"flexflow_user_model_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ModelError(f"model file '{path}' cannot be imported; pass a Python (.py) file.")
    module = importlib.util.module_from_spec(spec)
    # registered while it runs, as `import` does: dataclasses in the file look their module up
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except FlexFlowError:
        del sys.modules[spec.name]
        raise
    except SystemExit as exc:
        del sys.modules[spec.name]
        raise ModelError(
            f"model file '{path}'{_line_in(path, exc)} called {_exit_call(exc)} while it was "
            "imported; a model file defines build(model) (a script's own code goes under "
            '`if __name__ == "__main__":`).'
        ) from None
    except Exception as exc:
        del sys.modules[spec.name]
        raise ModelError(
            f"model file '{path}' failed to import: {type(exc).__name__}: {exc}; fix the file "
            f"so that `python {path}` runs."
        ) from exc
    return module


__all__ = ["ZOO", "ZooModel", "load_model"]
