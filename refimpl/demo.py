"""The ``refimpl demo`` walk-through: an MLP (or a tiny GPT), start to finish.

It uses only the public API, the same way a user script would: build the
program under ``program_guard``, print it, run the startup program, then
train with ``Executor.run`` while a progress bar shows the loss. At the end
it prints the loss curve in a few numbers and what eager deletion did
(tensors freed per step, live and peak bytes).

``run_demo`` trains the MLP on synthetic data. ``run_gpt_demo`` trains a
character-level GPT (``paddle.nn.Layer`` blocks of causal self-attention, the
model of ``examples/train_gpt.py`` in a smaller size) on the Shakespeare text
that ships with the examples (``examples/data/tinyshakespeare.txt`` of a
source checkout; an installed package, which has no ``examples/``, falls back
to the play's first speeches kept here), prints a summary of its program
instead of the whole text, and ends with a sample of what it writes.
"""
import os
import sys
import textwrap
import time
from collections import Counter

import numpy as np

import refimpl as paddle
from refimpl.executor import Trace
from refimpl.framework.op_role import OpRole
from refimpl.hapi.progressbar import ProgressBar


def build(din, hidden, classes):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        with paddle.utils.unique_name.guard():
            x = paddle.static.data("x", [None, din], "float32")
            label = paddle.static.data("label", [None, 1], "int64")
            h = paddle.static.nn.fc(x, hidden, activation="relu")
            h = paddle.static.nn.fc(h, hidden, activation="relu")
            logits = paddle.static.nn.fc(h, classes)
            loss = paddle.nn.functional.cross_entropy(logits, label)
            paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
    return main, startup, loss


def synthetic(rng, batch, din, classes, w_true):
    x = rng.standard_normal((batch, din)).astype("float32")
    label = np.argmax(x @ w_true, axis=1).astype("int64")[:, None]
    return x, label


def run_demo(steps=200, batch=32, hidden=64, seed=0, gc_gb=0.0, show_program=True, out=None):
    out = sys.stdout if out is None else out
    din, classes = 16, 4
    paddle.seed(seed)
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
    main, startup, loss = build(din, hidden, classes)
    if show_program:
        print("=== the main program (Paddle-style text) ===", file=out)
        print(main, file=out)
    print(f"\n=== training: {steps} steps, batch {batch}, MLP {din}-{hidden}-{hidden}-{classes}, "
          f"Momentum, FLAGS_eager_delete_tensor_gb={gc_gb} ===", file=out)
    exe = paddle.static.Executor()
    scope = paddle.static.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal((din, classes)).astype("float32")

    def feed():
        x, y = synthetic(rng, batch, din, classes, w_true)
        return {"x": x, "label": y}

    _train(exe, main, loss, scope, steps, feed, out)
    return 0


def _train(exe, main, loss, scope, steps, feed, out):
    """Run ``steps`` steps on ``feed()``, with a progress bar, then print the losses and the GC report."""
    losses, t0 = [], time.perf_counter()
    bar = ProgressBar(steps, file=out)
    for i in range(1, steps + 1):
        trace = Trace() if i == steps else None
        (lv,) = exe.run(main, feed=feed(), fetch_list=[loss], scope=scope, trace=trace)
        losses.append(float(lv))
        bar.update(i, [("loss", float(np.mean(losses[-10:])))])
    elapsed = time.perf_counter() - t0
    print(file=out)
    print(_loss_marks(losses), file=out)
    print(_gc_report(exe, trace, steps, elapsed), file=out)


# ---- the GPT demo --------------------------------------------------------------------------------
TEXT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "data",
                    "tinyshakespeare.txt")
FALLBACK_TEXT = """First Citizen:
Before we proceed any further, hear me speak.

All:
Speak, speak.

First Citizen:
You are all resolved rather to die than to famish?

All:
Resolved. resolved.

First Citizen:
First, you know Caius Marcius is chief enemy to the people.

All:
We know't, we know't.

First Citizen:
Let us kill him, and we'll have corn at our own price.
Is't a verdict?

All:
No more talking on't; let it be done: away, away!
"""


def read_text(path=TEXT):
    """(where it came from, the text, its sorted characters, the text as int64 ids)."""
    if os.path.isfile(path):
        with open(path, encoding="ascii") as f:
            source, text = os.path.basename(path), f.read()
    else:
        source, text = "the opening of Coriolanus", FALLBACK_TEXT
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return source, text, chars, np.array([index[c] for c in text], dtype="int64")


# ---- the GPT: module-level layers, so benchmarks/models.py can build one block of it ----------------
class CausalAttention(paddle.nn.Layer):
    """Multi-head self-attention where position i sees positions <= i; ``q``, ``k``, ``v`` and the output
    ``o`` are ``dim x dim`` Linears."""

    def __init__(self, dim, heads, seq):
        super().__init__()
        self.q, self.k, self.v, self.o = (paddle.nn.Linear(dim, dim) for _ in range(4))
        self.heads, self.head_size, self.seq = heads, dim // heads, seq

    def _by_head(self, t):  # [N, seq, dim] -> [N, heads, seq, head_size]
        return paddle.transpose(paddle.reshape(t, [0, 0, self.heads, self.head_size]), perm=[0, 2, 1, 3])

    def forward(self, x):
        q, k, v = (self._by_head(proj(x)) for proj in (self.q, self.k, self.v))
        scores = paddle.matmul(q, k, transpose_y=True) * (self.head_size ** -0.5)
        visible = paddle.tril(paddle.ones([self.seq, self.seq], dtype="float32")) > 0.5
        scores = paddle.where(visible, scores, paddle.full_like(scores, -1e9))
        mixed = paddle.matmul(paddle.nn.functional.softmax(scores, axis=-1), v)
        return self.o(paddle.reshape(paddle.transpose(mixed, perm=[0, 2, 1, 3]), [0, 0, -1]))


class TransformerBlock(paddle.nn.Layer):
    """Pre-norm: ``x + attn(ln1(x))``, then that plus ``fc2(gelu(fc1(ln2(.))))`` (fc1 widens 4x).
    ``gelu_approximate``: the tanh form (GPT-2's) or the exact erf form (``nn.GELU``'s default)."""

    def __init__(self, dim, heads, seq, gelu_approximate=True):
        super().__init__()
        self.ln1, self.attn = paddle.nn.LayerNorm(dim), CausalAttention(dim, heads, seq)
        self.ln2 = paddle.nn.LayerNorm(dim)
        self.fc1, self.fc2 = paddle.nn.Linear(dim, 4 * dim), paddle.nn.Linear(4 * dim, dim)
        self.gelu_approximate = gelu_approximate

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        wide = paddle.nn.functional.gelu(self.fc1(self.ln2(x)), approximate=self.gelu_approximate)
        return x + self.fc2(wide)


class TinyGPT(paddle.nn.Layer):
    """Token + position embeddings, ``layers`` blocks, a final LayerNorm; the logits are the hidden
    states times the token embedding (the output layer tied to it)."""

    def __init__(self, vocab, seq, dim, heads, layers, gelu_approximate=True):
        super().__init__()
        self.seq = seq
        self.tok, self.pos = paddle.nn.Embedding(vocab, dim), paddle.nn.Embedding(seq, dim)
        self.blocks = paddle.nn.LayerList([TransformerBlock(dim, heads, seq, gelu_approximate)
                                           for _ in range(layers)])
        self.ln_f = paddle.nn.LayerNorm(dim)

    def forward(self, ids):
        h = self.tok(ids) + self.pos(paddle.arange(self.seq, dtype="int64"))
        for block in self.blocks:
            h = block(h)
        return paddle.matmul(self.ln_f(h), self.tok.weight, transpose_y=True)


def gpt_model(vocab, seq, dim, heads, layers, gelu_approximate=True):
    """The demo's GPT as an ``nn.Layer`` (``TinyGPT``); ``gelu_approximate=False`` for the exact GELU."""
    return TinyGPT(vocab, seq, dim, heads, layers, gelu_approximate)


def build_gpt(vocab, seq, dim, heads, layers, lr=3e-3):
    """(main, startup, forward-only test program, loss, logits); AdamW at ``lr``."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        with paddle.utils.unique_name.guard():
            ids = paddle.static.data("ids", [None, seq], "int64")
            labels = paddle.static.data("labels", [None, seq], "int64")
            logits = gpt_model(vocab, seq, dim, heads, layers)(ids)
            loss = paddle.nn.functional.cross_entropy(paddle.reshape(logits, [-1, vocab]),
                                                      paddle.reshape(labels, [-1, 1]))
            test = main.clone(for_test=True)
            paddle.optimizer.AdamW(learning_rate=lr, weight_decay=0.01).minimize(loss)
    return main, startup, test, loss, logits


def windows(data, rng, batch, seq):
    """A feed of ``batch`` random windows: ``ids`` and ``labels`` (the next characters)."""
    starts = rng.integers(0, len(data) - seq - 1, batch)
    return {"ids": np.stack([data[s:s + seq] for s in starts]),
            "labels": np.stack([data[s + 1:s + seq + 1] for s in starts])}


def sample(exe, test, logits, scope, context, n, seq, rng, temperature=0.8):
    """``n`` ids drawn after ``context``: each from the logits of the last real position of a window of
    ``seq`` ids, right-padded (the causal mask keeps the padding out of that position)."""
    out = list(context)
    for _ in range(n):
        window = out[-seq:]
        ids = np.zeros((1, seq), dtype="int64")
        ids[0, :len(window)] = window
        (lg,) = exe.run(test, feed={"ids": ids, "labels": ids}, fetch_list=[logits], scope=scope)
        z = lg[0, len(window) - 1].astype("float64") / temperature
        p = np.exp(z - z.max())
        out.append(int(rng.choice(len(p), p=p / p.sum())))
    return out[len(context):]


def _role(op):
    """The op's part of the step; a learning-rate op is marked LRSched and Optimize, so LRSched first."""
    role = int(op.attr("op_role"))
    if role & OpRole.LRSched:
        return "lr"
    if role & OpRole.Optimize:
        return "optimize"
    return "backward" if role & OpRole.Backward else "forward"


def program_summary(program):
    """Ops per role, the most frequent op types, and the parameters with their shapes."""
    ops = list(program.global_block().ops)
    roles = Counter(_role(op) for op in ops)
    types = Counter(op.type for op in ops).most_common()
    params = program.all_parameters()
    size = sum(int(np.prod(p.shape)) for p in params)
    lines = [f"{len(ops)} ops: " + ", ".join(f"{roles[r]} {r}" for r in ("forward", "backward", "optimize", "lr")
                                             if roles[r]),
             "op types: " + ", ".join(f"{t} x{n}" for t, n in types),
             f"{len(params)} parameters, {size} values: "
             + ", ".join(f"{p.name} {list(p.shape)}" for p in params)]
    return "\n".join(textwrap.fill(line, 100, subsequent_indent="    ") for line in lines)


def _loss_marks(losses):
    steps = len(losses)
    marks = sorted({0, steps // 4, steps // 2, 3 * steps // 4, steps - 1})
    return "loss: " + "  ".join(f"step {m + 1}: {losses[m]:.4f}" for m in marks)


def _gc_report(exe, trace, steps, elapsed):
    stats = exe.memory_stats()
    frees = trace.of_kind("free")
    return (f"speed: {elapsed / steps * 1e3:.3f} ms per step ({len(trace.of_kind('op'))} ops per step)\n"
            f"garbage collection: {len(frees)} tensors freed per step ({sum(e.nbytes for e in frees)} bytes); "
            f"live after step {stats['live_bytes']} bytes, peak {stats['peak_bytes']} bytes")


def run_gpt_demo(steps=200, batch=8, dim=32, seed=0, gc_gb=0.0, show_program=True, out=None,
                 seq=32, heads=2, layers=2, sample_chars=120):
    """Train the demo GPT for ``steps`` steps of ``batch`` windows of ``seq`` characters; 0 on success."""
    out = sys.stdout if out is None else out
    paddle.seed(seed)
    paddle.set_flags({"FLAGS_eager_delete_tensor_gb": gc_gb})
    source, text, chars, data = read_text()
    main, startup, test, loss, logits = build_gpt(len(chars), seq, dim, heads, layers)
    if show_program:
        print("=== the main program (a summary; the Paddle-style text has every op) ===", file=out)
        print(program_summary(main), file=out)
    print(f"\n=== training: {steps} steps, batch {batch} x {seq} characters of {source} "
          f"({len(text)} characters, vocabulary {len(chars)}), GPT {layers} layers dim {dim} heads {heads}, "
          f"AdamW, FLAGS_eager_delete_tensor_gb={gc_gb} ===", file=out)
    exe, scope = paddle.static.Executor(), paddle.static.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(seed)
    _train(exe, main, loss, scope, steps, lambda: windows(data, rng, batch, seq), out)
    prompt = [chars.index(c) for c in "First Citizen:\n"]  # in the shipped text and the fallback
    got = sample(exe, test, logits, scope, prompt, sample_chars, seq, rng)
    print("sample:\n" + "".join(chars[k] for k in prompt + got), file=out)
    return 0
