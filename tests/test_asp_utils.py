"""Automatic sparsity's mask algorithms and parameter rules (``paddle.incubate.asp.utils``,
``supported_layer_list``), checked against Paddle 3.3.1.

Facts marked "Paddle 3.3.1" were recorded with /tmp/pd33 (``FLAGS_enable_pir_api=0``, CPU):
the masks of the mask algorithms on fixed matrices (packed with ``np.packbits`` of ``mask != 0``,
row-major, as hex), the order of the valid 2D patterns (each pattern's 16 cells read as a binary
number), the ``check_sparsity`` / ``check_mask_*`` answers and the supported-parameter rules.
The programs, pruning, training and fleet are in ``tests/test_asp.py``.
"""
import numpy as np
import pytest

import refimpl as paddle
from refimpl.core.errors import InvalidArgument
from refimpl.framework import Program, unique_name
from refimpl.incubate import asp
from refimpl.incubate.asp import ASPHelper, CheckMethod, MaskAlgo, utils


def _hex(mask):
    return np.packbits(np.asarray(mask).reshape(-1) != 0).tobytes().hex()


def _int_matrix(rows, cols, k=7, l=13, mod=11):
    """A matrix with many ties (integers from -5 to 5)."""
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return ((i * k + j * l) % mod - mod // 2).astype("int64")


def _float_matrix(rows, cols):
    n = np.arange(rows * cols).reshape(rows, cols)
    return ((n * 37 % 101) / 101.0 - 0.5).astype("float32")


A, F = _int_matrix(6, 10), _float_matrix(7, 9)
T4 = _int_matrix(2, 60, k=5, l=3, mod=9).reshape(2, 3, 5, 4)
T3 = _float_matrix(4, 15).reshape(4, 3, 5)
T1 = np.array([3, -1, 2, 0, 5, 4, -6])

# ---- (a) the mask algorithms: Paddle 3.3.1's masks, ties included ---------------------------------
PADDLE_MASKS = {
    "A_1d_2_4": "c658f3cf1b33e730", "A_greedy_2_4": "961a739f1833e730", "A_best_2_4": "3cf0c63e70630e70",
    "A_1d_1_2": "965969969969a690", "A_greedy_1_2": "965a65969a65a690", "A_best_1_2": "556aa556aa6566a0",
    "A_1d_1_4": "ee5dfbef9f7befb0", "A_greedy_1_4": "440861860821a210", "A_best_1_4": "1490821620210610",
    "A_1d_3_8": "ce5cfbcf1f73e7b0", "A_greedy_3_8": "861861cf0831c710",
    "F_1d_2_4": "96d2d672da5b4d6a", "F_greedy_2_4": "96b29a535a5b496a", "F_best_2_4": "65cc9a92d692d25a",
    "F_1d_1_2": "96d2d672da5b4d6a", "F_greedy_1_2": "9ab29a52da6ac96a", "F_best_1_2": "66cc9a92ba52d65a",
    "F_1d_1_4": "b7f6defbdbdbdf6e", "F_greedy_1_4": "81921202424a0848", "F_best_1_4": "21c410828212404a",
    "F_1d_3_8": "b6d6d6fadb5b6f6a", "F_greedy_3_8": "949292525a4a4948",
}
GENERATORS = {"1d": asp.get_mask_1d, "greedy": asp.get_mask_2d_greedy, "best": asp.get_mask_2d_best}


@pytest.mark.parametrize("case", sorted(PADDLE_MASKS))
def test_masks_are_paddles(case):
    name, algo, n, m = case.split("_")
    mask = GENERATORS[algo]({"A": A, "F": F}[name], int(n), int(m))
    assert _hex(mask) == PADDLE_MASKS[case]
    # Paddle's dtypes: get_mask_1d keeps the matrix's, the 2D ones are float64
    assert mask.dtype == (np.dtype("float64") if algo != "1d" else {"A": A, "F": F}[name].dtype)


#: Paddle 3.3.1: _compute_valid_2d_patterns(2, 4) and (1, 2), in its order (argmax breaks ties by it)
PATTERNS_4_2 = [
    50835, 37830, 49980, 50745, 52275, 26985, 21420, 39525, 42645, 26940, 40035, 14790, 39990, 23100, 21450,
    39510, 22950, 38595, 22170, 50085, 15555, 26010, 42330, 26025, 37740, 23130, 14700, 23715, 27045, 50490,
    23205, 38505, 41925, 15465, 38460, 22890, 15420, 43605, 23610, 22185, 38565, 50010, 15525, 44115, 38250,
    42390, 50070, 27285, 51510, 23190, 42435, 41820, 26970, 23235, 43365, 27030, 51555, 39270, 25500, 25545,
    44085, 27075, 23145, 43350, 42585, 42345, 13770, 13740, 26265, 42300, 27795, 38550, 15510, 50115, 27225,
    38490, 13260, 50595, 27705, 51765, 14025, 15450, 50025, 42405, 14940, 13980, 15045, 38310, 21930, 51795]


def test_valid_2d_patterns_in_paddles_order():
    def as_ints(patterns):
        return [int("".join(str(int(v)) for v in p.reshape(-1)), 2) for p in patterns]
    assert as_ints(utils._compute_valid_2d_patterns(2, 4)) == PATTERNS_4_2
    assert as_ints(utils._compute_valid_2d_patterns(1, 2)) == [6, 9]
    assert "4_2" in utils._valid_2d_patterns and utils._valid_2d_patterns["4_2"].shape == (90, 4, 4)


#: Paddle 3.3.1: create_mask of tensors of rank 1, 3 and 4 (a conv filter: pruned along dim 2)
PADDLE_TENSOR_MASKS = {
    "T4_MASK_1D": "964bf4b2df2d96f49b6f24dbf926df", "T4_MASK_2D_GREEDY": "96696592c9659a5693c9349a696693",
    "T4_MASK_2D_BEST": "3c96ca659699669996693c96ca6596", "T3_MASK_1D": "9cd6d6d6735b5b50",
    "T3_MASK_2D_GREEDY": "949ad6d24b5ae940", "T3_MASK_2D_BEST": "6d24b5b6923666c0",
    "T1_MASK_1D": "aa", "T1_MASK_2D_GREEDY": "aa", "T1_MASK_2D_BEST": "ac",
}


@pytest.mark.parametrize("case", sorted(PADDLE_TENSOR_MASKS))
def test_create_mask_is_paddles(case):
    name, algo = case.split("_", 1)
    tensor = {"T4": T4, "T3": T3, "T1": T1}[name]
    mask = asp.create_mask(tensor, func_name=MaskAlgo[algo])
    assert mask.shape == tensor.shape and mask.dtype == tensor.dtype
    assert _hex(mask) == PADDLE_TENSOR_MASKS[case]


#: Paddle 3.3.1: check_sparsity(x, CHECK_1D / CHECK_2D, n, m) for (n, m) = (2, 4), (1, 4), (1, 2)
PADDLE_CHECKS = {"A": "FFFFFF", "F": "FFFFFF", "m1A": "TTFTTF", "m2A": "TTFTTF", "gA": "TTFTTF", "T4": "FFFFFF",
                 "mT4": "TTFTTF", "m2T4": "TTFTTT", "T1": "FTFTTT", "mT1": "TTTTTT"}


def test_check_sparsity_answers_are_paddles():
    tensors = {"A": A, "F": F, "m1A": asp.get_mask_1d(A, 2, 4), "m2A": asp.get_mask_2d_best(A, 2, 4),
               "gA": asp.get_mask_2d_greedy(A, 2, 4) * A, "T4": T4, "mT4": asp.create_mask(T4),
               "m2T4": asp.create_mask(T4, MaskAlgo.MASK_2D_BEST), "T1": T1, "mT1": asp.create_mask(T1)}
    for name, t in tensors.items():
        got = "".join("T" if asp.check_sparsity(t, func_name=c, n=n, m=m) else "F"
                      for c in (CheckMethod.CHECK_1D, CheckMethod.CHECK_2D) for n, m in ((2, 4), (1, 4), (1, 2)))
        assert got == PADDLE_CHECKS[name], name
    shapes = ((2, 4), (1, 4), (3, 5), (1, 2))
    m1, m2 = tensors["m1A"], tensors["m2A"]
    assert "".join("T" if asp.check_mask_1d(x, n, m) else "F" for x in (A, m1, T1) for n, m in shapes) == \
        "FFFFTTFFFTFF"
    assert "".join("T" if asp.check_mask_2d(x, n, m) else "F" for x in (A, m2, m1) for n, m in shapes) == \
        "FFFFTTFFTTFF"
    assert [asp.calculate_density(x) for x in (A, m1, T4)] == [0.9166666666666666, 0.5833333333333334, 1.0]
    assert CheckMethod.get_checking_method(MaskAlgo.MASK_2D_GREEDY) is CheckMethod.CHECK_2D


def test_best_keeps_at_least_greedys_l1_norm():
    """Closed form: the best 2D mask maximizes each block's kept L1 norm over every valid pattern."""
    mat = np.abs(F.astype("float64"))
    best, greedy = asp.get_mask_2d_best(mat, 2, 4), asp.get_mask_2d_greedy(mat, 2, 4)
    assert (mat * best).sum() >= (mat * greedy).sum()
    block = mat[:4, :4]
    brute = max((block * p).sum() for p in utils._compute_valid_2d_patterns(2, 4))
    assert np.isclose((block * best[:4, :4]).sum(), brute)


# ---- (b) which parameters ASP prunes: Paddle 3.3.1's answers ---------------------------------------
NAMES = ["fcx.w_0", "fc.w_0", "fc.b_0", "linear_1.w_0.asp_mask", "conv2d_0.w_1", "fc_0.b_0", "fc_0", "fc",
         "my_fc_0.w_0", "conv3d_0.w_0", "fc_0.w_0_moment1_0", "fc_0.w_0@GRAD", "linear_10.w_0",
         "conv2d_transpose_0.w_0", "fc_0_0.w_0", "x.w_0"]
SUPPORTED = "TTFFTFFTFFTTTFFF"
SUPPORTED_EXCLUDING_FC_0 = "TTFFTFFTFFFFTFFF"


def test_supported_layers_are_paddles():
    prog = Program()
    answers = lambda: "".join("T" if ASPHelper._is_supported_layer(prog, n) else "F" for n in NAMES)  # noqa: E731
    assert answers() == SUPPORTED
    asp.set_excluded_layers(["fc_0"], prog)
    assert answers() == SUPPORTED_EXCLUDING_FC_0
    asp.reset_excluded_layers()
    assert answers() == SUPPORTED


def test_add_supported_layer_with_its_own_pruning():
    """A name added with its own pruning function: prune_model calls it with (weight, m, n, algo, name)."""
    calls = []

    def halve(weight, m, n, mask_algo, param_name):
        calls.append((param_name, m, n, mask_algo))
        return weight * 0.5, np.ones_like(weight)

    table = asp.supported_layer_list.supported_layers_and_prune_func_map
    main, startup = Program(), Program()
    with paddle.static.program_guard(main, startup), unique_name.guard():
        paddle.create_parameter([8, 4], "float32", name="my_block_0.w_0",
                                default_initializer=paddle.nn.initializer.Constant(3.0))
    assert not ASPHelper._is_supported_layer(main, "my_block_0.w_0")
    asp.add_supported_layer("my_block", halve)
    try:
        assert ASPHelper._is_supported_layer(main, "my_block_0.w_0")
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            paddle.static.Executor().run(startup)
            masks = asp.prune_model(main, n=1, m=2, mask_algo="mask_2d_best", with_mask=False)
        assert calls == [("my_block_0.w_0", 2, 1, MaskAlgo.MASK_2D_BEST)]
        np.testing.assert_array_equal(np.array(scope.find_var("my_block_0.w_0").get_tensor()), np.full((8, 4), 1.5))
        assert list(masks) == ["my_block_0.w_0"]
        from refimpl.nn.layer.layers import Layer

        class MyOwnLayer(Layer):
            pass
        asp.add_supported_layer(MyOwnLayer)
        assert table["my_own_layer"] is asp.supported_layer_list._default_pruning
    finally:
        table.pop("my_block", None)
        table.pop("my_own_layer", None)
    with pytest.raises(InvalidArgument, match="add_supported_layer"):
        asp.add_supported_layer(3)
