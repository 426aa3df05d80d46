"""Linear-algebra ops: bmm (Paddle ``paddle/phi/kernels/impl/bmm_kernel_impl.h``)."""
