"""Chapter 1: the vanilla RNN and the norms of its hidden-state Jacobians."""
import numpy as np
import pytest
import torch

from solutions import additive_attention, hidden_state_jacobian_norms, rnn_forward


def random_rnn(T=6, d_in=3, d_h=4, scale=0.5, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(T, d_in)),
        rng.normal(size=d_h),
        rng.normal(size=(d_in, d_h)),
        rng.normal(size=(d_h, d_h)) * scale,
        rng.normal(size=d_h),
    )


def test_rnn_forward_matches_torch_rnn():
    x, h0, W_xh, W_hh, b_h = random_rnn()
    H = rnn_forward(x, h0, W_xh, W_hh, b_h)
    rnn = torch.nn.RNN(3, 4, nonlinearity="tanh", batch_first=True).double()
    with torch.no_grad():  # torch uses column vectors: W_ih = W_xhᵀ; one bias is enough
        rnn.weight_ih_l0.copy_(torch.tensor(W_xh.T))
        rnn.weight_hh_l0.copy_(torch.tensor(W_hh.T))
        rnn.bias_ih_l0.copy_(torch.tensor(b_h))
        rnn.bias_hh_l0.zero_()
    expected, _ = rnn(torch.tensor(x)[None], torch.tensor(h0)[None, None])
    np.testing.assert_allclose(H, expected[0].detach().numpy(), rtol=1e-12, atol=1e-12)


def test_rnn_first_step_by_hand():
    x = np.array([[1.0, 2.0]])
    H = rnn_forward(x, np.array([0.5]), np.array([[0.1], [0.2]]), np.array([[2.0]]), np.array([-0.3]))
    np.testing.assert_allclose(H, [[np.tanh(0.1 + 0.4 + 1.0 - 0.3)]])


@pytest.mark.parametrize(
    "shapes",
    [
        [(5,), (4,), (3, 4), (4, 4), (4,)],
        [(5, 3), (4,), (2, 4), (4, 4), (4,)],
        [(5, 3), (4,), (3, 4), (4, 3), (4,)],
        [(5, 3), (4, 1), (3, 4), (4, 4), (4,)],
        [(5, 3), (4,), (3, 4), (4, 4), (3,)],
    ],
)
def test_rnn_forward_shape_errors(shapes):
    with pytest.raises(ValueError, match="expected|x must"):
        rnn_forward(*(np.zeros(s) for s in shapes))


def autograd_jacobian_norms(x, h0, W_xh, W_hh, b_h):
    """‖∂h_{T-1}/∂h_t‖₂ by re-running the recurrence from h_t under torch autograd."""
    H = rnn_forward(x, h0, W_xh, W_hh, b_h)
    T = len(x)
    tensors = [torch.tensor(a) for a in (x, W_xh, W_hh, b_h)]
    xt, W_xh_t, W_hh_t, b_t = tensors

    def last_state_from(t):
        def run(h):
            for k in range(t + 1, T):
                h = torch.tanh(xt[k] @ W_xh_t + h @ W_hh_t + b_t)
            return h

        return run

    return [
        torch.linalg.matrix_norm(torch.autograd.functional.jacobian(last_state_from(t), torch.tensor(H[t])), ord=2).item()
        for t in range(T)
    ]


@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_jacobian_norms_match_autograd(scale):
    x, h0, W_xh, W_hh, b_h = random_rnn(T=7, scale=scale, seed=1)
    norms = hidden_state_jacobian_norms(rnn_forward(x, h0, W_xh, W_hh, b_h), W_hh)
    assert norms.shape == (7,) and norms[-1] == 1.0
    np.testing.assert_allclose(norms, autograd_jacobian_norms(x, h0, W_xh, W_hh, b_h), rtol=1e-10)


def test_small_recurrent_weights_make_gradients_vanish():
    x, h0, W_xh, W_hh, b_h = random_rnn(T=30, scale=0.2, seed=2)
    norms = hidden_state_jacobian_norms(rnn_forward(x, h0, W_xh, W_hh, b_h), W_hh)
    assert norms[0] < 1e-6 < norms[-1]


def test_jacobian_norms_shape_error():
    with pytest.raises(ValueError, match="W_hh"):
        hidden_state_jacobian_norms(np.zeros((5, 4)), np.zeros((3, 3)))


def test_additive_attention_weights_and_context():
    rng = np.random.default_rng(3)
    s, H = rng.normal(size=3), rng.normal(size=(5, 4))
    W_s, W_h, v = rng.normal(size=(3, 6)), rng.normal(size=(4, 6)), rng.normal(size=6)
    context, weights = additive_attention(s, H, W_s, W_h, v)
    energies = np.array([v @ np.tanh(s @ W_s + H[j] @ W_h) for j in range(5)])
    expected = np.exp(energies) / np.exp(energies).sum()
    np.testing.assert_allclose(weights, expected, rtol=1e-12)
    np.testing.assert_allclose(context, expected @ H, rtol=1e-12)
