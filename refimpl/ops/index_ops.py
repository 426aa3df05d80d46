"""Indexing and shape ops: slice, strided_slice, gather, gather_nd, where, stack, squeeze2, unsqueeze2, expand_v2, tile, tril_triu, range, comparisons (+ grads).

Mirrors Paddle's ops of the same names (paddle/phi/kernels/cpu/). Filled in op by op.
"""
