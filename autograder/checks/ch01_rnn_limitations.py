"""Checks of chapter 1, why not RNNs (numpy): ``rnn_forward`` and
``hidden_state_jacobian_norms``.

The contract is ``shared/EXERCISES.md`` section 1; the references are in
``solutions/rnn.py`` ("Attention Is All You Need", sections 1 and 4).

Parts (what each exercise teaches; the points are split over them):

* ``rnn_forward``: "every state, H (T, d_h)" 1 · "first step from h0" 1 ·
  "recurrence over T steps" 2;
* ``hidden_state_jacobian_norms``: "T norms, norms[T-1] = 1" 1 ·
  "one step back, ‖J_{T-1}‖" 1 · "products back through time" 2.

A shape mismatch between the arguments is advice: the contract names no error here.
Neither exercise calls the other (the Jacobian norms take the states ``H``).

Every ``diagnose`` recomputes the plausible wrong answers from the case's own
inputs (starting from zeros instead of ``h0``, ``h @ W_hh.T``, only ``h_T``,
Frobenius instead of spectral norms, no tanh derivative, ...) and names the one
the result matches, so a hint is a measurement, not a guess.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .base import ADVICE, Case, Exercise, register
from .base import as_array as _array, close

CHAPTER = "01_rnn_limitations"

_close = functools.partial(close, rtol=1e-5, atol=1e-8)


# --------------------------------------------------------------------------- helpers


def _first_match(got, variants, want=None) -> str | None:
    """The name of the first variant (name -> array or None) equal to ``got``;
    a variant that coincides with the right answer ``want`` on this case names nothing."""
    for name, value in variants:
        if value is None or (want is not None and _close(value, want)):
            continue
        if _close(got, value):
            return name
    return None


def _rnn(x, h0, W_xh, W_hh, b_h, *, start=None, transpose=False, act=np.tanh, bias=True):
    """A trusted RNN with switches for the plausible mistakes."""
    h = np.asarray(h0, dtype=np.float64) if start is None else start
    W = W_hh.T if transpose else W_hh
    states = []
    for t in range(x.shape[0]):
        h = act(x[t] @ W_xh + h @ W + (b_h if bias else 0.0))  # (d_h,)
        states.append(h)
    return np.array(states).reshape(x.shape[0], -1)


def _jacobian_norms(H, W_hh, *, ord=2, derivative=True, transpose=True, same_step=False, order="right"):
    """Trusted ``‖∂h_{T-1}/∂h_t‖`` with switches for the plausible mistakes."""
    T, d_h = H.shape
    norms = np.zeros(T)
    norms[T - 1] = 1.0
    product = np.eye(d_h)
    W = W_hh.T if transpose else W_hh
    for t in range(T - 2, -1, -1):
        k = t if same_step else t + 1
        J = ((1 - H[k] ** 2)[:, None] if derivative else 1.0) * W  # J_k[i, j]
        product = product @ J if order == "right" else J @ product
        norms[t] = np.linalg.norm(product, ord=ord)
    return norms


# --------------------------------------------------------------------------- rnn_forward


def _rnn_inputs(rng, T, d_in, d_h, scale=1.0):
    x = rng.normal(size=(T, d_in))
    h0 = rng.uniform(-0.9, 0.9, size=d_h)
    W_xh = rng.normal(size=(d_in, d_h)) * scale / np.sqrt(d_in)
    W_hh = rng.normal(size=(d_h, d_h)) * scale / np.sqrt(d_h)
    b_h = rng.normal(size=d_h) * 0.5
    return x, h0, W_xh, W_hh, b_h


@register
class RnnForward(Exercise):
    """``rnn_forward(x, h0, W_xh, W_hh, b_h) -> H (T, d_h)``."""

    name = "rnn_forward"
    chapter = CHAPTER
    kind = "function"
    what = "every hidden state H (T, d_h): the first step from h0, the recurrence, saturated tanh, d_in ≠ d_h"

    parts = {"every state, H (T, d_h)": 1, "first step from h0": 1, "recurrence over T steps": 2}

    @staticmethod
    def _from_zero(args):
        """The inputs with h0 = 0: a recurrence case on which the first step's use of
        h0 (the part "first step from h0") cannot change the states."""
        x, h0, W_xh, W_hh, b_h = args
        return x, np.zeros_like(h0), W_xh, W_hh, b_h

    def cases(self, rng, hidden):
        shape, first, steps = self.parts
        x, h0, W_xh, W_hh, b_h = _rnn_inputs(rng, 5, 2, 3)
        cases = [
            Case(args=_rnn_inputs(rng, 5, 3, 2), label="T=5 steps, d_in=3, d_h=2: one row per step",
                 compare="structure", part=shape),
            Case(args=_rnn_inputs(rng, 1, 2, 3), label="a single step (T=1): H[0] = tanh(x0 W_xh + h0 W_hh + b_h)",
                 part=first),
            Case(args=self._from_zero(_rnn_inputs(rng, 4, 3, 2)), label="T=4 steps, d_in=3, d_h=2, h0 = 0",
                 return_args=(0, 1), part=steps),
            Case(args=self._from_zero(_rnn_inputs(rng, 6, 4, 4)), label="T=6, square weights d_in = d_h = 4, h0 = 0",
                 part=steps),
            Case(args=(x, h0, W_xh[:1], W_hh, b_h), label="W_xh has 1 row but d_in = 2", part=ADVICE,
                 expect_error=(ValueError, TypeError)),
        ]
        if not hidden:
            return cases
        for _ in range(2):
            T, d_in, d_h = int(rng.integers(2, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
            cases.append(Case(args=_rnn_inputs(rng, T, d_in, d_h), compare="structure", part=shape,
                              label=f"random shapes T={T}, d_in={d_in}, d_h={d_h}: one row per step"))
        for _ in range(2):
            d_in, d_h = int(rng.integers(1, 9)), int(rng.integers(1, 9))
            cases.append(Case(args=_rnn_inputs(rng, 1, d_in, d_h), part=first,
                              label=f"a single step, d_in={d_in}, d_h={d_h}"))
        for _ in range(4):
            T, d_in, d_h = int(rng.integers(2, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
            cases.append(Case(args=self._from_zero(_rnn_inputs(rng, T, d_in, d_h)), part=steps,
                              label=f"random shapes T={T}, d_in={d_in}, d_h={d_h}, h0 = 0", return_args=(0, 1)))
        cases.append(Case(args=self._from_zero(_rnn_inputs(rng, 12, 3, 5, scale=4.0)), part=steps,
                          label="large weights: tanh saturates near ±1"))
        return cases

    def tolerated(self, case, want):
        """The cases of "first step from h0" and "recurrence over T steps" accept the
        right states laid out against the rule of "every state, H (T, d_h)", which
        states which states H holds: h0 kept as row 0 (T + 1 rows) or the last state
        alone (shape (d_h,)). The states' values, those parts' own rules, are held."""
        _, first, steps = self.parts
        w = _array(want.value)
        if self.part_of(case) not in (first, steps) or w is None or w.ndim != 2 or case.expect_error:
            return []
        h0 = np.asarray(case.args[1], dtype=w.dtype)
        return [dataclasses.replace(want, value=np.vstack([h0[None], w])),
                dataclasses.replace(want, value=w[-1].copy())]

    def raised_hint(self, case, got):
        raised = got.raised
        if raised is None or case.expect_error:
            return None
        if "matmul" in raised["message"] or "shapes" in raised["message"]:
            return ("row vectors: x[t] @ W_xh is (d_in,) @ (d_in, d_h) and h @ W_hh is (d_h,) @ (d_h, d_h); "
                    "do not transpose the weights or multiply W @ x.")
        return None

    def diagnose(self, case, got, want):
        for index, after in got.args_after.items():
            if not _close(_array(after), case.args[int(index)], rtol=0, atol=0):
                return "you changed an input array in place: write the states into a new array."
        g = _array(got.value)
        if g is None:
            return "return one numpy array H of shape (T, d_h), one row per time step."
        x, h0, W_xh, W_hh, b_h = (np.asarray(a, dtype=np.float64) for a in case.args)
        T, d_h = x.shape[0], h0.shape[0]
        full = _rnn(x, h0, W_xh, W_hh, b_h)
        if g.shape == (d_h,) and _close(g, full[-1]):
            return "you returned only the last state h_T: return every state, H of shape (T, d_h)."
        if g.shape == (T + 1, d_h) and _close(g[1:], full):
            return "H has h0 as its first row: H[t] is the state after step t, so H has T rows, not T + 1."
        if g.shape == (T, d_h) and T > 1 and _close(g[1:], full[:-1]):
            return "H is shifted by one step: H[t] must be the state after reading x[t], not before."
        variants = [
            ("you started from zeros: the first step uses h_{-1} = h0, the argument.",
             _rnn(x, h0, W_xh, W_hh, b_h, start=np.zeros(d_h))),
            ("you used W_hh transposed (W_hh @ h or h @ W_hh.T): with row vectors the recurrence is "
             "h_{t-1} @ W_hh.", _rnn(x, h0, W_xh, W_hh, b_h, transpose=True)),
            ("the tanh is missing: h_t = tanh(x_t @ W_xh + h_{t-1} @ W_hh + b_h).",
             _rnn(x, h0, W_xh, W_hh, b_h, act=lambda z: z)),
            ("the bias b_h is missing.", _rnn(x, h0, W_xh, W_hh, b_h, bias=False)),
            ("you used ReLU; the vanilla RNN of the chapter uses tanh.",
             _rnn(x, h0, W_xh, W_hh, b_h, act=lambda z: np.maximum(z, 0.0))),
            ("every step restarted from h0: carry h_{t-1}, the previous step's state, forward.",
             np.tanh(x @ W_xh + h0 @ W_hh + b_h)),
        ]
        return _first_match(g, variants, full)


# --------------------------------------------------------------------------- hidden_state_jacobian_norms


def _jacobian_inputs(rng, T, d_h, scale):
    x, h0, W_xh, W_hh, b_h = _rnn_inputs(rng, T, int(rng.integers(1, 4)), d_h, scale=scale)
    return _rnn(x, h0, W_xh, W_hh, b_h), W_hh


# The mistakes in one Jacobian J_k[i, j] = (1 - H[k, i]²) W_hh[j, i] (switches of
# _jacobian_norms): "one step back, ‖J_{T-1}‖" states that formula. The spectral norm is
# a rule of every norm, which both parts state: the Frobenius norm costs both.
_ONE_JACOBIAN_MISTAKES = (dict(derivative=False), dict(transpose=False), dict(same_step=True))


@register
class HiddenStateJacobianNorms(Exercise):
    """``hidden_state_jacobian_norms(H, W_hh) -> norms (T,)``."""

    name = "hidden_state_jacobian_norms"
    chapter = CHAPTER
    kind = "function"
    what = ("spectral norms of ∂h_{T-1}/∂h_t for every t: norms[T-1] = 1, one Jacobian, products that vanish "
            "or explode")

    parts = {"T norms, norms[T-1] = 1": 1, "one step back, ‖J_{T-1}‖": 1, "products back through time": 2}

    def cases(self, rng, hidden):
        last, one_step, products = self.parts
        H, _ = _jacobian_inputs(rng, 4, 3, 1.0)
        cases = [
            Case(args=_jacobian_inputs(rng, 5, 3, 1.0), label="T=5 states of width 3: one norm per state",
                 compare="structure", part=last),
            Case(args=_jacobian_inputs(rng, 1, 2, 1.0), label="a single state (T=1): norms = [1.0]", part=last),
            # W_hh = 0: every Jacobian is 0 whatever its formula, so this case decides where
            # the identity's 1 goes (norms[T-1]) and no rule of the other parts
            Case(args=(_jacobian_inputs(rng, 4, 3, 1.0)[0], np.zeros((3, 3))),
                 label="W_hh = 0 (T=4): every Jacobian is 0, norms = [0, 0, 0, 1]", part=last),
            Case(args=_jacobian_inputs(rng, 2, 3, 1.0), label="T=2: norms[0] = ‖J_1‖, one Jacobian",
                 part=one_step),
            Case(args=_jacobian_inputs(rng, 5, 3, 1.0), label="T=5 states of width 3", return_args=(0, 1),
                 part=products),
            Case(args=_jacobian_inputs(rng, 8, 4, 0.5), label="small W_hh (T=8): the norms vanish as t moves back",
                 rtol=1e-5, atol=1e-12, part=products),
            Case(args=(H, np.zeros((4, 4))), label="W_hh is 4x4 but the states have width 3", part=ADVICE,
                 expect_error=(ValueError, TypeError)),
        ]
        if not hidden:
            return cases
        for _ in range(2):
            T, d_h = int(rng.integers(1, 12)), int(rng.integers(1, 7))
            cases.append(Case(args=_jacobian_inputs(rng, T, d_h, 1.0), part=last, compare="structure",
                              label=f"random T={T}, d_h={d_h}: one norm per state"))
            cases.append(Case(args=_jacobian_inputs(rng, 2, d_h, float(rng.choice([0.5, 2.0]))), part=one_step,
                              label=f"T=2, d_h={d_h}: one Jacobian"))
        for _ in range(4):
            T, d_h = int(rng.integers(3, 12)), int(rng.integers(1, 7))
            scale = float(rng.choice([0.5, 1.0, 2.0]))
            cases.append(Case(args=_jacobian_inputs(rng, T, d_h, scale), rtol=1e-5, atol=1e-12, part=products,
                              label=f"random T={T}, d_h={d_h}, weight scale {scale}"))
        # An orthogonal W_hh scaled up with small inputs: tanh stays near linear and
        # the norms explode backwards.
        d_h = 4
        Q, _ = np.linalg.qr(rng.normal(size=(d_h, d_h)))
        H = np.tanh(rng.normal(size=(10, d_h)) * 0.05)
        cases.append(Case(args=(H, 1.5 * Q), label="W_hh = 1.5 × orthogonal, small states: the norms explode",
                          part=products))
        return cases

    def tolerated(self, case, want):
        """The cases of "one step back" and "products back through time" accept the
        right norms without norms[T-1] (T - 1 of them) or in reverse order (the
        identity's 1 first): how many norms there are and where the 1 goes is the rule
        of "T norms, norms[T-1] = 1", which states it (its W_hh = 0 case decides it)."""
        _, one_step, products = self.parts
        w = _array(want.value)
        if self.part_of(case) not in (one_step, products) or w is None or w.shape[0] < 2 or case.expect_error:
            return []
        accepted = [w[:-1].copy(), w[::-1].copy()]
        if self.part_of(case) == products:
            # One Jacobian's formula (the tanh derivative, where it is taken, W_hh's
            # transpose) is the rule of "one step back", which states it: the products'
            # cases accept each of them broken.
            H, W_hh = (np.asarray(a, dtype=np.float64) for a in case.args)
            accepted += [_jacobian_norms(H, W_hh, **flags) for flags in _ONE_JACOBIAN_MISTAKES]
        return [dataclasses.replace(want, value=value) for value in accepted]

    def diagnose(self, case, got, want):
        g = _array(got.value)
        if g is None:
            return "return one numpy array of shape (T,)."
        H, W_hh = (np.asarray(a, dtype=np.float64) for a in case.args)
        T = H.shape[0]
        right = _jacobian_norms(H, W_hh)
        if g.shape == (T - 1,) and _close(g, right[:-1]):
            return "norms[T-1] is missing: ∂h_{T-1}/∂h_{T-1} is the identity, whose norm is 1; return T norms."
        if g.shape != (T,):
            return f"return one norm per state: shape ({T},)."
        if _close(g[::-1], right) and not _close(g, right):
            return ("the norms are in the wrong order: norms[t] belongs to ∂h_{T-1}/∂h_t, so norms[T-1] = 1 "
                    "and the distance to the last state grows as t goes down.")
        variants = [
            ("you used the Frobenius norm (np.linalg.norm's default for a matrix): the spectral norm is "
             "np.linalg.norm(M, ord=2), the largest singular value.", _jacobian_norms(H, W_hh, ord="fro")),
            ("the tanh derivative is missing: J_k[i, j] = (1 - H[k, i]**2) * W_hh[j, i].",
             _jacobian_norms(H, W_hh, derivative=False)),
            ("W_hh is not transposed in the Jacobian: with row vectors J_k[i, j] = (1 - H[k, i]**2) * W_hh[j, i], "
             "i.e. diag(1 - h_k**2) @ W_hh.T.", _jacobian_norms(H, W_hh, transpose=False)),
            ("the tanh derivative is taken at the wrong step: ∂h_k/∂h_{k-1} uses 1 - H[k]**2, the state it "
             "produces, not H[k-1].", _jacobian_norms(H, W_hh, same_step=True)),
            ("the Jacobians are multiplied in the wrong order: ∂h_{T-1}/∂h_t = J_{T-1} @ ... @ J_{t+1}, "
             "the latest step on the left.", _jacobian_norms(H, W_hh, order="left")),
        ]
        # norms[T-1] is 1 however the others were computed: compare the rest.
        hint = _first_match(g[:-1], [(n, v[:-1]) for n, v in variants], right[:-1]) if T > 1 else None
        if hint:
            return hint
        if not np.isclose(g[-1], 1.0):
            return "norms[T-1] must be 1: ∂h_{T-1}/∂h_{T-1} is the identity."
        return None
