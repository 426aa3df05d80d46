"""Convolution, pooling and flattening ops: conv2d, depthwise_conv2d, pool2d, flatten_contiguous_range (+ grads).

Mirrors Paddle's ops of the same names (paddle/phi/kernels/cpu/conv_kernel.cc, pool_kernel.cc). Filled in op by op.
"""
