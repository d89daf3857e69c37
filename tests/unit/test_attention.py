"""Chapter 4: numpy softmax and scaled dot-product attention."""
import math

import numpy as np
import pytest

from solutions import scaled_dot_product_attention, self_attention, softmax


def reference_attention(q, k, v):
    """Attention one query at a time with explicit loops, as a check on the vectorised code."""
    n_q, n_k = q.shape[0], k.shape[0]
    weights = np.zeros((n_q, n_k))
    for i in range(n_q):
        scores = [q[i] @ k[j] / math.sqrt(q.shape[1]) for j in range(n_k)]
        exp = [math.exp(s - max(scores)) for s in scores]
        weights[i] = [e / sum(exp) for e in exp]
    return weights @ v, weights


def test_softmax_rows_sum_to_one_and_match_definition():
    x = np.random.randn(4, 7)
    p = softmax(x)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(p, np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True), rtol=1e-12)


def test_softmax_other_axis():
    x = np.random.randn(3, 5)
    np.testing.assert_allclose(softmax(x, axis=0), softmax(x.T, axis=-1).T, rtol=1e-12)


def test_softmax_does_not_overflow_at_1e4():
    with np.errstate(over="raise", invalid="raise"):
        p = softmax(np.array([1e4, 1e4 - 1.0, -1e4]))
    np.testing.assert_allclose(p, [1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1)), 0.0], atol=1e-12)


def test_softmax_keeps_float32_and_converts_ints():
    assert softmax(np.ones(3, dtype=np.float32)).dtype == np.float32
    np.testing.assert_allclose(softmax([1, 1]), [0.5, 0.5])


def test_softmax_rejects_scalar():
    with pytest.raises(ValueError, match="at least one axis"):
        softmax(3.0)


def test_thinking_machines_numbers():
    """The paper's worked example in the lecture notes: scores 112 and 96, d_k = 64."""
    d_k = 64
    q = np.zeros((1, d_k))
    q[0, 0] = 1.0
    k = np.zeros((2, d_k))
    k[0, 0], k[1, 0] = 112.0, 96.0  # q·k_1 = 112, q·k_2 = 96
    v = np.eye(2, 3)
    output, weights = scaled_dot_product_attention(q, k, v)
    scaled = np.array([112.0, 96.0]) / math.sqrt(d_k)
    np.testing.assert_allclose(scaled, [14.0, 12.0])
    np.testing.assert_allclose(weights[0], [0.88, 0.12], atol=0.005)
    np.testing.assert_allclose(weights[0], softmax(scaled), rtol=1e-12)
    np.testing.assert_allclose(output, weights @ v)


def test_matches_loop_reference_with_different_lengths():
    q, k, v = np.random.randn(3, 4), np.random.randn(5, 4), np.random.randn(5, 6)
    output, weights = scaled_dot_product_attention(q, k, v)
    expected_output, expected_weights = reference_attention(q, k, v)
    assert output.shape == (3, 6) and weights.shape == (3, 5)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-10)
    np.testing.assert_allclose(output, expected_output, rtol=1e-10)


def test_leading_batch_dimensions():
    q, k, v = np.random.randn(2, 3, 4, 8), np.random.randn(2, 3, 6, 8), np.random.randn(2, 3, 6, 5)
    output, weights = scaled_dot_product_attention(q, k, v)
    assert output.shape == (2, 3, 4, 5) and weights.shape == (2, 3, 4, 6)
    for b in range(2):
        for h in range(3):
            expected_output, expected_weights = reference_attention(q[b, h], k[b, h], v[b, h])
            np.testing.assert_allclose(weights[b, h], expected_weights, rtol=1e-10)
            np.testing.assert_allclose(output[b, h], expected_output, rtol=1e-10)


@pytest.mark.parametrize(
    "shapes, message",
    [
        (((3, 4), (5, 3), (5, 6)), "d_k"),
        (((3, 4), (5, 4), (4, 6)), "n_k"),
        (((4,), (5, 4), (5, 6)), "at least 2 dimensions"),
    ],
)
def test_attention_shape_errors(shapes, message):
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(*(np.zeros(s) for s in shapes))


def test_self_attention_projects_then_attends():
    x = np.random.randn(5, 8)
    W_q, W_k, W_v = np.random.randn(8, 4), np.random.randn(8, 4), np.random.randn(8, 3)
    output, weights = self_attention(x, W_q, W_k, W_v)
    expected_output, expected_weights = reference_attention(x @ W_q, x @ W_k, x @ W_v)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-10)
    np.testing.assert_allclose(output, expected_output, rtol=1e-10)


def test_self_attention_is_permutation_equivariant():
    x = np.random.randn(6, 8)
    W_q, W_k, W_v = (np.random.randn(8, 8) for _ in range(3))
    perm = np.random.permutation(6)
    output, _ = self_attention(x, W_q, W_k, W_v)
    permuted, _ = self_attention(x[perm], W_q, W_k, W_v)
    np.testing.assert_allclose(permuted, output[perm], rtol=1e-10)


def test_self_attention_rejects_wrong_projection():
    with pytest.raises(ValueError, match="W_k"):
        self_attention(np.zeros((3, 8)), np.zeros((8, 4)), np.zeros((7, 4)), np.zeros((8, 4)))
