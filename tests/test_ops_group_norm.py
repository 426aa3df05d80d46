"""group_norm, instance_norm, prelu, spectral_norm and their grads (refimpl/ops/group_norm_ops.py,
prelu_ops.py, spectral_norm_ops.py): forwards against plain NumPy loops, float64 central-difference
gradients, and numbers printed by Paddle 3.3.1 (``FLAGS_enable_pir_api=0``, legacy static graph)."""
import numpy as np
import pytest

from refimpl.core.errors import InvalidArgument

from op_check import grad_check, run

R = np.random.default_rng(11)

# the input of the Paddle 3.3.1 literals below: x.reshape(1, 4, 2, 2)
PD_X = np.array([4., 2.6569, 1.5876, 0.79209995, -0.2704, -0.02249999, -0.04840001, -0.3481002, 0.92160004,
                 1.7688998, 2.89, 4.2849007, -5.9536004, -7.8960996, -10.112402, -12.602501],
                np.float32).reshape(1, 4, 2, 2)


def _loop_group_norm(x, groups, scale, bias, eps, layout):
    """Group norm group by group with float64 statistics (two-pass variance)."""
    xc = np.moveaxis(x, -1, 1) if layout == "NHWC" else x
    n, c = xc.shape[:2]
    y = np.empty(xc.shape)
    means, variances = np.empty((n, groups)), np.empty((n, groups))
    per = c // groups
    for i in range(n):
        for g in range(groups):
            part = xc[i, g * per:(g + 1) * per].astype(np.float64)
            m = part.mean()
            v = ((part - m) ** 2).mean()
            means[i, g], variances[i, g] = m, v
            for k in range(per):
                ch = g * per + k
                val = (part[k] - m) / np.sqrt(v + eps)
                y[i, ch] = val * (scale[ch] if scale is not None else 1) + (bias[ch] if bias is not None else 0)
    return (np.moveaxis(y, 1, -1) if layout == "NHWC" else y), means, variances


@pytest.mark.parametrize("shape, groups, layout, affine", [
    ((2, 6, 3, 3), 3, "NCHW", True), ((2, 4, 5), 2, "NCHW", False), ((2, 3, 4, 6), 2, "NHWC", True),
    ((3, 4), 4, "NCHW", True), ((1, 8, 2, 2, 3), 2, "NCHW", True)])
def test_group_norm_forward_matches_loops(shape, groups, layout, affine):
    x = (R.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    c = shape[1] if layout == "NCHW" else shape[-1]
    s, b = None, None
    if affine:
        s, b = R.standard_normal(c).astype(np.float32), R.standard_normal(c).astype(np.float32)
    y, mean, var = run("group_norm", x, s, b, groups=groups, data_layout=layout)
    wy, wm, wv = _loop_group_norm(x, groups, s, b, np.float32(1e-5), layout)
    assert mean.shape == var.shape == (shape[0], groups)
    np.testing.assert_allclose(y, wy, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mean, wm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, wv, rtol=1e-4, atol=1e-6)


def test_group_norm_gives_paddles_numbers():
    y, _, _ = run("group_norm", PD_X, None, None, groups=2)
    # Paddle 3.3.1: F.group_norm(x, 2)
    want = [1.9879947, 1.0849047, 0.3659158, -0.16897222, -0.88338894, -0.7167029, -0.73411787, -0.9356339,
            0.6949564, 0.8332134, 1.0161474, 1.2437583, -0.42689478, -0.74385935, -1.1055014, -1.5118198]
    np.testing.assert_allclose(y.reshape(-1), want, rtol=1e-6)


def test_group_norm_grad_without_scale_is_paddles():
    """Paddle's CPU grad adds sum(dy * scale) only when Scale is given: without it dx lacks -mean(dy)."""
    y, m, v = run("group_norm", PD_X, None, None, groups=2)
    dy = y * np.float32(0.125)  # d mean(y * y) / dy, as Paddle's ops compute it (exact: a power of 2)
    dx, _, _ = run("group_norm_grad", PD_X, None, None, y, m, v, dy, groups=2, need=(True, False, False))
    # Paddle 3.3.1: the gradient of mean(F.group_norm(x, 2) ** 2)
    want = [7.2139858e-07, 3.9075755e-07, 1.3275738e-07, -6.1368972e-08, -3.2062158e-07, -2.6050503e-07,
            -2.6551476e-07, -3.3565072e-07, 3.6472141e-09, 4.8629523e-09, 7.2944282e-09, 7.2944282e-09,
            -2.4314761e-09, -4.8629523e-09, -7.2944282e-09, -9.7259045e-09]
    np.testing.assert_allclose(dx.reshape(-1), want, rtol=2e-5, atol=1e-12)


@pytest.mark.parametrize("layout, shape", [("NCHW", (2, 4, 3)), ("NHWC", (2, 3, 2, 4))])
def test_group_norm_grad_matches_central_differences(layout, shape):
    c = shape[1] if layout == "NCHW" else shape[-1]
    inputs = {"X": R.standard_normal(shape), "Scale": R.standard_normal(c), "Bias": R.standard_normal(c)}
    grad_check("group_norm", inputs, {"groups": 2, "data_layout": layout}, out_slot="Y",
               wrt=("X", "Scale", "Bias"), rtol=1e-5, atol=1e-7)


def test_group_norm_kernel_refuses_bad_groups():
    with pytest.raises(InvalidArgument, match="not divisible by groups=4"):
        run("group_norm", np.zeros((2, 6, 3), np.float32), None, None, groups=4)
    with pytest.raises(InvalidArgument, match="data_layout"):
        run("group_norm", np.zeros((2, 6, 3), np.float32), None, None, groups=2, data_layout="NCL")


# ---- instance_norm ------------------------------------------------------------------------------
def test_instance_norm_forward_matches_loops():
    x = (R.standard_normal((2, 3, 4, 5)) + 1).astype(np.float32)
    s, b = R.standard_normal(3).astype(np.float32), R.standard_normal(3).astype(np.float32)
    y, mean, inv = run("instance_norm", x, s, b)
    assert mean.shape == inv.shape == (6,)
    for i in range(2):
        for c in range(3):
            part = x[i, c].astype(np.float64)
            m, v = part.mean(), part.var()
            np.testing.assert_allclose(mean[i * 3 + c], m, rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(inv[i * 3 + c], 1 / np.sqrt(v + 1e-5), rtol=1e-5)  # the inverse std
            np.testing.assert_allclose(y[i, c], (part - m) / np.sqrt(v + 1e-5) * s[c] + b[c], rtol=1e-5, atol=1e-5)


def test_instance_norm_gives_paddles_numbers():
    y, _, _ = run("instance_norm", PD_X, None, None)
    dx, _, _ = run("instance_norm_grad", PD_X, None, None, *run("instance_norm", PD_X, None, None)[1:],
                   y * np.float32(0.125), need=(True, False, False))
    # Paddle 3.3.1: F.instance_norm(x) and the gradient of mean(F.instance_norm(x) ** 2)
    want_y = [1.446693, 0.33054084, -0.5580761, -1.2191579, -0.700533, 1.0706269, 0.8855802, -1.255674,
              -1.2251306, -0.55314296, 0.33599392, 1.4422799, 1.2844324, 0.5016968, -0.39136857, -1.394761]
    want_dx = [1.0154276e-06, 2.3837784e-07, -3.9007281e-07, -8.5444520e-07, -3.1939097e-04, 4.8802939e-04,
               4.0371018e-04, -5.7245506e-04, -7.5635251e-07, -3.4863123e-07, 2.0090613e-07, 8.7453259e-07,
               1.0808038e-07, 4.5033492e-08, -2.5518977e-08, -1.0207591e-07]
    np.testing.assert_allclose(y.reshape(-1), want_y, rtol=1e-5, atol=1e-6)
    # the true gradient is ~0 (y*y sums to a constant): what remains is rounding, Paddle's and ours
    np.testing.assert_allclose(dx.reshape(-1)[4:8], want_dx[4:8], rtol=5e-2)
    assert np.abs(dx).max() < 1e-3


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 2, 3, 2)])
def test_instance_norm_grad_matches_central_differences(shape):
    c = shape[1]
    inputs = {"X": R.standard_normal(shape), "Scale": R.standard_normal(c), "Bias": R.standard_normal(c)}
    grad_check("instance_norm", inputs, {}, out_slot="Y", wrt=("X", "Scale", "Bias"), rtol=1e-5, atol=1e-7)


def test_instance_norm_param_grads_only_together():
    """As Paddle's kernel: d_scale / d_bias are computed only when both are asked for."""
    x = R.standard_normal((2, 3, 4))
    s, b = np.ones(3), np.zeros(3)
    y, m, v = run("instance_norm", x, s, b)
    _, ds, db = run("instance_norm_grad", x, s, b, m, v, y, need=(True, True, False))
    assert ds is None and db is None


# ---- prelu ------------------------------------------------------------------------------------
def _loop_prelu(x, alpha, mode, layout):
    out = np.empty_like(x)
    for idx in np.ndindex(x.shape):
        if mode == "all":
            a = alpha.reshape(-1)[0]
        elif mode == "channel":
            a = alpha.reshape(-1)[idx[1] if layout == "NCHW" else idx[-1]]
        else:
            a = alpha.reshape(x.shape[1:])[idx[1:]]
        out[idx] = x[idx] if x[idx] > 0 else a * x[idx]
    return out


@pytest.mark.parametrize("mode, layout, a_shape", [
    ("all", "NCHW", (1,)), ("channel", "NCHW", (1, 3, 1, 1)), ("channel", "NHWC", (4,)),
    ("element", "NCHW", (1, 3, 2, 4))])
def test_prelu_forward_and_grad(mode, layout, a_shape):
    x = R.standard_normal((2, 3, 2, 4))
    x[np.abs(x) < 0.05] = 0.3  # no value at the kink
    alpha = R.random(a_shape) + 0.1
    np.testing.assert_array_equal(run("prelu", x, alpha, mode=mode, data_format=layout),
                                  _loop_prelu(x, alpha, mode, layout))
    grad_check("prelu", {"X": x, "Alpha": alpha}, {"mode": mode, "data_format": layout}, wrt=("X", "Alpha"))


def test_prelu_gives_paddles_numbers():
    a = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    y = run("prelu", PD_X, a, mode="channel")
    dx, da = run("prelu_grad", PD_X, a, y * np.float32(0.125), mode="channel")
    # Paddle 3.3.1: F.prelu(x, weight=[0.1, 0.2, 0.3, 0.4]) and the gradients of mean(y ** 2)
    np.testing.assert_allclose(y.reshape(-1)[4:8], [-5.4079998e-02, -4.4999989e-03, -9.6800020e-03, -6.9620036e-02],
                               rtol=1e-6)
    np.testing.assert_allclose(dx.reshape(-1)[12:], [-1.19072013e-01, -1.57922000e-01, -2.02248052e-01,
                                                     -2.52050012e-01], rtol=1e-6)
    np.testing.assert_allclose(da, [0.0, 4.9284678e-03, 0.0, 1.7943874e+01], rtol=1e-6)


def test_prelu_refuses_an_alpha_of_the_wrong_size():
    with pytest.raises(InvalidArgument, match="mode 'channel'.*Alpha has shape \\[4\\]"):
        run("prelu", np.zeros((2, 3, 2), np.float32), np.zeros(4, np.float32), mode="channel")
    with pytest.raises(InvalidArgument, match="mode must be one of"):
        run("prelu", np.zeros((2, 3), np.float32), np.zeros(1, np.float32), mode="any")


# ---- spectral_norm ------------------------------------------------------------------------------
def test_spectral_norm_converges_to_the_largest_singular_value():
    w = R.standard_normal((3, 4, 2, 2))
    h = 4
    u, v = R.standard_normal(h), R.standard_normal(3 * 2 * 2)
    u0, v0 = u.copy(), v.copy()
    out = run("spectral_norm", w, u, v, dim=1, power_iters=60)
    mat = np.moveaxis(w, 1, 0).reshape(h, -1)
    sigma = np.linalg.svd(mat, compute_uv=False)[0]
    np.testing.assert_allclose(out, w / sigma, rtol=1e-10)
    assert np.array_equal(u, u0) and np.array_equal(v, v0)  # the power iteration works on copies


def test_spectral_norm_forward_and_grad_are_paddles():
    """Paddle's grad formula, dOut * (1 - u vᵀ sum(W / sigma)) / sigma: Paddle 3.3.1's numbers."""
    w = PD_X.reshape(4, 4)
    u = np.array([1, 0.5, -0.5, 0.25], np.float32)
    v = np.array([0.3, -0.2, 0.1, 1.0], np.float32)
    out = run("spectral_norm", w, u, v, dim=0, power_iters=2)
    dw = run("spectral_norm_grad", w, u, v, out * np.float32(0.125), dim=0, power_iters=2)
    # Paddle 3.3.1: spectral_norm op (dim=0, power_iters=2) and the gradient of mean(out ** 2)
    want_out = [0.19950269, 0.13251467, 0.07918262, 0.03950652, -0.01348638, -0.0011222, -0.00241398,
                -0.01736173, 0.04596542, 0.08822507, 0.1441407, 0.2137123, -0.29693982, -0.3938233,
                -0.5043629, -0.6285582]
    want_dw = [1.30686315e-03, 8.82844091e-04, 5.37863350e-04, 2.74253456e-04, -8.36720646e-05, -6.95036169e-06,
               -1.49208545e-05, -1.07064880e-04, 3.08069837e-04, 6.05874404e-04, 1.01768994e-03, 1.55609590e-03,
               -1.36766804e-03, -1.58742885e-03, -1.69404026e-03, -1.62780925e-03]
    np.testing.assert_allclose(out.reshape(-1), want_out, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dw.reshape(-1), want_dw, rtol=1e-4, atol=1e-9)


def test_spectral_norm_refuses_bad_dim_and_shapes():
    with pytest.raises(InvalidArgument, match="dim must be 0 or 1, got 2"):
        run("spectral_norm", np.zeros((2, 3, 4)), np.zeros(4), np.zeros(6), dim=2)
    with pytest.raises(InvalidArgument, match="input V must have shape \\[3\\]"):
        run("spectral_norm", np.zeros((2, 3)), np.zeros(2), np.zeros(4), dim=0)
