"""GPT-mini under tensor parallelism: ``refimpl/demo.py``'s ``TinyGPT`` built from fleet's mp layers.

The model of ``TinyGPT`` / ``TransformerBlock`` (token + position embeddings, pre-norm blocks of causal
self-attention and a 4x MLP with tanh GELU, a final LayerNorm, logits tied to the token embedding) in
the Megatron-LM layout, with ``paddle.distributed.fleet.meta_parallel``'s layers
(``refimpl/distributed/fleet/layers/mpu/mp_layers.py``, Paddle's ``fleet/layers/mpu/mp_layers.py``):

* attention: ``q``, ``k``, ``v`` are ``ColumnParallelLinear(dim, dim, gather_output=False)``, so each
  model-parallel rank holds ``heads / mp`` whole heads (a head is ``head_size`` consecutive columns);
  the attention of those heads is local; ``o`` is ``RowParallelLinear(dim, dim,
  input_is_parallel=True)``, whose ``mp_allreduce_sum`` adds the ranks' partial outputs;
* MLP: ``fc1`` column-parallel (``4 * dim / mp`` columns per rank), ``fc2`` row-parallel;
* the token embedding is a ``VocabParallelEmbedding`` (rank ``r`` holds rows
  ``[r V / mp, (r + 1) V / mp)``; ``c_embedding`` + ``mp_allreduce_sum``); the position embedding and the
  LayerNorms are replicated;
* tied output layer: the logits are ``c_identity(ln_f(h)) @ tok_shard^T``, i.e. each rank computes the
  logits of its own vocabulary rows (Megatron's ``parallel_lm_logits``), which is what
  ``ParallelCrossEntropy`` (``c_softmax_with_cross_entropy``) reads; ``c_identity`` makes the backward
  all-reduce the gradient of ``ln_f(h)`` over the ranks. The one weight stays tied: its shard gets the
  gradient of both its uses, and both are local to the shard.

The parameters are created in ``TinyGPT``'s order with the same layer kinds' names
(``embedding_0.w_0`` tokens, ``embedding_1.w_0`` positions, ``layer_norm_k``, ``linear_k``), so a
one-device parameter and its tensor-parallel shard share a name. :func:`shard_layout` reads from a
program which parameters are split and along which axis (``is_distributed`` / ``split_axis``, set by
the mp layers); :func:`shard_values` cuts one-device values into one model-parallel rank's shards, so a
tensor-parallel run starts from the one-device run's initial values. With one model-parallel rank the
plain ``TinyGPT`` is built (the mp layers need fleet's ``'model'`` group).

Pipeline stages (``gpt_loss(..., pp, marked=True)``): the ops are put on ``pp`` stages with
``device_guard("gpu:k")``, the embeddings on the first, the blocks split evenly, the final LayerNorm, the
logits and the loss on the last. There the output layer is untied -- a linear of its own (column-parallel
under tensor parallelism), on one device as well, so that both train the same model: the tied weight
would be read on the first stage and the last, and refimpl's pipeline refuses a parameter used on two
stages (``refimpl/distributed/pipeline/partition.py``: each stage updates its own copy, so the two uses'
gradients are never summed). Paddle's dygraph ``PipelineLayer`` ties such a weight with
``SharedLayerDesc``, all-reducing its gradient over the stages that hold it; refimpl's static pipeline has
no counterpart.

The last section holds how ``examples/fleet_strategies.py`` lays its ranks out for ``--tp`` /
``--sharding`` / ``--pp`` / ``--dp`` (checks of the degrees and of the switches a pipelined chain keeps,
the strategy switches, which slice of the batch a rank trains on).
"""
from __future__ import annotations

import contextlib
from typing import Dict, Mapping, Optional

import numpy as np

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.distributed.fleet import meta_parallel as mpp
from refimpl.distributed.fleet.layers.mpu import mp_ops

F = paddle.nn.functional


class ParallelAttention(paddle.nn.Layer):
    """``demo.CausalAttention`` with column-parallel ``q``/``k``/``v`` and a row-parallel ``o``."""

    def __init__(self, dim: int, heads: int, seq: int, mp: int) -> None:
        super().__init__()
        self.q, self.k, self.v = (mpp.ColumnParallelLinear(dim, dim, has_bias=True, gather_output=False)
                                  for _ in range(3))
        self.o = mpp.RowParallelLinear(dim, dim, has_bias=True, input_is_parallel=True)
        self.local_heads, self.head_size, self.seq = heads // mp, dim // heads, seq

    def _by_head(self, t):  # [N, seq, dim / mp] -> [N, heads / mp, seq, head_size]
        return paddle.transpose(paddle.reshape(t, [0, 0, self.local_heads, self.head_size]), perm=[0, 2, 1, 3])

    def forward(self, x):
        q, k, v = (self._by_head(proj(x)) for proj in (self.q, self.k, self.v))
        scores = paddle.matmul(q, k, transpose_y=True) * (self.head_size ** -0.5)
        visible = paddle.tril(paddle.ones([self.seq, self.seq], dtype="float32")) > 0.5
        scores = paddle.where(visible, scores, paddle.full_like(scores, -1e9))
        mixed = paddle.matmul(F.softmax(scores, axis=-1), v)
        return self.o(paddle.reshape(paddle.transpose(mixed, perm=[0, 2, 1, 3]), [0, 0, -1]))


class ParallelBlock(paddle.nn.Layer):
    """``demo.TransformerBlock``: ``x + attn(ln1(x))``, then ``+ fc2(gelu(fc1(ln2(.))))``, fc1/fc2 split."""

    def __init__(self, dim: int, heads: int, seq: int, mp: int) -> None:
        super().__init__()
        self.ln1, self.attn = paddle.nn.LayerNorm(dim), ParallelAttention(dim, heads, seq, mp)
        self.ln2 = paddle.nn.LayerNorm(dim)
        self.fc1 = mpp.ColumnParallelLinear(dim, 4 * dim, has_bias=True, gather_output=False)
        self.fc2 = mpp.RowParallelLinear(4 * dim, dim, has_bias=True, input_is_parallel=True)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate=True))


class ParallelGPT(paddle.nn.Layer):
    """``demo.TinyGPT`` over ``mp`` model-parallel ranks; ``forward`` gives this rank's vocabulary columns
    of the logits, ``[N, seq, vocab / mp]``. ``untied``: the output layer is a column-parallel linear of
    its own (``out``, ``[dim, vocab / mp]`` per rank) instead of the token embedding (see :func:`gpt_loss`)."""

    def __init__(self, vocab: int, seq: int, dim: int, heads: int, layers: int, mp: int,
                 untied: bool = False) -> None:
        super().__init__()
        check_sizes(vocab, dim, heads, mp)
        self.seq = seq
        self.tok, self.pos = mpp.VocabParallelEmbedding(vocab, dim), paddle.nn.Embedding(seq, dim)
        self.blocks = paddle.nn.LayerList([ParallelBlock(dim, heads, seq, mp) for _ in range(layers)])
        self.ln_f = paddle.nn.LayerNorm(dim)
        self.out = (mpp.ColumnParallelLinear(dim, vocab, has_bias=False, gather_output=False)
                    if untied else None)
        self.mp_group = self.tok.model_parallel_group

    def hidden(self, ids, checkpoints: Optional[list] = None):
        """The blocks' output (each block's output name appended to ``checkpoints``, for recompute)."""
        h = self.tok(ids) + self.pos(paddle.arange(self.seq, dtype="int64"))
        for block in self.blocks:
            h = block(h)
            if checkpoints is not None:
                checkpoints.append(h.name)
        return h

    def logits(self, h):
        """This rank's vocabulary columns of the logits: tied, its rows of the token embedding times
        ``ln_f(h)``; untied, the column-parallel ``out`` (whose ``c_identity`` is its own)."""
        if self.out is not None:
            return self.out(self.ln_f(h))
        h = mp_ops._c_identity(self.ln_f(h), group=self.mp_group)
        return paddle.matmul(h, self.tok.weight, transpose_y=True)

    def forward(self, ids):
        return self.logits(self.hidden(ids))


def check_sizes(vocab: int, dim: int, heads: int, mp: int) -> None:
    """Typed errors, before any layer is made, for sizes the Megatron layout cannot split over ``mp``."""
    for option, value in (("vocab", vocab), ("heads", heads)):
        if value % mp:
            raise InvalidArgument(f"GPT-mini under tensor parallelism: {option}={value} must be divisible by "
                                  f"the tensor-parallel degree {mp}")
    if dim % heads:
        raise InvalidArgument(f"GPT-mini: dim={dim} must be divisible by heads={heads}")


def check_stages(pp: int, layers: int) -> None:
    """A typed error for a pipeline degree GPT-mini's blocks cannot be split into (a stage per block at most)."""
    if pp < 1 or pp > layers:
        raise InvalidArgument(f"--pp {pp}: GPT-mini has {layers} transformer blocks, so 1 <= pp_degree <= {layers} "
                              f"(every stage holds at least one block)")


def block_stage(i: int, layers: int, pp: int) -> int:
    """The pipeline stage of block ``i``: the blocks split evenly, in order."""
    return i * pp // layers


def _stage_guard(stage: int, marked: bool):
    return paddle.static.device_guard(f"gpu:{stage}") if marked else contextlib.nullcontext()


def gpt_loss(cfg: Mapping[str, int], mp: int, checkpoints: list, pp: int = 1, marked: bool = False):
    """Build GPT-mini's mean cross entropy in the current programs (``ids`` / ``labels`` data vars);
    tensor-parallel when ``mp > 1``. Appends the blocks' output names to ``checkpoints``.

    ``pp > 1``: the output layer is untied, a linear of its own (``linear_{6 * layers}.w_0``, ``[dim,
    vocab]``; column-parallel under ``mp``), on one device as well: the tied weight would be used on the
    first stage (the lookup) and the last (the logits), and refimpl's pipeline refuses a parameter shared
    across stages (``pipeline/partition.py``). ``marked``: the ops are put on their stages with
    ``device_guard("gpu:k")``: the embeddings on stage 0, the blocks split evenly (:func:`block_stage`),
    the final LayerNorm, the logits and the loss on stage ``pp - 1``."""
    vocab, seq, layers = cfg["vocab"], cfg["seq"], cfg["layers"]
    check_stages(pp, layers)
    ids = paddle.static.data("ids", [None, seq], "int64")
    labels = paddle.static.data("labels", [None, seq], "int64")
    if mp <= 1:
        from refimpl.demo import TinyGPT
        model = TinyGPT(vocab, seq, cfg["dim"], cfg["heads"], layers)
        out = paddle.nn.Linear(cfg["dim"], vocab, bias_attr=False) if pp > 1 else None
    else:
        model = ParallelGPT(vocab, seq, cfg["dim"], cfg["heads"], layers, mp, untied=pp > 1)
    with _stage_guard(0, marked):
        # pipelined, the positions are a constant of stage 0: Paddle's legacy pipeline (sharding x pp)
        # refuses the ``cpu`` fill_constants ``paddle.arange`` writes (only gpu devices in its stages)
        positions = paddle.assign(np.arange(seq, dtype="int64")) if pp > 1 else paddle.arange(seq, dtype="int64")
        h = model.tok(ids) + model.pos(positions)
    for i, block in enumerate(model.blocks):
        with _stage_guard(block_stage(i, layers, pp), marked):
            h = block(h)
        checkpoints.append(h.name)
    with _stage_guard(pp - 1, marked):
        flat_labels = paddle.reshape(labels, [-1, 1])
        if mp <= 1:
            logits = out(model.ln_f(h)) if out is not None else \
                paddle.matmul(model.ln_f(h), model.tok.weight, transpose_y=True)
            return F.cross_entropy(paddle.reshape(logits, [-1, vocab]), flat_labels)
        per_token = mpp.ParallelCrossEntropy()(paddle.reshape(model.logits(h), [-1, vocab // mp]), flat_labels)
        return paddle.mean(per_token)


def shard_layout(program) -> Dict[str, Optional[int]]:
    """{parameter name: the axis its tensor-parallel shards split, or None when it is replicated}."""
    return {p.name: (int(p.split_axis) if getattr(p, "is_distributed", False) else None)
            for p in program.global_block().all_parameters()}


def shard_values(full: Mapping[str, np.ndarray], layout: Mapping[str, Optional[int]], mp_rank: int,
                 mp: int) -> Dict[str, np.ndarray]:
    """Model-parallel rank ``mp_rank``'s values of the parameters in ``layout``, cut from the one-device
    values ``full`` (contiguous equal slices along the split axis, as the mp layers create them)."""
    out = {}
    for name, axis in layout.items():
        if name not in full:
            raise InvalidArgument(f"shard_values: the one-device model has no parameter {name!r}")
        value = np.asarray(full[name])
        out[name] = value if axis is None else np.split(value, mp, axis=axis)[mp_rank]
    return out


def load_start(scope, program, full: Mapping[str, np.ndarray], mp_rank: int = 0, mp: int = 1) -> int:
    """Set every parameter of ``program`` this rank holds in ``scope`` (after its startup ran) to its share
    of the one-device values ``full``: the whole value, or model-parallel rank ``mp_rank``'s shard. A
    parameter a sharded startup program did not create (another rank owns it) is left alone. Returns how
    many were set."""
    layout = {n: axis for n, axis in shard_layout(program).items()
              if scope.find_var(n) is not None and scope.find_var(n).is_initialized()}
    for name, value in shard_values(full, layout, mp_rank, mp).items():
        scope.find_var(name).get_tensor().set(np.ascontiguousarray(value))
    return len(layout)


# ---- how the ranks are laid out: the example's --tp / --sharding / --dp / --pp ----------------------------
def degree(opts: Mapping, name: str) -> int:
    """The ``tp`` / ``sharding`` / ``dp`` / ``pp`` degree in ``opts`` (1 when not given)."""
    return int(opts.get(name) or 1)


AXES = ("tp", "sharding", "pp", "dp")
PP_MICRO_BATCHES = 2  # pipeline_configs['accumulate_steps'] under --pp: each rank's slice in 2 micro-batches
SLICE_ROWS = 4  # the rows of one data slice in the examples' batches (fleet_strategies.make_batches)
#: the strategy switches a pipelined chain keeps: PipelineOptimizer's / ShardingOptimizer's white lists
#: (recompute, AMP; sharding also LARS and LAMB), as fleet's compiler (Paddle 3.3.1's) chains them
PIPELINE_CHAINS = {"PipelineOptimizer": ("recompute", "amp"),
                   "ShardingOptimizer": ("recompute", "amp", "lars", "lamb")}
STRATEGY_SWITCHES = ("lamb", "lars", "dgc", "localsgd", "adaptive_localsgd", "fp16_allreduce", "gradient_merge")


def check_pipeline_strategies(opts: Mapping) -> None:
    """Under ``--pp``, InvalidArgument for a strategy switch outside the pipelined chain's white list: fleet's
    compiler would pick another, longer chain (e.g. RawProgramOptimizer -> LambOptimizer) and drop the
    pipeline, training unpipelined under a ``pp`` row."""
    pp = degree(opts, "pp")
    if pp <= 1:
        return
    head = "ShardingOptimizer" if degree(opts, "sharding") > 1 else "PipelineOptimizer"
    for name in STRATEGY_SWITCHES:
        if opts.get(name) and name not in PIPELINE_CHAINS[head]:
            flag = name.replace("_", "-")
            raise InvalidArgument(f"--{flag} with --pp {pp}: {head} chains only {list(PIPELINE_CHAINS[head])} "
                                  f"(its white list, as Paddle 3.3.1's): for --{flag} fleet would chain another "
                                  f"optimizer and drop {head} and the pipeline")


def layout(opts: dict, nranks: int) -> dict:
    """Check the degrees in ``opts`` against the world size and set ``opts['dp']`` to what is left when it
    is not given. Typed errors naming the option, the same on every rank, before any rank starts."""
    for name in AXES:
        if opts.get(name) is not None and int(opts[name]) < 1:
            raise InvalidArgument(f"--{name} must be >= 1, got {opts[name]}")
    check_pipeline_strategies(opts)
    inner = degree(opts, "tp") * degree(opts, "sharding") * degree(opts, "pp")
    given = " x ".join(f"--{k} {opts[k]}" for k in AXES if opts.get(k))
    if not opts.get("dp") and inner > 1:
        if nranks % inner:
            raise InvalidArgument(f"{given}: {inner} ranks per data-parallel replica do not divide the world "
                                  f"size {nranks}")
        opts["dp"] = nranks // inner
    if given and inner * degree(opts, "dp") != nranks:
        raise InvalidArgument(f"{given} = {inner * degree(opts, 'dp')} ranks, but the world size is {nranks}")
    return opts



def set_degrees(strategy, opts: Mapping) -> None:
    """Turn on ``strategy``'s sharding (``sharding_configs``: ``sharding_degree``, ``mp_degree``,
    ``pp_degree``, ``dp_degree``: Paddle's hybrid sharding, whose ``mp_degree`` also lays out the model ring)
    or, without sharding, its ``tensor_parallel`` (the replicas' data-parallel ring then comes from the world
    size); with ``--pp`` also ``pipeline`` (``accumulate_steps`` :data:`PP_MICRO_BATCHES`, 1F1B, micro-batches
    of :data:`SLICE_ROWS` / :data:`PP_MICRO_BATCHES` rows) and, without
    sharding, ``hybrid_configs`` (``dp_degree`` x ``pp_degree`` x ``mp_degree``: fleet's hybrid group)."""
    tp, sharding, pp, dp = (degree(opts, k) for k in ("tp", "sharding", "pp", "dp"))
    if pp > 1:
        strategy.pipeline = True
        # micro_batch_size: Paddle's legacy pipeline (sharding x pp) sizes its receive buffers from it
        strategy.pipeline_configs = {"accumulate_steps": PP_MICRO_BATCHES, "schedule_mode": "1F1B",
                                     "micro_batch_size": SLICE_ROWS // PP_MICRO_BATCHES}
    if sharding > 1:
        strategy.sharding = True
        strategy.sharding_configs = {"sharding_degree": sharding, "mp_degree": tp, "pp_degree": pp, "dp_degree": dp}
        return
    if tp > 1:
        strategy.tensor_parallel = True
        strategy.tensor_parallel_configs = {"tensor_parallel_degree": tp}
    if pp > 1:
        strategy.hybrid_configs = {"dp_degree": dp, "mp_degree": tp, "pp_degree": pp}


def data_slice(opts: Mapping, rank: int, nranks: int) -> tuple:
    """(this rank's slice of the batch, how many slices). Ranks are laid out as Paddle's hybrid sharding
    does ("mp --> sharding --> pp --> dp", ``ShardingOptimizer._build_groups``; without sharding the same as
    ``CommunicateTopology``'s data, pipe, model): the ``tp`` neighbours of a rank and the stages of one
    pipeline share a slice; each (dp rank, sharding rank) takes its own."""
    tp, sharding, pp = degree(opts, "tp"), degree(opts, "sharding"), degree(opts, "pp")
    sharding_rank = (rank // tp) % sharding
    dp_rank = rank // (tp * sharding * pp)
    return dp_rank * sharding + sharding_rank, max(nranks // (tp * pp), 1)
