"""Spectral normalisation of a weight: spectral_norm and spectral_norm_grad.

Mirrors Paddle 3.3.1's op (kernels ``paddle/phi/kernels/impl/spectral_norm_kernel_impl.h``,
``spectral_norm_grad_kernel_impl.h``, ``paddle/phi/kernels/funcs/spectral_norm.h``; shapes
``SpectralNormInferMeta`` in ``paddle/phi/infermeta/ternary.cc``).

``spectral_norm``: Weight, U, V -> Out; attrs dim (0 or 1), power_iters, eps. Weight (2-D to 5-D) is
permuted so that ``dim`` comes first and viewed as a matrix W of shape (h, w), h = Weight.shape[dim];
U has h values, V has w. Starting from copies of U and V (the inputs are left as they are), each of
``power_iters`` rounds does ``v = Wᵀu / (‖Wᵀu‖ + eps)``, ``u = Wv / (‖Wv‖ + eps)``; then
``sigma = uᵀ(Wv)`` and ``Out = W / sigma``, permuted back.

``spectral_norm_grad`` reads Weight, U, V, Out@GRAD and computes what Paddle's kernel computes: it
redoes the forward (u, v, sigma, W / sigma), then ``dW = dOut * (1 - u vᵀ * sum(W / sigma)) / sigma``
elementwise. That is not the derivative of the forward (which would be
``(dOut - u vᵀ * sum(dOut * W / sigma)) / sigma``): it is Paddle's formula, kept here so that
training gives Paddle's numbers.

Differences from Paddle: the matrix-vector products and norms are NumPy's (Paddle calls BLAS gemv and
Eigen sums), so results may differ from Paddle's in the last bits.
"""
import numpy as np

from refimpl.core.errors import InvalidArgument

from .common import f32, first, grads_like
from .grad_maker import simple_grad
from .registry import register_op

__all__ = ["check_spectral_norm", "weight_matrix"]

_ATTRS = {"dim": 0, "power_iters": 1, "eps": f32(1e-12)}


def check_spectral_norm(op: str, w_shape, u_shape, v_shape, dim: int, power_iters: int) -> None:
    """Paddle's SpectralNormInferMeta checks."""
    w_shape = tuple(w_shape)
    if not 2 <= len(w_shape) <= 5:
        raise InvalidArgument(f"{op}: the rank of Weight must be 2 to 5, got shape {list(w_shape)}")
    if dim not in (0, 1):
        raise InvalidArgument(f"{op}: attr dim must be 0 or 1, got {dim}")
    if power_iters < 0:
        raise InvalidArgument(f"{op}: attr power_iters must be >= 0, got {power_iters}")
    h = w_shape[dim]
    w = int(np.prod([d for i, d in enumerate(w_shape) if i != dim])) if min(w_shape) >= 0 else -1
    for slot, shape, want in (("U", u_shape, h), ("V", v_shape, w)):
        shape = tuple(shape)
        if len(shape) != 1 or (want >= 0 and shape[0] >= 0 and shape[0] != want):
            raise InvalidArgument(f"{op}: input {slot} must have shape [{want}] for Weight of shape "
                                  f"{list(w_shape)} and dim={dim}, got {list(shape)}")


def _infer(ins, attrs):
    shape, dt = first(ins, "Weight")
    check_spectral_norm("spectral_norm", shape, first(ins, "U")[0], first(ins, "V")[0], attrs["dim"],
                        attrs["power_iters"])
    return {"Out": (tuple(shape), dt)}


def weight_matrix(a: np.ndarray, dim: int) -> np.ndarray:
    """``a`` with ``dim`` moved first, as an (h, w) matrix (a copy when dim != 0)."""
    return np.moveaxis(a, dim, 0).reshape(a.shape[dim], -1)


def _from_matrix(m: np.ndarray, shape, dim: int) -> np.ndarray:
    moved = (shape[dim],) + tuple(d for i, d in enumerate(shape) if i != dim)
    return np.ascontiguousarray(np.moveaxis(m.reshape(moved), 0, dim))


def _sigma(W: np.ndarray, U: np.ndarray, V: np.ndarray, power_iters: int, eps: float):
    T = W.dtype.type
    u, v = U.copy(), V.copy()
    for _ in range(power_iters):
        v = W.T @ u
        v = v / (np.sqrt(np.add.reduce(v * v)) + T(eps))
        u = W @ v
        u = u / (np.sqrt(np.add.reduce(u * u)) + T(eps))
    return u, v, np.add.reduce(u * (W @ v))


@register_op("spectral_norm", ["Weight", "U", "V"], ["Out"], _ATTRS, infer_shape=_infer,
             grad=simple_grad("spectral_norm_grad", ["Weight", "U", "V", "Out@GRAD"], ["Weight@GRAD"]))
def spectral_norm(Weight: np.ndarray, U: np.ndarray, V: np.ndarray, *, dim: int, power_iters: int,
                  eps: float) -> np.ndarray:
    check_spectral_norm("spectral_norm", Weight.shape, U.shape, V.shape, dim, power_iters)
    W = weight_matrix(Weight, dim)
    _, _, sigma = _sigma(W, U, V, power_iters, eps)
    return _from_matrix(W / sigma, Weight.shape, dim)


@register_op("spectral_norm_grad", ["Weight", "U", "V", "Out@GRAD"], ["Weight@GRAD"], _ATTRS,
             infer_shape=grads_like(**{"Weight@GRAD": "Weight"}))
def spectral_norm_grad(Weight: np.ndarray, U: np.ndarray, V: np.ndarray, dOut: np.ndarray, *, dim: int,
                       power_iters: int, eps: float) -> np.ndarray:
    """Paddle's formula (see the module docstring), not the forward's derivative."""
    check_spectral_norm("spectral_norm_grad", Weight.shape, U.shape, V.shape, dim, power_iters)
    T = Weight.dtype.type
    W, dO = weight_matrix(Weight, dim), weight_matrix(dOut, dim)
    u, v, sigma = _sigma(W, U, V, power_iters, eps)
    total = np.add.reduce((W / sigma).reshape(-1))
    dW = dO * (T(1) - np.outer(u, v) * total) / sigma
    return _from_matrix(dW, Weight.shape, dim)
