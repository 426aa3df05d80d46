"""Train a LeNet-style CNN with batch norm on real handwritten digits.

    python examples/train_lenet.py                     # 10 epochs, 230 steps
    python examples/train_lenet.py --backend cuda      # the same on the GPU kernels
    python examples/train_lenet.py --plot lenet.png    # and a loss curve (matplotlib)

The data is scikit-learn's bundled copy of the UCI "Optical Recognition of
Handwritten Digits" test set (``sklearn.datasets.load_digits``: 1,797 images of
8x8 pixels, values 0..16, ten classes), read from the package with no
download, scaled to [0, 1] and split 80/20 (1,438 / 359 images) by a fixed
permutation (``--seed``). The model is a ``paddle.nn.Layer``:
conv 3x3 -> batch norm -> relu -> max pool 2, twice, then two linear layers;
trained with Momentum under a cosine learning-rate schedule in Paddle's static
graph mode. The test accuracy after each epoch comes from a
``main.clone(for_test=True)`` copy of the forward program (batch norm then
uses its running statistics) and a NumPy argmax.

For comparison, scikit-learn's own example "Recognizing hand-written digits"
(``plot_digits_classification.py``) reports 0.97 accuracy for ``SVC(gamma=0.001)``
trained on the first half of the same images and tested on the second half.

Only Paddle's API is used: with ``import paddle`` in place of
``import refimpl as paddle`` and ``paddle.hapi`` in place of ``refimpl.hapi``
(the progress bar's import) the script runs on PaddlePaddle, where
``--backend cuda`` is ``paddle.set_device("gpu")``. ``--plot`` draws with
``_plot.py`` beside this file.
"""
import argparse
import sys
import time

import numpy as np

import refimpl as paddle
from refimpl.hapi.progressbar import ProgressBar

from _plot import plot_losses  # beside this script

nn = paddle.nn
F = paddle.nn.functional


def load_digits(seed=0, test_fraction=0.2):
    """scikit-learn's 8x8 digits as ``(x_train, y_train, x_test, y_test)``: float32 [N, 1, 8, 8] in
    [0, 1] and int64 [N, 1], split by a permutation drawn from ``seed``."""
    from sklearn.datasets import load_digits as sklearn_digits
    digits = sklearn_digits()
    x = (digits.images / 16.0).astype("float32")[:, None, :, :]
    y = digits.target.astype("int64")[:, None]
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


class LeNet(nn.Layer):
    """Two conv 3x3 + batch norm + relu + max pool 2 stages, then linear, relu, linear."""

    def __init__(self, width=16, hidden=64, classes=10, hw=8):
        super().__init__()
        self.conv1 = nn.Conv2D(1, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2D(width)
        self.conv2 = nn.Conv2D(width, 2 * width, 3, padding=1)
        self.bn2 = nn.BatchNorm2D(2 * width)
        self.fc1 = nn.Linear(2 * width * (hw // 4) ** 2, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), kernel_size=2, stride=2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), kernel_size=2, stride=2)
        x = paddle.flatten(x, start_axis=1)
        return self.fc2(F.relu(self.fc1(x)))


def build(args, steps):
    """(main, startup, test program, loss, logits, lr scheduler) for ``steps`` training steps."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        img = paddle.static.data("img", [None, 1, 8, 8], "float32")
        label = paddle.static.data("label", [None, 1], "int64")
        logits = LeNet(args.width, args.hidden)(img)
        loss = F.cross_entropy(logits, label)
        test = main.clone(for_test=True)  # forward only; batch norm on its running statistics
        lr = paddle.optimizer.lr.CosineAnnealingDecay(args.lr, T_max=steps)
        paddle.optimizer.Momentum(learning_rate=lr, momentum=0.9).minimize(loss)
    return main, startup, test, loss, logits, lr


def accuracy(exe, test, logits, x, y, scope):
    (out,) = exe.run(test, feed={"img": x, "label": y}, fetch_list=[logits], scope=scope)
    return float(np.mean(np.argmax(out, axis=1) == y[:, 0]))


def train(args, out=None):
    """Train and test as the module docstring says; print to ``out`` (default: the current sys.stdout)."""
    out = sys.stdout if out is None else out
    x_train, y_train, x_test, y_test = load_digits(args.seed)
    per_epoch = -(-len(x_train) // args.batch_size)
    steps = args.epochs * per_epoch if not args.max_steps else min(args.max_steps, args.epochs * per_epoch)
    paddle.seed(args.seed)
    main, startup, test, loss, logits, lr = build(args, steps)
    n_params = sum(int(np.prod(p.shape)) for p in main.all_parameters())
    print(f"LeNet on scikit-learn's 8x8 digits: {len(x_train)} train / {len(x_test)} test images, "
          f"batch {args.batch_size}, {steps} steps, Momentum lr {args.lr} (cosine), "
          f"{n_params} parameters", file=out)
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(args.seed)
    bar = ProgressBar(steps, file=out)
    losses, step, t0 = [], 0, time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        first = len(losses)
        for i in range(0, len(order), args.batch_size):
            if step == steps:
                break
            idx = order[i:i + args.batch_size]
            (lv,) = exe.run(main, feed={"img": x_train[idx], "label": y_train[idx]}, fetch_list=[loss],
                            scope=scope)
            losses.append(float(lv))
            step += 1
            lr.step()
            bar.update(step, [("loss", float(np.mean(losses[-10:])))])
        if len(losses) > first:
            acc = accuracy(exe, test, logits, x_test, y_test, scope)
            print(f"epoch {epoch:2d}: train loss {np.mean(losses[first:]):.4f}  test accuracy {acc:.4f}",
                  file=out)
        if step == steps:
            break
    elapsed = time.perf_counter() - t0
    acc = accuracy(exe, test, logits, x_test, y_test, scope)
    print(f"test accuracy {acc:.4f} ({int(round(acc * len(y_test)))}/{len(y_test)}) after {steps} steps "
          f"in {elapsed:.1f} s", file=out)
    if args.plot:
        plot_losses(losses, args.plot, f"LeNet on 8x8 digits, test accuracy {acc:.3f}")
        print(f"wrote {args.plot}", file=out)
    return acc


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10, help="passes over the training images (default 10)")
    p.add_argument("--batch-size", type=int, default=64, help="images per step (default 64)")
    p.add_argument("--lr", type=float, default=0.05, help="initial learning rate (default 0.05)")
    p.add_argument("--width", type=int, default=16, help="channels of the first conv, twice that in the "
                                                         "second (default 16)")
    p.add_argument("--hidden", type=int, default=64, help="width of the hidden linear layer (default 64)")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (default: all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split, the shuffles and the "
                                                       "initial parameters (default 0)")
    p.add_argument("--plot", metavar="PATH", help="write the loss curve to this PNG")
    p.add_argument("--backend", choices=["numpy", "cuda"], default=None,
                   help="kernels to run on (default: $REFIMPL_BACKEND, else numpy)")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.max_steps < 0:
        p.error("--epochs and --batch-size must be >= 1, --max-steps >= 0")
    paddle.enable_static()
    if args.backend:
        paddle.set_backend(args.backend)
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
