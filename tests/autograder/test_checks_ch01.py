"""Tests of the chapter 1 checks: plausible wrong answers are rejected with a hint
that names the mistake, valid answers in other styles earn full marks, half-right
answers earn the parts they get right (that the reference passes and hidden inputs are
fresh: test_checks_registry.py)."""
import functools
import itertools

import numpy as np
import pytest
import torch

import check_helpers
from check_helpers import accepted, stub_says_not_implemented

# One intra-op thread (conftest's fixture; importing check_helpers does not activate its own):
# tiny tensors, and a second thread only spins against the other xdist worker.
pytestmark = pytest.mark.usefixtures("one_torch_thread")

NAMES = ["rnn_forward", "hidden_state_jacobian_norms"]

rejected = functools.partial(check_helpers.rejected, seed=3)
partly = functools.partial(check_helpers.partly, seed=3)


@pytest.mark.parametrize("name", NAMES)
def test_stub_says_not_implemented(name):
    stub_says_not_implemented(name)


# --------------------------------------------------------------------------- rnn_forward


def _rnn(x, h0, W_xh, W_hh, b_h, start=None, transpose=False, last_only=False, with_h0=False):
    h = np.asarray(h0, dtype=float) if start is None else start
    W = W_hh.T if transpose else W_hh
    states = [h0] if with_h0 else []
    for t in range(len(x)):
        h = np.tanh(x[t] @ W_xh + h @ W + b_h)
        states.append(h)
    return h if last_only else np.array(states)


def test_rnn_forward_from_zeros_is_rejected():
    rejected("rnn_forward", lambda x, h0, W_xh, W_hh, b_h: _rnn(x, h0, W_xh, W_hh, b_h, start=np.zeros(len(h0))),
             "started from zeros", "h0")


def test_rnn_forward_with_transposed_recurrence_is_rejected():
    rejected("rnn_forward", lambda *a: _rnn(*a, transpose=True), "W_hh transposed")


def test_rnn_forward_returning_the_last_state_is_rejected():
    rejected("rnn_forward", lambda *a: _rnn(*a, last_only=True), "only the last state")


def test_rnn_forward_with_h0_as_first_row_is_rejected():
    rejected("rnn_forward", lambda *a: _rnn(*a, with_h0=True), "T rows, not T + 1")


def test_rnn_forward_without_tanh_is_rejected():
    def linear_rnn(x, h0, W_xh, W_hh, b_h):
        h, out = h0, []
        for t in range(len(x)):
            h = x[t] @ W_xh + h @ W_hh + b_h
            out.append(h)
        return np.array(out)

    rejected("rnn_forward", linear_rnn, "tanh is missing")


def test_rnn_forward_without_shape_validation_earns_full_marks_with_advice():
    def unchecked(x, h0, W_xh, W_hh, b_h):
        d = min(W_xh.shape[0], x.shape[1])  # silently crops instead of raising: not graded
        return _rnn(x[:, :d], h0, W_xh[:d], W_hh, b_h)

    report = accepted("rnn_forward", unchecked)
    assert any("the reference raises ValueError" in a and "yours returned normally" in a for a in report.advice)


def test_rnn_forward_that_lets_numpy_raise_on_a_bad_shape_earns_full_marks():
    def by_accumulate(x, h0, W_xh, W_hh, b_h):
        step = lambda h, x_t: np.tanh(x_t @ W_xh + h @ W_hh + b_h)  # noqa: E731
        return np.stack(list(itertools.accumulate(x, step, initial=h0))[1:])

    report = accepted("rnn_forward", by_accumulate)
    assert report.advice == [] and report.notes == []


def test_rnn_forward_with_column_vectors_earns_full_marks():
    def column_vectors(x, h0, W_xh, W_hh, b_h):
        h = h0.reshape(-1, 1)  # (d_h, 1)
        states = []
        for x_t in x:
            h = np.tanh(W_xh.T @ x_t.reshape(-1, 1) + W_hh.T @ h + b_h.reshape(-1, 1))  # (d_h, 1)
            states.append(h[:, 0])
        return np.array(states)

    accepted("rnn_forward", column_vectors)


def test_rnn_forward_in_torch_float64_earns_full_marks():
    def in_torch(x, h0, W_xh, W_hh, b_h):
        x, h, W_xh, W_hh, b_h = (torch.as_tensor(a, dtype=torch.float64) for a in (x, h0, W_xh, W_hh, b_h))
        H = torch.empty(x.shape[0], h.shape[0], dtype=torch.float64)
        for t in range(x.shape[0]):
            h = torch.tanh(x[t] @ W_xh + h @ W_hh + b_h)
            H[t] = h
        return H.numpy()

    accepted("rnn_forward", in_torch)


def test_rnn_forward_restarting_every_step_from_h0_earns_the_first_step_only():
    partly("rnn_forward", lambda x, h0, W_xh, W_hh, b_h: np.tanh(x @ W_xh + h0 @ W_hh + b_h),
           ["every state, H (T, d_h)", "first step from h0"], ["recurrence over T steps"], "restarted from h0")


def test_rnn_forward_with_transposed_recurrence_earns_the_shape_part():
    partly("rnn_forward", lambda *a: _rnn(*a, transpose=True), ["every state, H (T, d_h)"],
           ["first step from h0", "recurrence over T steps"], "W_hh transposed")


def test_a_different_valid_rnn_forward_passes():
    def rnn_precomputed(x, h0, W_xh, W_hh, b_h):
        inputs = np.asarray(x) @ W_xh + b_h  # (T, d_h): the input part, all steps at once
        H = np.empty_like(inputs)
        h = h0
        for t, row in enumerate(inputs):
            h = np.tanh(row + h @ W_hh)
            H[t] = h
        return H

    accepted("rnn_forward", rnn_precomputed)


# --------------------------------------------------------------------------- hidden_state_jacobian_norms


def _norms(H, W_hh, ord=2, derivative=True, reverse=False, transpose=True):
    T, d = H.shape
    if W_hh.shape != (d, d):
        raise ValueError("shapes")
    norms, product = [1.0], np.eye(d)
    W = W_hh.T if transpose else W_hh
    for t in range(T - 2, -1, -1):
        J = ((1 - H[t + 1] ** 2)[:, None] if derivative else 1.0) * W
        product = product @ J
        norms.append(np.linalg.norm(product, ord=ord))
    norms = np.array(norms[::-1])
    return norms[::-1] if reverse else norms


def test_jacobian_norms_in_the_wrong_order_are_rejected():
    rejected("hidden_state_jacobian_norms", lambda H, W: _norms(H, W, reverse=True), "wrong order")


def test_jacobian_frobenius_norms_are_rejected():
    rejected("hidden_state_jacobian_norms", lambda H, W: _norms(H, W, ord="fro"), "Frobenius", "ord=2")


def test_jacobian_without_tanh_derivative_is_rejected():
    rejected("hidden_state_jacobian_norms", lambda H, W: _norms(H, W, derivative=False), "tanh derivative")


def test_jacobian_with_untransposed_weights_is_rejected():
    rejected("hidden_state_jacobian_norms", lambda H, W: _norms(H, W, transpose=False), "not transposed")


def test_a_different_valid_jacobian_norms_passes():
    def by_singular_values(H, W_hh):
        H, W_hh = np.asarray(H), np.asarray(W_hh)
        if W_hh.shape != (H.shape[1], H.shape[1]):
            raise ValueError("W_hh must be (d_h, d_h)")
        T = len(H)
        out = np.ones(T)
        for t in range(T - 1):
            M = np.eye(H.shape[1])
            for k in range(T - 1, t, -1):  # J_{T-1} ... J_{t+1}, built from the left
                M = M @ (np.diag(1 - H[k] ** 2) @ W_hh.T)
            out[t] = np.linalg.svd(M, compute_uv=False)[0]
        return out

    accepted("hidden_state_jacobian_norms", by_singular_values)


def test_jacobian_norms_by_einsum_and_batched_svd_earn_full_marks():
    def batched(H, W_hh):
        T, d = H.shape
        J = np.einsum("ki,ji->kij", 1 - H[1:] ** 2, W_hh)  # (T-1, d, d): J_k for k = 1 .. T-1
        products, P = [np.eye(d)], np.eye(d)
        for k in range(T - 2, -1, -1):
            P = P @ J[k]  # J_{T-1} @ ... @ J_{k+1}
            products.append(P)
        return np.linalg.svd(np.stack(products[::-1]), compute_uv=False)[:, 0]  # no shape check: not graded

    report = accepted("hidden_state_jacobian_norms", batched)
    assert report.notes == []


def test_jacobian_norms_from_the_eigenvalues_of_the_transposed_product_earn_full_marks():
    def by_eigenvalues(H, W_hh):
        T, d = H.shape
        norms, P = np.ones(T), np.eye(d)  # P^T = J_{t+1}^T ... J_{T-1}^T, the same singular values
        for t in range(T - 2, -1, -1):
            P = P @ (np.diag(1 - H[t + 1] ** 2) @ W_hh.T)
            norms[t] = np.sqrt(np.linalg.eigvalsh(P.T @ P).max())
        return norms

    accepted("hidden_state_jacobian_norms", by_eigenvalues)


def test_jacobian_norms_multiplied_in_the_wrong_order_earn_the_one_step_part():
    def left_to_right(H, W_hh):
        T, d = H.shape
        norms, P = np.ones(T), np.eye(d)
        for t in range(T - 2, -1, -1):
            P = (np.diag(1 - H[t + 1] ** 2) @ W_hh.T) @ P  # the earliest step on the left
            norms[t] = np.linalg.norm(P, ord=2)
        return norms

    partly("hidden_state_jacobian_norms", left_to_right, ["T norms, norms[T-1] = 1", "one step back, ‖J_{T-1}‖"],
           ["products back through time"], "wrong order", "latest step on the left")


def test_jacobian_frobenius_norms_earn_the_shape_part():
    partly("hidden_state_jacobian_norms", lambda H, W: _norms(H, W, ord="fro"), ["T norms, norms[T-1] = 1"],
           ["one step back, ‖J_{T-1}‖", "products back through time"], "Frobenius")
