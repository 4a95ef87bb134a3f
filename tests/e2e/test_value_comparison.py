"""The one value comparison (checks.disagreement: the boundary check, the verifier,
carry's check, the carry matrix's judge and `hiertag compare` use it) holds every
element to its own magnitude: garbage beside an attention mask's extreme values, a
sign flip in one element beside a large one, and a permuted tensor are all told
apart; equal masks, equal infinities and NaNs in the same places, and float32
rounding (another summation order, elements cancelling to near zero) agree."""

import numpy as np
import pytest

from hiertag import checks
from hiertag.verbs import compare

TOLERANCE = checks.FLOAT32_TOLERANCE
MASKED = np.finfo(np.float32).min


def masked_scores(rng, length=8):
    """Attention scores with HuggingFace's causal mask added: finfo(float32).min above
    the diagonal (the sum is that value there in float32)."""
    scores = rng.standard_normal((1, 2, length, length)).astype(np.float32)
    mask = np.triu(np.full((length, length), MASKED, dtype=np.float32), k=1)
    return scores + mask


def typical_element(array):
    """The index of an element of ordinary size: the one nearest the median magnitude."""
    magnitude = np.abs(array)
    return np.unravel_index(np.argmin(np.abs(magnitude - np.median(magnitude))), array.shape)


@pytest.mark.parametrize("garbage", ["uniform within 1000", "one percent off"])
def test_garbage_beside_a_mask_is_caught(garbage):
    rng = np.random.default_rng(0)
    expected = masked_scores(rng)
    unmasked = expected > MASKED
    garbled = expected.copy()
    if garbage == "uniform within 1000":
        garbled[unmasked] = rng.uniform(-1000, 1000, unmasked.sum()).astype(np.float32)
    else:
        garbled[unmasked] *= np.float32(1.01)
    assert checks.disagreement(garbled, expected) > TOLERANCE
    # Every caller: the boundary check claims no tensor for it, compare reports it above the tolerance.
    assert checks.assign_tensors({"scores": garbled}, [expected]) == {}
    assert compare.value_error(expected, garbled)[1] > TOLERANCE


def test_equal_masks_agree_and_rounding_beside_them_too():
    rng = np.random.default_rng(1)
    expected = masked_scores(rng)
    assert checks.disagreement(expected.copy(), expected) == 0.0
    rounded = expected.copy()
    unmasked = expected > MASKED
    rounded[unmasked] = np.nextafter(rounded[unmasked], np.float32(np.inf))  # one float32 step up
    assert 0.0 < checks.disagreement(rounded, expected) <= TOLERANCE
    assert checks.assign_tensors({"scores": rounded}, [expected]) == {"scores": 0}
    minus_infinity = np.where(unmasked, expected, -np.inf).astype(np.float32)
    assert checks.disagreement(minus_infinity.copy(), minus_infinity) == 0.0
    # A mask the other side does not have: an infinity where a finite value was.
    assert checks.disagreement(minus_infinity, expected) == float("inf")


@pytest.mark.parametrize("outlier", [False, True])
def test_a_sign_flip_in_one_element_is_caught(outlier):
    rng = np.random.default_rng(2)
    expected = rng.standard_normal((4, 64)).astype(np.float32)
    if outlier:  # a massive activation, as LLMs have: tens of thousands of times the rest
        expected[0, 0] = 3e4
    flipped = expected.copy()
    index = typical_element(expected)
    flipped[index] = -flipped[index]
    assert checks.disagreement(flipped, expected) > TOLERANCE
    assert checks.assign_tensors({"x": flipped}, [expected]) == {}


def test_a_permuted_tensor_is_caught():
    rng = np.random.default_rng(3)
    expected = rng.standard_normal((8, 16)).astype(np.float32)
    assert checks.disagreement(expected[rng.permutation(8)], expected) > TOLERANCE
    square = expected[:, :8]
    assert checks.disagreement(np.ascontiguousarray(square.T), square) > TOLERANCE


def test_float32_rounding_agrees_where_elements_cancel_to_near_zero():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 512))
    x[16:] -= x[16:].mean(axis=1, keepdims=True)  # rows summing to about 0: their sums are all rounding
    terms = x.astype(np.float32)
    pairwise = terms.sum(axis=1)  # numpy's pairwise summation
    sequential = np.cumsum(terms, axis=1)[:, -1]  # another order
    exact = terms.astype(np.float64).sum(axis=1)
    assert not np.array_equal(pairwise, sequential)
    # Relative to their own size alone, the near-zero sums are far apart: the floor is what lets them agree.
    assert (np.abs(pairwise - sequential) / np.abs(sequential))[16:].max() > TOLERANCE
    assert checks.disagreement(pairwise, sequential) <= TOLERANCE
    assert checks.disagreement(pairwise, exact) <= TOLERANCE
    weights = rng.standard_normal((512, 64)).astype(np.float32)
    product = terms @ weights
    assert checks.disagreement(product, terms.astype(np.float64) @ weights.astype(np.float64)) <= TOLERANCE


def test_nans_infinities_integers_and_shapes():
    nan = np.array([np.nan, 1.0, np.inf], dtype=np.float32)
    assert checks.disagreement(nan.copy(), nan) == 0.0
    assert checks.disagreement(np.array([0.0, 1.0, np.inf], dtype=np.float32), nan) == float("inf")
    assert checks.disagreement(np.array([np.nan, 1.0, -np.inf], dtype=np.float32), nan) == float("inf")
    assert checks.disagreement(np.arange(4), np.arange(4)) == 0.0
    assert checks.disagreement(np.arange(4), np.arange(4)[::-1]) == float("inf")
    assert checks.disagreement(np.zeros((2, 3)), np.zeros((3, 2))) == float("inf")


def test_median_tells_a_lower_precision_copy_from_another_models_output():
    """Check that most elements decide the median measure carry uses to refuse
    another model's output: int8-like rounding with one element far off stays
    below carry's bound, another model's output (same scale, other values) and
    a sign flip of everything do not."""
    from hiertag.verbs.carry import check as carry_check
    rng = np.random.default_rng(5)
    expected = rng.standard_normal((4, 256)).astype(np.float32)
    rounded = expected + rng.normal(0, 0.02, expected.shape).astype(np.float32)
    rounded[0, 0] = expected[0, 0] + 4.0  # one element rounded far off
    assert checks.disagreement(rounded, expected) > carry_check.UNRELATED
    assert checks.median_disagreement(rounded, expected) < 0.1
    other = rng.standard_normal((4, 256)).astype(np.float32)
    assert checks.median_disagreement(other, expected) > carry_check.UNRELATED
    assert checks.median_disagreement(-expected, expected) > carry_check.UNRELATED
    assert checks.median_disagreement(expected.copy(), expected) == 0.0
    assert checks.median_disagreement(expected[:, :8], expected) == float("inf")
