"""Reductions and pointwise math of real models: reduce_max/min/prod, arg_max, top_k_v2, cumsum, clip, abs, sign, log_softmax, one_hot_v2, accuracy, sigmoid_cross_entropy_with_logits, squared_l2_norm, clip_by_norm (+ grads).

Mirrors Paddle's ops of the same names (paddle/phi/kernels/cpu/). Filled in op by op.
"""
