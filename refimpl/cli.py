"""The ``refimpl`` command line.

``refimpl demo``: build an MLP with the static API, print its program,
train it on synthetic data with a progress bar, and show the loss falling
and what the garbage collector did; ``--model gpt`` does the same for a
character-level GPT on the Shakespeare text shipped with the examples.
``refimpl run PROGRAM.json``: run a ``program/v1`` program (or an oracle
record) with feeds from a ``.npz`` file and print the fetched values.
``refimpl trace [PROGRAM.json]``: run the demo model or a program with the
event trace on; write a Chrome trace and a memory-timeline PNG.
``refimpl schedule NAME --stages P --micro-batches M``: print a pipeline
schedule as a grid with its bubble ratio (``--plot``, ``--trace`` for pictures).
``refimpl version``: the versions of refimpl, the Paddle it mirrors, Python and NumPy.

Paddle has no such tool (its CLI is ``python -m paddle.distributed.launch``);
the subcommands wrap public refimpl APIs. Bad input (a missing file, a
malformed program, a feed that does not fit) ends with exit code 2 and one
line ``refimpl CMD: ErrorType: message`` on stderr, using refimpl's typed
errors (``InvalidArgument``, ``NotFound``, ``PreconditionNotMet`` ...). A
record's entries (``feeds``, ``initial_persistables``, ``loss_name``) are
checked and named like the program's paths (``feeds[0].x.shape``); a file the
OS cannot read, and a tensor larger than memory, end the same way.
"""
import argparse
import json
import os
import re
import sys
from typing import Optional

PADDLE_VERSION = "3.3.1"



def missing_folder(option: str, path: str) -> Optional[str]:
    """The one-line error for an output ``path`` (given as ``option``) whose folder does not exist, else None:
    said before anything runs, instead of a traceback after it."""
    folder = os.path.dirname(os.path.abspath(path))
    if path and not os.path.isdir(folder):
        return f"{option} {path}: the folder {folder} does not exist (create it first)"
    return None


def plain_text(text: str) -> str:
    """``text`` without its reStructuredText literal marks, for ``--help`` (the docstrings feed Sphinx too)."""
    return re.sub(r"``([^`]*)``", r"\1", text)

def _add_demo(sub):
    demo = sub.add_parser("demo", help="train a small MLP (or GPT) and show the program, loss and GC stats",
                          description="Train a small model and show its program, the loss and GC stats: "
                                      "an MLP on synthetic data, or (--model gpt) a character-level GPT "
                                      "on Shakespeare that ends with a sample of what it writes.")
    demo.add_argument("--model", choices=["mlp", "gpt"], default="mlp", help="the model (default mlp)")
    demo.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    demo.add_argument("--batch", type=int, default=None, help="batch size (default 32; gpt: 8)")
    demo.add_argument("--hidden", type=int, default=None, help="hidden width (default 64; gpt: 32)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument("--gc-gb", type=float, default=0.0,
                      help="FLAGS_eager_delete_tensor_gb: <0 no GC, 0 free at once, >0 batch (default 0)")
    demo.add_argument("--quiet-program", action="store_true", help="do not print the program text")
    _add_backend(demo)
    demo.set_defaults(func=_cmd_demo)


def _cmd_demo(args):
    return _guarded("demo", _demo, args)


def _demo(args):
    """The MLP demo, or the GPT one with ``--model gpt``; a size below 1 is an ``InvalidArgument``."""
    from .core.errors import InvalidArgument
    for flag in ("steps", "batch", "hidden"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise InvalidArgument(f"--{flag} must be >= 1, got {value}")
    if args.model == "gpt":
        from .demo import run_gpt_demo
        if args.hidden is not None and args.hidden % 2:
            raise InvalidArgument(f"--hidden must be even with --model gpt (2 attention heads), got {args.hidden}")
        return run_gpt_demo(args.steps, args.batch or 8, args.hidden or 32, args.seed, args.gc_gb,
                            show_program=not args.quiet_program)
    from .demo import run_demo
    return run_demo(args.steps, args.batch or 32, args.hidden or 64, args.seed, args.gc_gb,
                    show_program=not args.quiet_program)


def _program_arguments(p, required):
    p.add_argument("program", metavar="PROGRAM.json", nargs=None if required else "?",
                   help="a program/v1 JSON file, or a record with 'main' (and 'startup', "
                        "'initial_persistables', 'feeds', 'loss_name') such as an oracle file")
    p.add_argument("--feed", metavar="FEED.npz", help="feed arrays, one per data variable (np.savez)")
    p.add_argument("--fetch", metavar="NAME", action="append", default=None,
                   help="variable to fetch (repeat, or comma-separate; default: the record's loss)")
    p.add_argument("--startup", metavar="STARTUP.json", help="a startup program/v1 to run first")
    p.add_argument("--params", metavar="PARAMS.npz", help="persistable values to load before running")
    p.add_argument("--steps", type=int, default=1, help="run the program this many times (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed for the startup program (default 0)")
    p.add_argument("--gc-gb", type=float, default=0.0, help="FLAGS_eager_delete_tensor_gb (default 0)")
    _add_backend(p)


def _add_run(sub):
    p = sub.add_parser("run", help="run a program/v1 JSON program, feeding a .npz and printing fetches",
                       description="Run a program/v1 JSON program: feed from a .npz file, print the "
                                   "fetched values of the last step.")
    _program_arguments(p, required=True)
    p.set_defaults(func=_cmd_run)


def _add_trace(sub):
    p = sub.add_parser("trace", help="run with the event trace on; write a Chrome trace and a memory PNG",
                       description="Run the demo model (no PROGRAM) or a program with the event trace "
                                   "on; write a Chrome-trace JSON (chrome://tracing, Perfetto) and a "
                                   "memory-timeline PNG of the last step.")
    _program_arguments(p, required=False)
    p.add_argument("--json", default="trace.json", metavar="PATH", help="Chrome trace (default trace.json)")
    p.add_argument("--png", default="memory.png", metavar="PATH",
                   help="memory timeline (default memory.png; '' for none)")
    p.add_argument("--table", action="store_true", help="print the memory timeline as a table")
    p.set_defaults(func=_cmd_trace)


def _add_version(sub):
    p = sub.add_parser("version", help="print the versions of refimpl, Paddle (mirrored), Python, NumPy",
                       description="Print the versions of refimpl, the Paddle it mirrors, Python and NumPy.")
    p.set_defaults(func=_cmd_version)


def build_parser():
    parser = argparse.ArgumentParser(prog="refimpl", description=plain_text(__doc__.splitlines()[0]))
    sub = parser.add_subparsers(dest="command", required=True)
    _add_demo(sub)
    _add_run(sub)
    _add_trace(sub)
    from .schedule_cli import add_parser as add_schedule_parser
    add_schedule_parser(sub)
    _add_version(sub)
    return parser


def _add_backend(p):
    p.add_argument("--backend", choices=["numpy", "cuda"], default=None,
                   help="kernels to run on (default: $REFIMPL_BACKEND, else numpy; cuda needs a GPU "
                        "or NUMBA_ENABLE_CUDASIM=1)")


def main(argv=None):
    args = build_parser().parse_args(argv)
    if getattr(args, "backend", None):
        from .core.errors import Unavailable
        from .executor.backend import set_backend
        try:
            set_backend(args.backend)
        except Unavailable as exc:
            print(f"refimpl: {exc}", file=sys.stderr)
            return 2
    return args.func(args)


# --- run / trace ------------------------------------------------------------

def _decode(entry, where):
    """An oracle array ``{dtype, shape, data}`` (``data`` flat, in C order) -> ndarray; ``where`` names it."""
    import numpy as np
    from .core.dtypes import to_numpy_dtype
    from .core.errors import EnforceNotMet, InvalidArgument
    from .framework.program_schema import check_numel, is_int, short
    if not isinstance(entry, dict) or not {"dtype", "shape", "data"} <= set(entry):
        raise InvalidArgument(f"{where}: expected an array {{'dtype', 'shape', 'data'}}, got {short(entry)}")
    shape, data = entry["shape"], entry["data"]
    if not isinstance(shape, list) or not all(is_int(d) and d >= 0 for d in shape):
        raise InvalidArgument(f"{where}.shape: expected a list of ints >= 0, got {short(shape)}")
    check_numel(shape, where, "the array")
    try:
        dtype = to_numpy_dtype(entry["dtype"])
    except EnforceNotMet as e:
        raise InvalidArgument(f"{where}.dtype: {e.args[0]}") from None
    if not isinstance(data, list) or not all(isinstance(x, (int, float)) for x in data):
        raise InvalidArgument(f"{where}.data: expected a flat list of numbers, got {short(data)}")
    if len(data) != int(np.prod(shape)):
        raise InvalidArgument(f"{where}: {len(data)} values do not fill shape {shape}")
    try:
        with np.errstate(all="raise"):
            return np.asarray(data, dtype=dtype).reshape(shape)
    except (OverflowError, FloatingPointError, ValueError) as e:
        raise InvalidArgument(f"{where}.data: the values do not fit {dtype}: {e}") from None


def _read_json(path, what):
    from .core.errors import InvalidArgument, NotFound
    if not os.path.isfile(path):
        raise NotFound(f"{what} {path!r} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, an int of too many digits
        raise InvalidArgument(f"{what} {path!r} is not JSON: {e}") from e
    except RecursionError:
        raise InvalidArgument(f"{what} {path!r}: JSON nested too deeply to read") from None


def _read_npz(path, what, program=None):
    """Arrays of ``path``, every header (and, given ``program``, every shape and dtype) checked before
    any data is read (``static.io.read_npz``)."""
    from .static.io import read_npz
    return read_npz(path, program, what=what)


def _program(doc, what):
    """``Program.from_dict`` with ``what`` (the file and the record key) in front of its error."""
    from .core.errors import EnforceNotMet
    from .framework import Program
    try:
        return Program.from_dict(doc)
    except EnforceNotMet as e:
        raise type(e)(f"{what}: {e.args[0] if e.args else ''}") from None


def _arrays(value, where):
    """A record's ``{name: array entry}`` object -> {name: ndarray}."""
    from .core.errors import InvalidArgument
    from .framework.program_schema import short
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}: expected an object {{name: array}}, got {short(value)}")
    return {k: _decode(v, f"{where}.{k}") for k, v in value.items()}


def load_program_file(path):
    """(main, startup or None, {name: initial value}, default feeds (one per step), default fetch names)."""
    from .core.errors import InvalidArgument
    from .framework.program_schema import short
    doc = _read_json(path, "program")
    if not isinstance(doc, dict):
        raise InvalidArgument(f"program {path!r}: expected a JSON object")
    if "main" not in doc:
        return _program(doc, f"program {path!r}"), None, {}, [{}], []
    startup = _program(doc["startup"], f"program {path!r} startup") if doc.get("startup") else None
    initial = _arrays(doc.get("initial_persistables"), "initial_persistables")
    feeds = doc.get("feeds") or [{}]
    if not isinstance(feeds, list):
        raise InvalidArgument(f"program {path!r} feeds: expected a list of feeds, got {short(feeds)}")
    feeds = [_arrays(f if f is not None else {}, f"feeds[{i}]") for i, f in enumerate(feeds)]
    loss = doc.get("loss_name")
    if loss is not None and not isinstance(loss, str):
        raise InvalidArgument(f"program {path!r} loss_name: expected a variable name, got {short(loss)}")
    return _program(doc["main"], f"program {path!r} main"), startup, initial, feeds, [loss] if loss else []


def _fetch_names(args, default):
    if not args.fetch:
        return default
    return [n.strip() for item in args.fetch for n in item.split(",") if n.strip()]


def _prepare(args):
    """Load the program and its inputs, initialise a scope; (exe, scope, main, feed of step i, fetch).

    A recorded file's feeds are used in turn, one per step (so ``--steps``
    replays the recording); ``--feed`` gives one feed for every step.
    """
    import refimpl as paddle
    from .core.errors import InvalidArgument
    if args.steps < 1:
        raise InvalidArgument(f"--steps must be >= 1, got {args.steps}")
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": args.gc_gb})
    main, startup, initial, feeds, fetch = load_program_file(args.program)
    if args.startup:
        startup = _program(_read_json(args.startup, "startup program"), f"startup program {args.startup!r}")
    if args.params:
        initial.update(_read_npz(args.params, "params", main))
    if args.feed:
        feeds = [_read_npz(args.feed, "feed")]
    exe = paddle.static.Executor()
    scope = paddle.static.Scope()
    if startup is not None:
        paddle.seed(args.seed)
        exe.run(startup, scope=scope)
    for name, value in initial.items():
        scope.var(name).get_tensor().set(value)
    return exe, scope, main, (lambda i: feeds[(i - 1) % len(feeds)]), _fetch_names(args, fetch)


def _train(exe, main, feed_fn, fetch, scope, steps, trace, err):
    """Run ``steps`` times (a progress bar on stderr when > 1); trace the last run."""
    import numpy as np
    from .hapi.progressbar import ProgressBar
    bar = ProgressBar(steps, file=err) if steps > 1 else None
    values = []
    for i in range(1, steps + 1):
        values = exe.run(main, feed=feed_fn(i), fetch_list=fetch, scope=scope,
                         trace=trace if i == steps else None)
        if bar is not None:
            shown = float(np.mean(values[0])) if values and np.size(values[0]) else 0.0
            bar.update(i, [("loss", shown)])
    return values


def _print_values(names, values, out):
    import numpy as np
    for name, v in zip(names, values):
        v = np.asarray(v)
        print(f"{name}: shape {list(v.shape)} dtype {v.dtype}", file=out)
        print(np.array2string(v, precision=6, threshold=64, max_line_width=100), file=out)


def _guarded(command, fn, args):
    """Run a subcommand; a bad input becomes one stderr line and exit code 2.

    Bad input is a typed refimpl error, an ``OSError`` (a file that cannot be
    read) or a ``MemoryError`` (a tensor the machine cannot hold, named by the
    op it happened in). Warnings (NumPy's overflow in a cast ...) are shown
    after a run that succeeds; after a failure only the error line is.
    """
    import warnings
    from .core.errors import EnforceNotMet
    with warnings.catch_warnings(record=True) as caught:  # the filters stay as they are
        try:
            rc = fn(args)
        except EnforceNotMet as e:
            line = f"{e.kind}: {e.args[0] if e.args else ''}"
        except OSError as e:
            line = f"{type(e).__name__}: {e}"
        except MemoryError as e:
            where = [n[len("refimpl: in "):].split(";")[0] for n in getattr(e, "__notes__", ())
                     if n.startswith("refimpl: in ")]
            line = f"ResourceExhausted: {where[0] + ': ' if where else ''}out of memory: {e}"
        else:
            line = None
    if line is not None:
        print(f"refimpl {command}: " + " ".join(line.split()), file=sys.stderr)
        return 2
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return rc


def _cmd_run(args, out=None):
    return _guarded("run", lambda a: _run(a, out or sys.stdout), args)


def _run(args, out):
    exe, scope, main, feed_of, fetch = _prepare(args)
    values = _train(exe, main, feed_of, fetch, scope, args.steps, None, sys.stderr)
    _print_values(fetch, values, out)
    return 0


def _cmd_trace(args, out=None):
    return _guarded("trace", lambda a: _trace(a, out or sys.stdout), args)


def _demo_run(args, trace):
    """The demo MLP: ``args.steps`` training steps on synthetic data, the last traced."""
    import numpy as np
    import refimpl as paddle
    from .demo import build, synthetic
    paddle.seed(args.seed)
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": args.gc_gb})
    main, startup, loss = build(16, 64, 4)
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(args.seed)
    w_true = rng.standard_normal((16, 4)).astype("float32")

    def feed(_):
        x, y = synthetic(rng, 32, 16, 4, w_true)
        return {"x": x, "label": y}
    fetch = _fetch_names(args, [loss.name])
    return exe, _train(exe, main, feed, fetch, scope, args.steps, trace, sys.stderr), fetch


def _trace(args, out):
    from . import viz
    from .executor import Trace
    for option, path in (("--json", args.json), ("--png", args.png)):
        problem = missing_folder(option, path)
        if problem:
            print(f"refimpl trace: {problem}", file=sys.stderr)
            return 2
    trace = Trace()
    if args.program:
        exe, scope, main, feed_of, fetch = _prepare(args)
        values = _train(exe, main, feed_of, fetch, scope, args.steps, trace, sys.stderr)
    else:
        exe, values, fetch = _demo_run(args, trace)
    _print_values(fetch, values, out)
    stats = exe.memory_stats()
    trace.to_chrome(args.json)
    tl = viz.memory_timeline(trace, end=stats["live_bytes"])
    if args.table:
        print(viz.format_timeline(tl), file=out)
    print(f"traced {len(trace.of_kind('op'))} ops, {len(trace.of_kind('alloc'))} allocations, "
          f"{len(trace.of_kind('free'))} GC frees; peak {tl.peak} bytes", file=out)
    print(viz.format_categories(stats), file=out)
    print(f"wrote {args.json}", file=out)
    if args.png:
        viz.memory_png(tl, args.png)
        print(f"wrote {args.png}", file=out)
    return 0


def _cmd_version(args, out=None):
    import numpy as np
    from . import __version__
    out = out or sys.stdout
    print(f"refimpl {__version__} (mirrors PaddlePaddle {PADDLE_VERSION}, static graph, legacy IR)", file=out)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
