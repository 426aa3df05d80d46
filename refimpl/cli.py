"""The ``refimpl`` command line.

``refimpl demo``: build an MLP with the static API, print its program,
train it on synthetic data with a progress bar, and show the loss falling
and what the garbage collector did.
``refimpl schedule NAME --stages P --micro-batches M``: print a pipeline
schedule as a grid with its bubble ratio (``--plot``, ``--trace`` for pictures).
"""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="refimpl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train a small MLP and show the program, loss and GC stats")
    demo.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    demo.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    demo.add_argument("--hidden", type=int, default=64, help="hidden width (default 64)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument("--gc-gb", type=float, default=0.0,
                      help="FLAGS_eager_delete_tensor_gb: <0 no GC, 0 free at once, >0 batch (default 0)")
    demo.add_argument("--quiet-program", action="store_true", help="do not print the program text")
    from .schedule_cli import add_parser as add_schedule_parser
    add_schedule_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo
        return run_demo(args.steps, args.batch, args.hidden, args.seed, args.gc_gb,
                        show_program=not args.quiet_program)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
