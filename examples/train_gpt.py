"""Train a tiny character-level GPT on Shakespeare and print what it writes.

    python examples/train_gpt.py --steps 200           # about two minutes on one CPU core
    python examples/train_gpt.py --backend cuda        # the same on the GPU kernels
    python examples/train_gpt.py --plot gpt.png        # and a loss curve (matplotlib)

The text is ``examples/data/tinyshakespeare.txt`` (95 KB of *Coriolanus*,
public domain; see the README beside it); every character is a token (61 of
them). The first 90% trains, the rest measures a held-out loss. The model is
a ``paddle.nn.Layer`` GPT: token and position embeddings, ``--layers`` pre-norm
blocks of causal self-attention (``paddle.tril`` mask applied with
``paddle.where``) and a GELU MLP, a final LayerNorm and an output layer tied
to the token embedding; trained with AdamW under a linear warm-up into a
cosine decay, in Paddle's static graph mode.

Sampling runs ``main.clone(for_test=True)``, cloned before the optimizer was
added, on a window of ``--seq`` characters: the context so far, right-padded
(the causal mask keeps the padding out of the positions that are read), and
draws the next character from the softmax of the last real position's logits
divided by ``--temperature``.

Only Paddle's API is used: with ``import paddle`` in place of
``import refimpl as paddle`` and ``paddle.hapi`` in place of ``refimpl.hapi``
(the progress bar's import) the script runs on PaddlePaddle, where
``--backend cuda`` is ``paddle.set_device("gpu")``. ``--plot`` draws with
``_plot.py`` beside this file.
"""
import argparse
import math
import os
import sys
import time

import numpy as np

import refimpl as paddle
from refimpl.hapi.progressbar import ProgressBar

from _plot import plot_losses  # beside this script

nn = paddle.nn
F = paddle.nn.functional
TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tinyshakespeare.txt")


class CausalAttention(nn.Layer):
    """Multi-head self-attention where position i sees positions <= i; ``q``, ``k``, ``v`` and the output
    ``o`` are ``dim x dim`` Linears."""

    def __init__(self, dim, heads, seq):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.heads, self.head_size, self.seq = heads, dim // heads, seq

    def _by_head(self, t):  # [N, seq, dim] -> [N, heads, seq, head_size]
        return paddle.transpose(paddle.reshape(t, [0, 0, self.heads, self.head_size]), perm=[0, 2, 1, 3])

    def forward(self, x):
        q, k, v = (self._by_head(proj(x)) for proj in (self.q, self.k, self.v))
        scores = paddle.matmul(q, k, transpose_y=True) * (self.head_size ** -0.5)
        visible = paddle.tril(paddle.ones([self.seq, self.seq], dtype="float32")) > 0.5
        scores = paddle.where(visible, scores, paddle.full_like(scores, -1e9))
        mixed = paddle.matmul(F.softmax(scores, axis=-1), v)
        return self.o(paddle.reshape(paddle.transpose(mixed, perm=[0, 2, 1, 3]), [0, 0, -1]))


class TransformerBlock(nn.Layer):
    """Pre-norm: ``x + attn(ln1(x))``, then that plus ``fc2(gelu(fc1(ln2(.))))`` with GPT-2's tanh GELU."""

    def __init__(self, dim, heads, seq):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(dim), CausalAttention(dim, heads, seq)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate=True))


class TinyGPT(nn.Layer):
    """Token + position embeddings, ``layers`` blocks, a final LayerNorm; the logits are the hidden
    states times the token embedding (the output layer tied to it)."""

    def __init__(self, vocab, seq, dim, heads, layers):
        super().__init__()
        self.seq = seq
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.LayerList([TransformerBlock(dim, heads, seq) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, ids):
        h = self.tok(ids) + self.pos(paddle.arange(self.seq, dtype="int64"))
        for block in self.blocks:
            h = block(h)
        return paddle.matmul(self.ln_f(h), self.tok.weight, transpose_y=True)


def build(args, vocab):
    """(main, startup, test program, loss, logits, lr scheduler)."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        ids = paddle.static.data("ids", [None, args.seq], "int64")
        labels = paddle.static.data("labels", [None, args.seq], "int64")
        logits = TinyGPT(vocab, args.seq, args.dim, args.heads, args.layers)(ids)
        loss = F.cross_entropy(paddle.reshape(logits, [-1, vocab]), paddle.reshape(labels, [-1, 1]))
        test = main.clone(for_test=True)
        warm = max(1, args.steps // 10)
        cosine = paddle.optimizer.lr.CosineAnnealingDecay(args.lr, T_max=max(1, args.steps - warm))
        lr = paddle.optimizer.lr.LinearWarmup(cosine, warmup_steps=warm, start_lr=args.lr / 10, end_lr=args.lr)
        paddle.optimizer.AdamW(learning_rate=lr, weight_decay=0.01).minimize(loss)
    return main, startup, test, loss, logits, lr


def read_text(path=TEXT):
    """(the text, its sorted characters, the text as int64 ids)."""
    with open(path, encoding="ascii") as f:
        text = f.read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return text, chars, np.array([index[c] for c in text], dtype="int64")


def batch(data, rng, size, seq):
    """``size`` random windows: inputs ``data[s:s+seq]``, labels shifted by one."""
    starts = rng.integers(0, len(data) - seq - 1, size)
    x = np.stack([data[s:s + seq] for s in starts])
    return {"ids": x, "labels": np.stack([data[s + 1:s + seq + 1] for s in starts])}


def sample(exe, test, logits, scope, context, n, seq, rng, temperature):
    """``n`` more ids after ``context``, one run of the test program each."""
    out = list(context)
    for _ in range(n):
        window = out[-seq:]
        ids = np.zeros((1, seq), dtype="int64")
        ids[0, :len(window)] = window
        (lg,) = exe.run(test, feed={"ids": ids, "labels": np.zeros_like(ids)}, fetch_list=[logits], scope=scope)
        z = lg[0, len(window) - 1].astype("float64") / temperature
        p = np.exp(z - z.max())
        out.append(int(rng.choice(len(p), p=p / p.sum())))
    return out[len(context):]


def held_out_loss(exe, test, loss, scope, data, args, batches=4):
    rng = np.random.default_rng(args.seed + 1)
    return float(np.mean([exe.run(test, feed=batch(data, rng, args.batch_size, args.seq), fetch_list=[loss],
                                  scope=scope)[0] for _ in range(batches)]))


def train(args, out=None):
    """Train, measure and sample as the module docstring says; print to ``out`` (default: sys.stdout)."""
    out = sys.stdout if out is None else out
    text, chars, data = read_text(args.text)
    split = int(len(data) * 0.9)
    train_data, val_data = data[:split], data[split:]
    paddle.seed(args.seed)
    main, startup, test, loss, logits, lr = build(args, len(chars))
    n_params = sum(int(np.prod(p.shape)) for p in main.all_parameters())
    print(f"GPT on {os.path.basename(args.text)}: {len(text)} characters, vocabulary {len(chars)}; "
          f"{args.layers} layers, dim {args.dim}, {args.heads} heads, context {args.seq}, "
          f"{n_params} parameters; batch {args.batch_size}, {args.steps} steps, AdamW lr {args.lr}", file=out)
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    exe.run(startup, scope=scope)
    print(f"held-out loss before training {held_out_loss(exe, test, loss, scope, val_data, args):.4f} "
          f"(uniform guess: ln {len(chars)} = {math.log(len(chars)):.4f})", file=out)
    rng = np.random.default_rng(args.seed)
    bar = ProgressBar(args.steps, file=out)
    losses, t0 = [], time.perf_counter()
    for step in range(1, args.steps + 1):
        (lv,) = exe.run(main, feed=batch(train_data, rng, args.batch_size, args.seq), fetch_list=[loss],
                        scope=scope)
        losses.append(float(lv))
        lr.step()
        bar.update(step, [("loss", float(np.mean(losses[-10:])))])
    elapsed = time.perf_counter() - t0
    print(f"trained {args.steps} steps in {elapsed:.1f} s; train loss {np.mean(losses[:10]):.4f} (first 10) "
          f"-> {np.mean(losses[-10:]):.4f} (last 10); held-out loss "
          f"{held_out_loss(exe, test, loss, scope, val_data, args):.4f}", file=out)
    index = {c: i for i, c in enumerate(chars)}
    prompt = [index[c] for c in args.prompt if c in index] or [index["\n"]]
    for k in range(args.samples):
        got = sample(exe, test, logits, scope, prompt, args.sample_chars, args.seq, rng, args.temperature)
        print(f"--- sample {k + 1} (temperature {args.temperature}) ---", file=out)
        print("".join(chars[i] for i in prompt + got), file=out)
    if args.plot:
        plot_losses(losses, args.plot, f"char GPT on {os.path.basename(args.text)}",
                    ylabel="cross entropy (nats per character)")
        print(f"wrote {args.plot}", file=out)
    return losses


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    p.add_argument("--batch-size", type=int, default=16, help="windows per step (default 16)")
    p.add_argument("--seq", type=int, default=64, help="context length in characters (default 64)")
    p.add_argument("--dim", type=int, default=64, help="embedding width (default 64)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--samples", type=int, default=2, help="samples to print after training (default 2)")
    p.add_argument("--sample-chars", type=int, default=200, help="characters per sample (default 200)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    p.add_argument("--prompt", default="MENENIUS:\n", help="text the samples start from")
    p.add_argument("--text", default=TEXT, help="an ASCII text file to train on (default: the shipped one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the batches, samples and initial parameters")
    p.add_argument("--plot", metavar="PATH", help="write the loss curve to this PNG")
    p.add_argument("--backend", choices=["numpy", "cuda"], default=None,
                   help="kernels to run on (default: $REFIMPL_BACKEND, else numpy)")
    args = p.parse_args(argv)
    if min(args.steps, args.batch_size, args.seq, args.dim, args.heads, args.layers) < 1 or args.samples < 0:
        p.error("--steps, --batch-size, --seq, --dim, --heads and --layers must be >= 1, --samples >= 0")
    if args.dim % args.heads:
        p.error(f"--dim {args.dim} is not a multiple of --heads {args.heads}")
    if args.temperature <= 0:
        p.error(f"--temperature must be > 0, got {args.temperature}")
    if not os.path.isfile(args.text):
        p.error(f"--text {args.text!r} is not a file")
    with open(args.text, "rb") as f:
        if not f.read().isascii():
            p.error(f"--text {args.text!r} is not ASCII text (every character is a token: give an ASCII file)")
    if os.path.getsize(args.text) < 20 * (args.seq + 1):
        p.error(f"--text {args.text!r} is too short for windows of --seq {args.seq} characters")
    paddle.enable_static()
    if args.backend:
        paddle.set_backend(args.backend)
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
