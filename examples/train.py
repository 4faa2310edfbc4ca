"""Train a model with a searched (or imported, or data-parallel) strategy on Legate.

    legate examples/train.py --cpus 2 --gpus 0 --model lenet --epochs 2     # a laptop
    legate --launcher mpirun --gpus 4 --nodes 4 examples/train.py --model lenet   # a cluster
    python examples/train.py --model lenet --budget 10                      # LEGATE_CONFIG or all cores

Image models (LeNet, AlexNet, Inception-v3, ResNet-101, or a model file whose one input is an
NCHW image and whose last layer is a softmax over 10 or more classes, (sample, classes)) train
on the handwritten digits that ship with scikit-learn: 1,797 8x8 images, resized to the model's
input, split 80/20 into train and test. Other models (the RNNs, the Transformer) get 4 batches
of synthetic data of their inputs' shapes, which exercises the run and its speed (their
"evaluation" reads the same samples); the script says so. A model whose output is a softmax
over each position of a sequence read from token ids (RNNLM, NMT) learns a copy task: to
predict, per position, the id it read there (per-token sparse cross-entropy), so its accuracy
rises as it trains; any other gets random labels (a softmax last) or random targets for mean
squared error (anything else) and learns nothing meaningful. To train a model on your own data,
call FFModel.compile and fit from a script (README, "Training").

A model file's build(model) is called with the size flags given (--image-size, --hidden-size,
...) as keyword arguments, when its signature takes them.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate before anything starts it)
from flexflow import FFConfig
from flexflow.errors import FlexFlowError, one_line_warnings
from flexflow.figures import picture_file
from flexflow.fileio import check_outputs, output_file
from flexflow.optimizers import AdamOptimizer, SGDOptimizer
from flexflow.relaunch import relaunch_with_launcher_flags
from flexflow.runtime.loss import ends_in_probabilities, loss_kind

SIZE_FLAGS = (
    "image_size",
    "seq_length",
    "vocab_size",
    "hidden_size",
    "embed_size",
    "num_layers",
    "num_heads",
    "ff_size",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Train a zoo model or a model file on this run's Legate processors."
    )
    parser.add_argument("--model", default="lenet", help="a zoo name or a model .py file")
    FFConfig.add_arguments(parser)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="adam")
    parser.add_argument("--momentum", type=float, help="SGD momentum (default 0.9)")
    parser.add_argument("--weight-decay", type=float, default=0.0)
    for flag in SIZE_FLAGS:
        parser.add_argument(
            f"--{flag.replace('_', '-')}", type=int, help="shrink the model (zoo size argument)"
        )
    parser.add_argument(
        "--checkpoint", metavar="FILE", type=output_file, help="save after every epoch (atomic)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from --checkpoint when it exists, under the strategy it trained with "
        "(unless --import-strategy)",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        type=output_file,
        help="write the strategy's simulated iteration (Perfetto)",
    )
    parser.add_argument(
        "--timeline-png",
        metavar="FILE",
        type=picture_file,
        help="draw the strategy's simulated iteration",
    )
    parser.add_argument(
        "--search-png",
        metavar="FILE",
        type=picture_file,
        help="draw the search: each chain's best simulated iteration over time, then the final "
        "descent's (when the strategy was searched)",
    )
    parser.add_argument(
        "--measured-trace",
        metavar="FILE",
        type=output_file,
        help="write the measured timeline of the last epoch's tasks (Perfetto)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="measured task times for the search (measured on this host and written when FILE "
        "does not exist yet)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(learning_rate=None, batch_size=32)  # a laptop-sized default batch
    return parser.parse_args(argv)


def build_model(args: argparse.Namespace, config: FFConfig):
    from flexflow.zoo import ZOO, load_model

    build = ZOO[args.model].build if args.model in ZOO else None
    accepted = set(inspect.signature(build).parameters) if build else set(SIZE_FLAGS)
    sizes = {k: getattr(args, k) for k in SIZE_FLAGS if getattr(args, k) is not None}
    unknown = sorted(set(sizes) - accepted)
    if unknown:
        flags = ", ".join("--" + k.replace("_", "-") for k in unknown)
        raise FlexFlowError(f"model '{args.model}' takes no {flags}.")
    return load_model(args.model, config, **sizes)


def digits(shape: tuple[int, ...], seed: int):
    """scikit-learn's digits as (N, C, H, W) float32, nearest-resized into the middle of an
    HxW frame (as MNIST's 20x20 digits sit in 28x28) and standardized, and int64 labels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    channels, height, width = shape[1:]
    data = load_digits()
    images = data.images.astype(np.float32) / 16.0  # (N, 8, 8)
    scale = max(1, min(height, width) * 6 // 7 // 8)
    images = np.kron(images, np.ones((scale, scale), dtype=np.float32))
    frame = np.zeros((len(images), channels, height, width), dtype=np.float32)
    top, left = (height - images.shape[1]) // 2, (width - images.shape[2]) // 2
    if top < 0 or left < 0:
        raise FlexFlowError(f"the model's {height}x{width} input is smaller than 8x8 digits.")
    frame[:, :, top : top + images.shape[1], left : left + images.shape[2]] = images[:, None]
    x_train, x_test, y_train, y_test = train_test_split(
        frame, data.target.astype(np.int64), test_size=0.2, random_state=seed, stratify=data.target
    )
    mean, std = x_train.mean(), x_train.std()  # standardized with the training set's statistics
    return ((x_train - mean) / std, y_train), ((x_test - mean) / std, y_test)


def reads_digits(graph, image) -> bool:
    """Whether the model can learn the digits: one image input (N, C, H, W) of at least 8x8
    (smaller models train on synthetic data) and a softmax over 10 or more classes (N,
    classes) last."""
    out = graph.ops[-1].sig.outputs[0].shape
    return (
        image is not None
        and len(image.spec.shape) == 4
        and min(image.spec.shape[2:]) >= 8
        and ends_in_probabilities(graph)
        and len(out) == 2
        and out[1] >= 10
    )


def synthetic(graph, batches: int, seed: int):
    """Random inputs of the model's shapes and targets: a copy task for a per-position softmax
    over token ids, else random targets (a smoke run, not a data set). Returns the inputs, the
    target, the loss and whether it is the copy task."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for tensor in graph.input_tensors:
        shape = (batches * tensor.spec.shape[0], *tensor.spec.shape[1:])
        if tensor.spec.dtype.is_float:
            inputs[tensor.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            vocab = graph.token_vocabulary(tensor.id)
            inputs[tensor.name] = rng.integers(0, vocab, shape).astype(np.int32)
    out = graph.ops[-1].sig.outputs[0].shape
    n = batches * out[0]
    softmax = ends_in_probabilities(graph)  # a classifier's labels (else mean squared error)
    if softmax and len(out) == 2:
        return inputs, rng.integers(0, out[1], n), "sparse_categorical_crossentropy", False
    if softmax:  # one prediction per position: label each
        for tensor in graph.input_tensors:
            ids = inputs[tensor.name]
            if not tensor.spec.dtype.is_float and ids.shape[1:] == out[1:-1]:
                return inputs, ids % out[-1], "sparse_categorical_crossentropy", True
        labels = rng.integers(0, out[-1], (n, *out[1:-1]))
        return inputs, labels, "sparse_categorical_crossentropy", False
    target = rng.standard_normal((n, *out[1:])).astype(np.float32)
    return inputs, target, "mean_squared_error", False


def measured_profile(path: str | None, graph, machine, console):
    """--profile: the task times measured on this host (measured now if the file is new or an
    older flexflow measured it; added to it where it holds another model's or batch size's)."""
    if path is None:
        return None
    from flexflow.cost import Profile, StaleProfileError
    from flexflow.profiler import profile_coverage, profile_graph

    held = Profile()
    if Path(path).exists():
        try:
            held = Profile.load(path)
        except StaleProfileError:
            console.print(f"{path} was measured by an older flexflow; measuring it again")
        else:
            have, total = profile_coverage(held, graph, machine)
            if have == total:
                return held
            console.print(  # another model's or batch size's: this one's are added to it
                f"{path} holds {have} of this model's {total} tasks; measuring them"
            )
    with console.status(f"measuring {len(graph.ops)} ops' tasks on this host"):
        profile = held.merged(profile_graph(graph, machine))
    profile.save(path)
    console.print(
        f"measured {len(profile.times)} task times, and {len(profile.native_times)} of ops "
        f"inside whole-model C steps; wrote {path}"
    )
    return profile


def write_simulation(args: argparse.Namespace, graph, machine, plan, profile, loss) -> None:
    """--trace and --timeline-png: the simulated iteration of the strategy being trained."""
    if not (args.trace or args.timeline_png):
        return
    from flexflow.planning import planning_context
    from flexflow.simulator import TaskGraph, full_simulate
    from flexflow.simulator.export import write_trace
    from flexflow.simulator.plot import render_timeline

    # simulated as planned
    context = planning_context(graph, machine, profile, loss, args.steps_per_execution)
    tg = TaskGraph(context, plan.strategy)
    schedule = full_simulate(tg)
    title = f"{args.model} on {machine.name}: {plan.simulated_ms:.3f} ms per iteration (simulated)"
    if args.trace:
        write_trace(args.trace, tg, schedule, title=title)
    if args.timeline_png:
        render_timeline(tg, schedule, args.timeline_png, title=title)


def write_search_picture(args: argparse.Namespace, machine, plan, console) -> None:
    """--search-png: the search that chose the strategy (a note when none ran)."""
    if not args.search_png:
        return
    if plan.search is None:
        console.print(
            f"[yellow]note:[/yellow] no search ran ({plan.source}): {args.search_png} not written."
        )
        return
    from legate.core import get_legate_runtime

    from flexflow.search.plot import render_search

    if get_legate_runtime().node_id != 0:  # each rank searched (seed + rank): rank 0's is drawn
        return

    result = plan.search
    kept = (  # the trials, or the ranks' agreement, chose another than the search's best
        "" if plan.strategy == result.best else f"; trained: another ({plan.simulated_ms:.3f} ms)"
    )
    render_search(
        result,
        args.search_png,
        title=f"{args.model} on {machine.name}: search, {result.best_s * 1e3:.3f} ms simulated, "
        f"{result.speedup_over_dp:.2f}x over data parallelism{kept}",
    )


def resumed_line(path: str, executor, config: FFConfig) -> str:
    """What a run resumed from checkpoint `path` continues from, for its log."""
    line = f"resumed from {path} at iteration {executor.iteration}"
    position = executor.position
    if position is None:  # an older checkpoint: fit places it by iterations of this batch
        return line
    line += f", {position.epochs} epoch(s) done in batches of {position.batch_size}"
    if position.batch_size != config.batch_size:
        line += f"; the next epochs take batches of {config.batch_size}"
    return line


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from flexflow.cli_strategy import strategy_table
    from flexflow.machine import parse_machine
    from flexflow.search.processes import usable_cores

    args = parse_args(argv)
    console = Console(stderr=True, soft_wrap=True)  # one line per message, in logs too
    try:
        if args.learning_rate is None:
            args.learning_rate = 0.001 if args.optimizer == "adam" else 0.01
        if args.momentum is not None and args.optimizer != "sgd":
            raise FlexFlowError(
                f"--momentum is SGD's; this run uses --optimizer {args.optimizer}: drop "
                "--momentum or pass --optimizer sgd."
            )
        if args.resume and not args.checkpoint:
            raise FlexFlowError(
                "--resume continues from the file --checkpoint names; pass --checkpoint FILE."
            )
        outputs = {  # each its own file; the profile is written when it is new
            "--checkpoint": args.checkpoint, "--export-strategy": args.export_strategy,
            "--trace": args.trace, "--timeline-png": args.timeline_png,
            "--search-png": args.search_png, "--measured-trace": args.measured_trace,
            "--profile": args.profile,
        }  # fmt: skip
        if args.search_png and (not args.search_budget or args.import_strategy):
            raise FlexFlowError(
                "--search-png draws the search, and none will run (it needs --budget SECONDS "
                "and no --import-strategy); drop --search-png or search."
            )
        model_file = args.model if args.model.endswith(".py") else None
        reads = {"the model file": model_file, "the --import-strategy file": args.import_strategy}
        rewrites = frozenset({("--export-strategy", "the --import-strategy file")})
        check_outputs(outputs, reads, "--json" if args.json else None, rewrites)
        if args.resume and not Path(args.checkpoint).exists():
            console.print(
                f"[yellow]note:[/yellow] no checkpoint at {args.checkpoint} yet: training "
                "starts afresh (--resume continues once a run has saved it)."
            )
        config = FFConfig.from_args(args)
        model = build_model(args, config)
        graph = model.graph()
        (image,) = graph.input_tensors if len(graph.input_tensors) == 1 else (None,)
        if reads_digits(graph, image):
            (x_train, y_train), (x_test, y_test) = digits(image.spec.shape, config.seed)
            train, test = ({image.name: x_train}, y_train), ({image.name: x_test}, y_test)
            loss, data_name = "sparse_categorical_crossentropy", "scikit-learn digits"
        else:
            inputs, target, loss, copy = synthetic(graph, 4, config.seed)
            train = test = (inputs, target)
            data_name = (
                "synthetic token ids (a copy task: predict each position's id)"
                if copy
                else "synthetic data (nothing to learn; the digits need one image input of at "
                "least 8x8 and a softmax over 10 or more classes)"
            )
        if args.optimizer == "adam":
            optimizer = AdamOptimizer(config.learning_rate, weight_decay=args.weight_decay)
        else:
            momentum = 0.9 if args.momentum is None else args.momentum
            optimizer = SGDOptimizer(
                config.learning_rate, momentum=momentum, weight_decay=args.weight_decay
            )
        machine = parse_machine("local")
        cpus, cores = machine.most_cpus_on_a_node(), usable_cores()
        if cpus > cores:  # allowed (Legate runs them), but slower than any plan expects
            console.print(
                f"[yellow]note:[/yellow] {cpus} CPU processors share this host's {cores} "
                f"core(s): measured times will exceed the simulated ones (legate --cpus {cores})."
            )
        resumed = None
        if args.resume and args.checkpoint and Path(args.checkpoint).exists():
            from flexflow.checkpoint import checkpoint_optimizer, checkpoint_strategy

            if args.import_strategy is None:  # continue under the strategy it trained with
                resumed = checkpoint_strategy(args.checkpoint, graph, machine)
            saved = checkpoint_optimizer(args.checkpoint)
            if saved is not None and saved != optimizer:
                raise FlexFlowError(
                    f"{args.checkpoint} was saved with {saved}, this run would resume with "
                    f"{optimizer}; pass the same --optimizer, --lr, --momentum and "
                    f"--weight-decay to continue it."
                )
        profile = measured_profile(args.profile, graph, machine, console)
        metrics = list(loss_kind(loss).default_metrics)
        plan = model.compile(
            optimizer,
            loss,
            metrics,
            machine=machine,
            console=console,
            record_timeline=bool(args.measured_trace),
            profile=profile,
            resumed_strategy=resumed,
        )
        console.print(
            strategy_table(f"strategy for {args.model} on {machine.name}", graph, plan.strategy)
        )
        if plan.trials:
            from flexflow.planning import trials_table

            console.print(trials_table(plan.trials))
        console.print(f"strategy: {plan.describe()}")
        write_simulation(args, graph, machine, plan, profile, loss)
        write_search_picture(args, machine, plan, console)
        if args.resume and args.checkpoint and Path(args.checkpoint).exists():
            model.executor.load_checkpoint(args.checkpoint)
            console.print(resumed_line(args.checkpoint, model.executor, config))
        console.print(
            f"training {args.model} on {data_name}: {len(train[1]):,} samples, batch "
            f"{config.batch_size}, {type(optimizer).__name__}, lr {config.learning_rate:g}"
        )
        console.print(f"CPU kernels: {model.executor.describe_kernels()}")

        def on_epoch(metrics) -> None:
            console.print(f"epoch {metrics.epoch + 1}: {metrics.describe()}")
            if model.executor.timeline is not None and metrics.epoch + 1 < config.epochs:
                model.executor.timeline.clear()  # the trace keeps the last epoch
                model.executor.step_ops_timeline.clear()

        history = model.fit(
            *train,
            epochs=config.epochs,
            checkpoint=args.checkpoint,
            on_epoch=on_epoch,
            # a resumed run's epochs done, else 0 (an older checkpoint: by its iterations)
            initial_epoch=model.executor.epochs_done_in(len(train[1]) // config.batch_size),
        )
        if args.measured_trace:
            from flexflow.runtime.trace import write_measured_trace

            title = f"{args.model} on {machine.name}: measured, last epoch"
            executor = model.executor
            write_measured_trace(
                args.measured_trace, graph, executor.timeline, title,
                executor.step_ops_timeline, executor.strategy, executor.machine,
            )  # fmt: skip
        result = model.eval(*test)
        per_launch = model.executor.steps_per_launch
        model.executor.close()
    except FlexFlowError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    except OSError as exc:  # a file it reads or writes (checked paths can still fail: a full disk)
        console.print(f"[red]error:[/red] {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
        return 2
    except KeyboardInterrupt:  # Ctrl-C (FFModel.compile gives it back to Python)
        saved = ""
        if args.checkpoint and Path(args.checkpoint).exists():
            saved = f"; {args.checkpoint} holds the last whole epoch (--resume continues it)"
        console.print(f"interrupted{saved}.")
        return 130
    # synthetic data has no test split: the evaluation reads the training samples
    console.print(f"{'test' if test is not train else 'evaluation on the training samples'}: "
                  f"{result.describe()}")  # fmt: skip
    measured_ms = None
    if history:
        last = history[-1]
        iterations = max(1, -(-last.samples // config.batch_size))  # a last batch padded
        measured_ms = 1e3 * last.seconds / iterations
        console.print(
            f"throughput (last epoch): {last.samples_per_s:,.1f} samples/s, "
            f"{measured_ms:.3f} ms per iteration (simulated: {plan.simulated_ms:.3f} ms)"
        )
    if args.json:
        report = {
            "model": args.model,
            "machine": machine.name,
            "strategy": plan.source,
            "trials": [  # the close candidates timed after a search, if any
                {"label": c.label, "simulated_ms": c.simulated_ms, "measured_ms": c.measured_ms}
                for c in plan.trials
            ],
            "simulated_ms": plan.simulated_ms,
            "measured_ms": measured_ms,  # per iteration in the last epoch, data feeding included
            "steps_per_launch": per_launch,  # training steps per Legate launch
            "epochs": [
                {
                    "epoch": m.epoch,
                    "loss": m.loss,
                    "accuracy": m.accuracy,
                    "samples_per_s": m.samples_per_s,
                }
                for m in history
            ],
            "test_loss": result.loss,
            "test_accuracy": result.accuracy,
        }
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    try:  # `legate train.py --cpus 2 ...`: the launcher's flags go before the script
        arguments = relaunch_with_launcher_flags(sys.argv[0], sys.argv[1:])
    except FlexFlowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    with one_line_warnings("train.py"):  # a strategy file for another machine: one line
        status = main(arguments)
    sys.exit(status)
