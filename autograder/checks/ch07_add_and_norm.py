"""Checks of chapter 7, Add & Norm and the feed-forward layer: ``layer_norm``,
``PositionwiseFeedForward``, ``ResidualSublayer`` and ``EncoderLayer``.

The contract is ``shared/EXERCISES.md`` section 7; the references are in
``solutions/layers.py`` ("Attention Is All You Need", sections 3.1 and 3.3).

Class cases carry a random ``state_dict`` drawn from the case's generator (pure
data, LayerNorm γ and β far from 1 and 0 so that every norm matters). The
diagnoses recompute the forward pass functionally from that state with one
plausible mistake at a time (unbiased variance, ε outside the square root, GELU,
pre- and post-norm swapped, no residual, norms swapped, the mask ignored or
inverted, ...) and name the one the result equals.

Each exercise's points are split over named parts (``parts``), and every case
belongs to one, so that a mistake costs the part it is about: a ``layer_norm`` case
accepts every way of breaking the rules of the *other* parts (the unbiased variance,
ε added to the standard deviation, γ and β swapped: :meth:`LayerNorm.tolerated`), so
the unbiased variance costs the normalisation part alone and ε's placement the ε part
alone; the feed-forward's dropout cases accept another activation (GELU, none:
:meth:`PositionwiseFeedForwardCheck.tolerated`), so a forgotten ReLU costs the first
part alone, and ``ResidualSublayer``'s dropout cases accept a broken post-norm formula
(:meth:`ResidualSublayerCheck.tolerated`); the class checks keep post-norm, pre-norm,
masks and dropout in separate cases. ``layer_norm``'s shape-mismatch case is advice: the contract names no error for
it. ``EncoderLayer`` may build on the student's ``PositionwiseFeedForward`` (and
``ResidualSublayer``): ``uses`` lets a wrong one be replaced by its reference (one
mistake charged once).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np

from .base import ADVICE, Case, Exercise, Obj, Tensor, load_state_hint, register
from .base import as_array as _array, close

CHAPTER = "07_add_and_norm"

layer_close = functools.partial(close, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- helpers


def match_variants(got, want, variants, rtol=1e-4, atol=1e-5):
    """The hint of the first variant equal to ``got`` that differs from ``want``."""
    for hint, value in variants:
        if value is None:
            continue
        value = value.detach().numpy() if hasattr(value, "detach") else value
        if layer_close(got, value, rtol=rtol, atol=atol) and not layer_close(value, want, rtol=rtol, atol=atol):
            return hint
    return None


def match_layer_variants(got, want, case, layer, variants):
    """The hint of the first mistake whose layer output equals ``got``.

    Args:
        got, want: the answer's and the reference's outputs, as numpy arrays.
        case: the case whose ``init``, ``state`` and inputs the layer is computed from.
        layer: the trusted layer with switches for the mistakes, called as
            ``layer(case, **flags)`` (:func:`encoder_layer_variant`).
        variants: ``(hint, flags)`` pairs, in the order they are tried; a variant
            that cannot be computed for this case (it raises) is left out.

    Returns:
        The hint (:func:`match_variants`), or ``None``.
    """
    computed = []
    for hint, flags in variants:
        try:
            computed.append((hint, layer(case, **flags)))
        except Exception:  # noqa: BLE001 - a variant that does not apply to this case
            continue
    return match_variants(got, want, computed)


def _linear_state(rng, prefix, d_in, d_out):
    bound = 1.0 / np.sqrt(d_in)
    return {
        f"{prefix}weight": rng.uniform(-bound, bound, size=(d_out, d_in)).astype(np.float32),
        f"{prefix}bias": rng.uniform(-bound, bound, size=(d_out,)).astype(np.float32),
    }


def norm_state(rng, prefix, d_model):
    return {
        f"{prefix}weight": (1.0 + 0.5 * rng.normal(size=d_model)).astype(np.float32),
        f"{prefix}bias": (0.5 * rng.normal(size=d_model)).astype(np.float32),
    }


def attention_state(rng, prefix, d_model):
    state = {}
    for name in ("w_q", "w_k", "w_v", "w_o"):
        state.update(_linear_state(rng, f"{prefix}{name}.", d_model, d_model))
    return state


def ffn_state(rng, prefix, d_model, d_ff):
    return {**_linear_state(rng, f"{prefix}linear1.", d_model, d_ff), **_linear_state(rng, f"{prefix}linear2.", d_ff, d_model)}


def _torch_state(state, prefix=""):
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    return {k[len(prefix):]: torch.from_numpy(np.asarray(v)) for k, v in state.items() if k.startswith(prefix)}


def reference_mha(state, prefix, d_model, num_heads):
    """The trusted multi-head attention of chapter 5 with the case's weights."""
    # the references when a case runs (trusted side only; they import torch)
    import solutions

    module = solutions.MultiHeadAttention(d_model, num_heads)
    module.load_state_dict(_torch_state(state, prefix))
    return module.eval()


def reference_layer_norm(state, prefix, x):
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch.nn.functional as F

    w = _torch_state(state, prefix)
    return F.layer_norm(x, x.shape[-1:], w["weight"], w["bias"])


def reference_ffn(state, prefix, x, activation="relu"):
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch.nn.functional as F

    w = _torch_state(state, prefix)
    act = {"relu": F.relu, "gelu": F.gelu, "none": lambda t: t}[activation]
    h = act(x @ w["linear1.weight"].T + w["linear1.bias"])
    return h @ w["linear2.weight"].T + w["linear2.bias"]


# The activation rules of the feed-forward's first part, as the ways it can be broken
# (:meth:`PositionwiseFeedForwardCheck.tolerated`): GELU, no activation, a ReLU after
# linear2 too. The dropout part's cases accept each, so a missing ReLU costs the
# feed-forward part alone.
_FFN_ACTIVATIONS = ("gelu", "none", "relu_after_too")


def ffn_activation_variant(state, x, d_model, d_ff, dropout, train, seed, activation):
    """The feed-forward of the case's state with the activation ``activation`` (one of
    :data:`_FFN_ACTIVATIONS`) and the reference's dropout: after the activation, drawn as
    the module's would be (``seed``, then the construction's draws), in training only.

    Returns a float32 array of ``x``'s shape."""
    # torch and the reference when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch
    import torch.nn.functional as F

    import solutions

    w = _torch_state(state)
    x = torch.from_numpy(np.asarray(x, dtype=np.float32))
    torch.manual_seed(seed)
    solutions.PositionwiseFeedForward(d_model, d_ff)  # the construction's draws, as in the runner
    with torch.no_grad():
        h = x @ w["linear1.weight"].T + w["linear1.bias"]
        h = {"gelu": F.gelu, "none": lambda t: t, "relu_after_too": F.relu}[activation](h)
        if train and dropout > 0:
            h = F.dropout(h, dropout)
        out = h @ w["linear2.weight"].T + w["linear2.bias"]
        return (F.relu(out) if activation == "relu_after_too" else out).numpy()


def encoder_layer_variant(case, *, swap_norms=False, flip_norm_first=False, residual=True, mask="right",
                          norm_residual=False, activation="relu"):
    """A trusted encoder layer computed from the case's state, with switches for the mistakes."""
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    init, state = case.init, case.state
    d_model, num_heads = init["d_model"], init["num_heads"]
    norm_first = bool(init.get("norm_first", False)) != flip_norm_first
    x = torch.from_numpy(_array(case.args[0]).astype(np.float32))
    m = case.kwargs.get("src_mask", case.args[1] if len(case.args) > 1 else None)
    m = None if m is None or mask == "ignored" else torch.from_numpy(_array(m))
    if m is not None and mask == "inverted":
        m = ~m
    attn = reference_mha(state, "self_attn.", d_model, num_heads)
    n1, n2 = ("norm2.", "norm1.") if swap_norms else ("norm1.", "norm2.")
    keep = 1.0 if residual else 0.0
    with torch.no_grad():
        if norm_first:
            h = reference_layer_norm(state, n1, x)
            x = (h if norm_residual else x) * keep + attn(h, h, h, m)
            h = reference_layer_norm(state, n2, x)
            x = (h if norm_residual else x) * keep + reference_ffn(state, "feed_forward.", h, activation)
        else:
            x = reference_layer_norm(state, n1, x * keep + attn(x, x, x, m))
            x = reference_layer_norm(state, n2, x * keep + reference_ffn(state, "feed_forward.", x, activation))
    return x


# --------------------------------------------------------------------------- layer_norm


def _ln_variant(x, gamma, beta, eps, *, ddof=0, eps_outside=False, axis=-1, affine="right"):
    mean = x.mean(axis=axis, keepdims=True)
    var = x.var(axis=axis, keepdims=True, ddof=ddof)
    z = (x - mean) / (np.sqrt(var) + eps if eps_outside else np.sqrt(var + eps))
    if affine == "swapped":
        return z * beta + gamma
    if affine == "none":
        return z
    if affine == "scale_only":
        return z * gamma
    if affine == "shift_only":
        return z + beta
    return z * gamma + beta


# The rules of ``layer_norm``'s parts, as the ways each can be broken: the variance
# (the normalisation part), where ε goes (the ε part), how γ and β are applied (the
# γ and β part). A case of one part accepts every way of breaking the *other* parts'
# rules (:meth:`LayerNorm.tolerated`): an answer with the unbiased variance keeps the
# γ and β, ε and shape parts; one that forgets β (or γ) keeps every part but γ and β's; one with ε added to the standard deviation keeps the
# normalisation, γ and β and shape parts (the ~1e-5 that ε makes at variance 1 is
# not charged to them).
_LN_RULES = {
    "variance": [dict(ddof=0), dict(ddof=1)],
    "eps": [dict(eps_rule="inside"), dict(eps_rule="outside"), dict(eps_rule="missing"), dict(eps_rule="fixed")],
    "affine": [dict(affine="right"), dict(affine="swapped"), dict(affine="none"), dict(affine="scale_only"),
               dict(affine="shift_only")],
}


def _ln_rule_variant(x, gamma, beta, eps, *, ddof=0, eps_rule="inside", affine="right"):
    """:func:`_ln_variant` with ε's rule named: inside the root (right), added to the
    standard deviation, missing, or fixed at the default 1e-5."""
    eps_value = {"inside": eps, "outside": eps, "missing": 0.0, "fixed": 1e-5}[eps_rule]
    return _ln_variant(x, gamma, beta, eps_value, ddof=ddof, eps_outside=eps_rule == "outside", affine=affine)


def _ln_case(rng, shape, label, part, *, scale=1.0, offset=0.0, eps=None, dtype=np.float64, atol=1e-6):
    d = shape[-1]
    x = (offset + scale * rng.normal(size=shape)).astype(dtype)
    # γ and β far from 1 and 0 in every case: with γ = 1, β = 0 an answer that swaps
    # them returns ones, which no case of another part could tell from a wrong norm.
    gamma = (1.0 + 0.5 * rng.normal(size=d)).astype(dtype)
    beta = (0.5 * rng.normal(size=d)).astype(dtype)
    kwargs = {} if eps is None else {"eps": eps}
    return Case(args=(x, gamma, beta), kwargs=kwargs, label=label, return_args=(0,), part=part,
                rtol=1e-4 if dtype == np.float32 else 1e-5, atol=atol)


def _random_shape(rng, ndim):
    return tuple(int(s) for s in rng.integers(1, 6, size=ndim - 1)) + (int(rng.integers(2, 17)),)


@register
class LayerNorm(Exercise):
    """``layer_norm(x, gamma, beta, eps=1e-5)`` in numpy."""

    name = "layer_norm"
    chapter = CHAPTER
    kind = "function"
    what = "normalised over the last axis with the biased variance and ε inside the root, γ and β, any leading shape"
    parts = {
        "mean 0 and variance 1 over the last axis": 2,
        "γ and β scale and shift": 1,
        "ε inside the square root, the eps argument": 1,
        "any leading shape (a vector, a batch)": 1,
    }
    # The rule each part states (:data:`_LN_RULES`); the shape part states none of them.
    RULE_OF_PART = dict(zip(parts, ("variance", "affine", "eps", None)))

    def cases(self, rng, hidden):
        norm, affine, eps, shapes = self.parts
        cases = [
            _ln_case(rng, (2, 4), "x (2, 4): each row normalised over its 4 features (biased variance)", norm),
            _ln_case(rng, (3, 5), "x (3, 5) with random γ and β", affine),
            _ln_case(rng, (3, 6), "nearly constant rows (variance 1e-6): where ε goes matters", eps,
                     scale=1e-3, atol=1e-6),
            _ln_case(rng, (2, 7), "eps=1e-3 given as an argument, nearly constant rows", eps,
                     scale=1e-2, eps=1e-3),
            _ln_case(rng, (2, 3, 5), "a batch x (2, 3, 5), d=5", shapes),
            _ln_case(rng, (6,), "a single vector (d,)", shapes),
        ]
        if not hidden:
            return cases
        for _ in range(2):
            shape = _random_shape(rng, 2)
            scale = float(rng.choice([0.1, 1.0, 10.0]))
            cases.append(_ln_case(rng, shape, f"random x {shape} × {scale:g}", norm, scale=scale))
            shape = _random_shape(rng, 2)
            cases.append(_ln_case(rng, shape, f"random x {shape}, random γ and β", affine, scale=scale))
        cases.append(_ln_case(rng, (3, 5), "rows far from 0 (offset 100)", norm, offset=100.0))
        cases.append(_ln_case(rng, (5, 8), "float32 x (5, 8)", norm, dtype=np.float32, atol=1e-5))
        cases.append(_ln_case(rng, (2, 8), "d=8 features, shape (2, 8) (more columns than rows)", affine))
        cases.append(_ln_case(rng, (4, 8), "eps=0.1 given as an argument", eps, eps=0.1))
        cases.append(_ln_case(rng, (6,), "a single vector (d,)", shapes))
        shape = _random_shape(rng, int(rng.integers(3, 5)))
        cases.append(_ln_case(rng, shape, f"a batch x {shape}", shapes))
        x = rng.normal(size=(3, 4))
        cases.append(Case(args=(x, np.ones(5), np.zeros(5)), label="gamma and beta of 5 features for x with 4",
                          expect_error=(ValueError,), part=ADVICE))
        return cases

    def tolerated(self, case, want):
        """Every way of breaking the rules of the parts other than ``case``'s own."""
        w = _array(want.value)
        if w is None or len(case.args) != 3:
            return []
        own = self.RULE_OF_PART.get(self.part_of(case))
        x, gamma, beta = (np.asarray(a, dtype=np.float64) for a in case.args)
        eps = case.kwargs.get("eps", 1e-5)
        axes = [rules for rule, rules in _LN_RULES.items() if rule != own]
        fixed = [rules[0] for rule, rules in _LN_RULES.items() if rule == own]
        results = []
        for combo in itertools.product(*axes):
            flags = {k: v for d in [*combo, *fixed] for k, v in d.items()}
            value = _ln_rule_variant(x, gamma, beta, eps, **flags).astype(w.dtype)
            if not layer_close(value, w, rtol=0, atol=0):
                results.append(dataclasses.replace(want, value=value))
        return results

    def diagnose(self, case, got, want):
        g = _array(got.value)
        if g is None:
            return "return a numpy array with the shape of x."
        for index, after in got.args_after.items():
            if not layer_close(_array(after), case.args[int(index)], rtol=0, atol=0):
                return "you changed x in place (x -= mean ...): compute on new arrays."
        w = _array(want.value)
        x, gamma, beta = (np.asarray(a, dtype=np.float64) for a in case.args)
        eps = case.kwargs.get("eps", 1e-5)
        variants = [
            ("you used the unbiased variance (ddof=1, torch.var's default): layer norm divides by d, "
             "np.var(x, axis=-1) or x.var(-1, unbiased=False).", _ln_variant(x, gamma, beta, eps, ddof=1)),
            ("ε belongs inside the square root: (x - mean) / sqrt(var + eps), not / (std + eps).",
             _ln_variant(x, gamma, beta, eps, eps_outside=True)),
            ("ε is missing: divide by sqrt(var + eps).", _ln_variant(x, gamma, beta, 0.0)),
            ("ε is fixed at 1e-5: use the eps argument.", _ln_variant(x, gamma, beta, 1e-5)),
            ("gamma and beta are swapped: the result is normalised * gamma + beta.",
             _ln_variant(x, gamma, beta, eps, affine="swapped")),
            ("gamma and beta are not applied: multiply by gamma, then add beta.",
             _ln_variant(x, gamma, beta, eps, affine="none")),
            ("beta is not added: the result is normalised * gamma + beta.",
             _ln_variant(x, gamma, beta, eps, affine="scale_only")),
            ("gamma is not applied: the result is normalised * gamma + beta.",
             _ln_variant(x, gamma, beta, eps, affine="shift_only")),
        ]
        if x.ndim >= 2:
            try:
                variants.append(("you normalised over the wrong axis: layer norm uses the last axis (the "
                                 "features of one token), axis=-1 with keepdims=True; axis=0 is batch norm.",
                                 _ln_variant(x, gamma, beta, eps, axis=0)))
            except ValueError:
                pass
        if x.ndim >= 3:
            variants.append(("you normalised over axis 1, the last axis of a (T, d) matrix only: use axis=-1 "
                             "(keepdims=True), which is the features' axis for any leading shape.",
                             _ln_variant(x, gamma, beta, eps, axis=1)))
        # float64 results separate ε inside / outside the root (a 1e-5 relative change)
        tight = g.dtype == np.float64
        return match_variants(g, w, variants, rtol=1e-9 if tight else 1e-4, atol=1e-12 if tight else 1e-5)


# --------------------------------------------------------------------------- PositionwiseFeedForward


def _ffn_case(rng, batch, length, d_model, d_ff, *, label, part, dropout=0.0, train=False, backward=False):
    x = rng.normal(size=(batch, length, d_model)).astype(np.float32)
    weight = Tensor(rng.normal(size=x.shape).astype(np.float32)) if backward else None
    return Case(init={"d_model": d_model, "d_ff": d_ff, "dropout": dropout}, state=ffn_state(rng, "", d_model, d_ff),
                args=(Tensor(x, requires_grad=backward),), train=train, backward=weight,
                seed=int(rng.integers(0, 2**31)), probes=("state_dict_keys",), label=label, part=part,
                rtol=1e-4, atol=1e-5)


@register
class PositionwiseFeedForwardCheck(Exercise):
    """``PositionwiseFeedForward(d_model, d_ff, dropout=0.0)``: linear1, ReLU, dropout, linear2."""

    name = "PositionwiseFeedForward"
    chapter = CHAPTER
    kind = "class"
    what = "linear2(dropout(relu(linear1(x)))) in eval and train mode, exactly linear1/linear2, gradients"
    parts = {
        "linear1 → ReLU → linear2 on every position": 2,
        "dropout after the ReLU, only in training": 1,
    }

    def cases(self, rng, hidden):
        ffn, dropout = self.parts
        cases = [
            _ffn_case(rng, 1, 3, 4, 8, label="x (1, 3, 4), d_model=4, d_ff=8", part=ffn),
            _ffn_case(rng, 2, 5, 8, 32, label="x (2, 5, 8), d_ff=32 = 4 × d_model (the paper's ratio)", part=ffn),
            _ffn_case(rng, 2, 3, 6, 12, backward=True, label="gradients flow back to x", part=ffn),
            _ffn_case(rng, 2, 4, 8, 16, dropout=0.5, train=True, part=dropout,
                      label="train mode, dropout=0.5: one dropout after the ReLU"),
            _ffn_case(rng, 2, 3, 8, 16, dropout=0.3, label="dropout=0.3 in eval mode (off)", part=dropout),
        ]
        if not hidden:
            return cases
        for _ in range(3):
            d_model, d_ff = int(rng.integers(2, 17)), int(rng.integers(2, 49))
            b, t = int(rng.integers(1, 4)), int(rng.integers(1, 8))
            cases.append(_ffn_case(rng, b, t, d_model, d_ff, label=f"random x ({b}, {t}, {d_model}), d_ff={d_ff}",
                                   part=ffn))
        p = float(rng.choice([0.2, 0.5]))
        cases.append(_ffn_case(rng, 3, 4, 6, 24, dropout=p, train=True, part=dropout,
                               label=f"train mode, dropout={p}: one dropout after the ReLU"))
        return cases

    def tolerated(self, case, want):
        """The dropout part's cases accept the feed-forward with another activation (GELU,
        none, a ReLU after linear2 too): the activation is the rule of the first part,
        which states it, so a forgotten ReLU is not charged again to the dropout."""
        w = _array(want.value)
        if self.part_of(case) != list(self.parts)[1] or w is None or case.expect_error or not case.args:
            return []
        init = case.init
        return [dataclasses.replace(want, value=Tensor(ffn_activation_variant(
                    case.state, _array(case.args[0]), init["d_model"], init["d_ff"], init.get("dropout", 0.0),
                    bool(case.train), case.seed, activation).astype(w.dtype)))
                for activation in _FFN_ACTIVATIONS]

    def raised_hint(self, case, got):
        return load_state_hint(case, got, (
            "the module must hold exactly linear1 = nn.Linear(d_model, d_ff) and linear2 = "
            "nn.Linear(d_ff, d_model) (keys linear1.weight, linear1.bias, linear2.weight, linear2.bias)."))

    def diagnose(self, case, got, want):
        # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
        import torch
        import torch.nn.functional as F

        g, w = _array(got.value), _array(want.value)
        if g is None:
            return "forward must return a tensor of shape (B, T, d_model)."
        x = torch.from_numpy(_array(case.args[0]))
        state = _torch_state(case.state)
        variants = [
            ("you used GELU; the paper's feed-forward network uses ReLU: max(0, x W1 + b1) W2 + b2.",
             reference_ffn(case.state, "", x, "gelu")),
            ("the ReLU between the two linear layers is missing.", reference_ffn(case.state, "", x, "none")),
            ("a ReLU after linear2 too: the activation goes only between the two layers.",
             F.relu(reference_ffn(case.state, "", x))),
        ]
        p = case.init.get("dropout", 0.0)

        def after_init():
            torch.manual_seed(case.seed)
            # the references when a case runs (trusted side only; they import torch)
            import solutions

            solutions.PositionwiseFeedForward(case.init["d_model"], case.init["d_ff"])  # same RNG draws

        if case.train and p > 0:
            h = F.relu(x @ state["linear1.weight"].T + state["linear1.bias"])
            after_init()
            out_dropped = F.dropout(h @ state["linear2.weight"].T + state["linear2.bias"], p)
            after_init()
            in_dropped = F.dropout(x, p)
            in_dropped = F.relu(in_dropped @ state["linear1.weight"].T + state["linear1.bias"])
            in_dropped = in_dropped @ state["linear2.weight"].T + state["linear2.bias"]
            variants += [
                ("dropout is missing: apply self.dropout to the ReLU's output, before linear2.",
                 reference_ffn(case.state, "", x)),
                ("dropout is in the wrong place: it goes after the ReLU, before linear2, not after linear2.",
                 out_dropped),
                ("dropout is in the wrong place: it goes after the ReLU, before linear2, not on the input.",
                 in_dropped),
            ]
        if not case.train and p > 0:
            after_init()  # the functional dropout left on: the draws of a training step
            h = F.dropout(F.relu(x @ state["linear1.weight"].T + state["linear1.bias"]), p, training=True)
            variants.append(("dropout is on in eval mode: use self.dropout (an nn.Dropout, off after model.eval()) "
                             "or F.dropout(h, p, training=self.training).",
                             h @ state["linear2.weight"].T + state["linear2.bias"]))
        with torch.no_grad():
            return match_variants(g, w, variants)


# --------------------------------------------------------------------------- ResidualSublayer


def _residual_case(rng, batch, length, d_model, *, norm_first, label, part, dropout=0.0, train=False,
                   backward=False):
    x = rng.normal(size=(batch, length, d_model)).astype(np.float32)
    sublayer = Obj("torch.nn.Linear", {"in_features": d_model, "out_features": d_model},
                   _linear_state(rng, "", d_model, d_model))
    weight = Tensor(rng.normal(size=x.shape).astype(np.float32)) if backward else None
    return Case(init={"d_model": d_model, "dropout": dropout, "norm_first": norm_first},
                state=norm_state(rng, "norm.", d_model), args=(Tensor(x, requires_grad=backward), sublayer),
                train=train, backward=weight, seed=int(rng.integers(0, 2**31)),
                probes=("state_dict_keys", "type:norm"), label=label, part=part, rtol=1e-4, atol=1e-5)


# The post-norm part's rule broken the ways a student breaks it (pre-norm's formula, no
# residual, no norm): the dropout part's cases (post-norm, train mode) accept each
# (:meth:`ResidualSublayerCheck.tolerated`), so such a mistake costs the post-norm part
# alone.
_POST_NORM_FORMS = ("pre_norm", "no_residual", "no_norm")


def residual_form_variant(state, sublayer_state, x, d_model, dropout, train, seed, form):
    """The sub-layer wrapper of the case's state in the form ``form`` (one of
    :data:`_POST_NORM_FORMS`), its dropout on the sub-layer's output drawn as the
    module's would be (``seed``, then the sub-layer's construction), in training only.

    Returns a float32 array of ``x``'s shape."""
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch
    import torch.nn.functional as F

    lin = _torch_state(sublayer_state)
    x = torch.from_numpy(np.asarray(x, dtype=np.float32))

    def sub(t):
        return t @ lin["weight"].T + lin["bias"]

    def drop(t):
        if not (train and dropout > 0):
            return t
        torch.manual_seed(seed)
        torch.nn.Linear(d_model, d_model)  # the sub-layer's construction draws, as in the runner
        return F.dropout(t, dropout)

    with torch.no_grad():
        norm = functools.partial(reference_layer_norm, state, "norm.")
        out = {"pre_norm": lambda: x + drop(sub(norm(x))), "no_residual": lambda: norm(drop(sub(x))),
               "no_norm": lambda: x + drop(sub(x))}[form]()
        return out.numpy()


@register
class ResidualSublayerCheck(Exercise):
    """``ResidualSublayer(d_model, dropout=0.0, norm_first=False)``: Add & Norm around a sub-layer."""

    name = "ResidualSublayer"
    chapter = CHAPTER
    kind = "class"
    what = "post-norm norm(x + dropout(sublayer(x))) and pre-norm x + dropout(sublayer(norm(x))), self.norm, train mode"
    parts = {
        "post-norm (the paper): norm(x + sublayer(x))": 2,
        "pre-norm: x + sublayer(norm(x))": 1,
        "dropout on the sub-layer's output, before the addition": 1,
    }

    def cases(self, rng, hidden):
        post, pre, dropout = self.parts
        cases = [
            _residual_case(rng, 1, 3, 4, norm_first=False, part=post,
                           label="post-norm (the paper), x (1, 3, 4), a Linear sub-layer"),
            _residual_case(rng, 2, 3, 6, norm_first=True, part=pre, label="pre-norm (norm_first=True), x (2, 3, 6)"),
            _residual_case(rng, 2, 4, 8, norm_first=False, dropout=0.5, train=True, part=dropout,
                           label="train mode, dropout=0.5 on the sub-layer's output, post-norm"),
            _residual_case(rng, 2, 3, 5, norm_first=False, backward=True, part=post,
                           label="gradients flow back to x through both paths (post-norm)"),
        ]
        if not hidden:
            return cases
        for nf, part in ((False, post), (True, pre)):
            for _ in range(2):
                d_model, b, t = int(rng.integers(2, 17)), int(rng.integers(1, 4)), int(rng.integers(1, 7))
                cases.append(_residual_case(rng, b, t, d_model, norm_first=nf, part=part,
                                            label=f"random x ({b}, {t}, {d_model}), norm_first={nf}"))
            cases.append(_residual_case(rng, 2, 3, 8, norm_first=nf, backward=True, part=part,
                                        label=f"gradients flow back to x (norm_first={nf})"))
            cases.append(_residual_case(rng, 2, 3, 8, norm_first=nf, dropout=0.3, part=part,
                                        label=f"dropout=0.3 in eval mode (off), norm_first={nf}"))
        # No pre-norm case in train mode: it would depend on both the pre-norm and the
        # dropout rule, so that a mistake in one would cost both parts.
        p = float(rng.choice([0.2, 0.5]))
        cases.append(_residual_case(rng, 3, 4, 6, norm_first=False, dropout=p, train=True, part=dropout,
                                    label=f"train mode, dropout={p} on the sub-layer's output, post-norm"))
        return cases

    def tolerated(self, case, want):
        """The dropout part's cases (post-norm, train mode) accept the post-norm formula
        broken (pre-norm's formula, no residual, no norm): the post-norm part states it, so
        such a mistake is not charged again to the dropout."""
        w = _array(want.value)
        if self.part_of(case) != list(self.parts)[2] or w is None or case.expect_error or len(case.args) < 2:
            return []
        init = case.init
        return [dataclasses.replace(want, value=Tensor(residual_form_variant(
                    case.state, case.args[1].state, _array(case.args[0]), init["d_model"], init.get("dropout", 0.0),
                    bool(case.train), case.seed, form).astype(w.dtype)))
                for form in _POST_NORM_FORMS]

    def raised_hint(self, case, got):
        return load_state_hint(case, got, (
            "the only parameters are those of self.norm = nn.LayerNorm(d_model) (keys norm.weight, norm.bias)."))

    def diagnose(self, case, got, want):
        # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
        import torch
        import torch.nn.functional as F

        if got.probes.get("type:norm") != want.probes.get("type:norm"):
            return "self.norm must be an nn.LayerNorm(d_model)."
        g, w = _array(got.value), _array(want.value)
        if g is None:
            return "forward must return a tensor of shape (B, T, d_model)."
        x = torch.from_numpy(_array(case.args[0]))
        lin = _torch_state(case.args[1].state)

        def sub(t):
            return t @ lin["weight"].T + lin["bias"]

        def norm(t):
            return reference_layer_norm(case.state, "norm.", t)

        p = case.init.get("dropout", 0.0)

        def drop(t):
            if not (case.train and p > 0):
                return t
            torch.manual_seed(case.seed)
            torch.nn.Linear(case.init["d_model"], case.init["d_model"])  # the sub-layer's construction draws
            return F.dropout(t, p)

        with torch.no_grad():
            post = norm(x + drop(sub(x)))
            pre = x + drop(sub(norm(x)))
            variants = [
                ("pre- and post-norm are swapped: norm_first=False is the paper's norm(x + dropout(sublayer(x))); "
                 "norm_first=True is x + dropout(sublayer(norm(x))).", pre if not case.init["norm_first"] else post),
                ("the residual is missing: add the sub-layer's input x back.",
                 norm(drop(sub(x))) if not case.init["norm_first"] else drop(sub(norm(x)))),
                ("pre-norm normalises the sub-layer's input, not its output: x + dropout(sublayer(norm(x)))."
                 if case.init["norm_first"] else
                 "the residual must be added before the norm (post-norm): norm(x + dropout(sublayer(x))).",
                 x + norm(drop(sub(x)))),
                ("the residual adds the normalised x; add the raw input: x + dropout(sublayer(norm(x))).",
                 norm(x) + drop(sub(norm(x)))),
            ]
            if case.train and p > 0:
                no_drop = norm(x + sub(x)) if not case.init["norm_first"] else x + sub(norm(x))
                on_sum = norm(drop(x + sub(x))) if not case.init["norm_first"] else drop(x + sub(norm(x)))
                variants += [
                    ("dropout is missing: apply self.dropout to the sub-layer's output before the addition.", no_drop),
                    ("dropout goes on the sub-layer's output only, before adding x, not on the sum.", on_sum),
                ]
            return match_variants(g, w, variants)


# --------------------------------------------------------------------------- EncoderLayer


def _encoder_state(rng, d_model, d_ff):
    return {
        **attention_state(rng, "self_attn.", d_model),
        **ffn_state(rng, "feed_forward.", d_model, d_ff),
        **norm_state(rng, "norm1.", d_model),
        **norm_state(rng, "norm2.", d_model),
    }


def random_padding(rng, batch, length):
    """A (B, 1, 1, T) padding mask, True = may attend, at least one real token per row;
    with two rows or more, the first is whole and the last padded (so the mask matters)."""
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[0] = length
    if batch > 1 and length > 1:
        lengths[-1] = rng.integers(1, length)
    return (np.arange(length)[None, :] < lengths[:, None])[:, None, None, :]


def _encoder_case(rng, batch, length, d_model, num_heads, d_ff, *, norm_first, label, part, mask="padding",
                  dropout=0.0, backward=False, as_kwarg=True):
    x = rng.normal(size=(batch, length, d_model)).astype(np.float32)
    kwargs, args = {}, [Tensor(x, requires_grad=backward)]
    if mask == "padding":
        m = random_padding(rng, batch, length)
        if as_kwarg:
            kwargs["src_mask"] = Tensor(m)
        else:
            args.append(Tensor(m))
    weight = Tensor(rng.normal(size=x.shape).astype(np.float32)) if backward else None
    return Case(init={"d_model": d_model, "num_heads": num_heads, "d_ff": d_ff, "dropout": dropout,
                      "norm_first": norm_first},
                state=_encoder_state(rng, d_model, d_ff), args=tuple(args), kwargs=kwargs, backward=weight,
                probes=("state_dict_keys",), label=label, part=part, rtol=1e-4, atol=1e-4)


# Mistakes in the order of an encoder layer's steps (switches of encoder_layer_variant),
# the rule of its post-norm part.
_LAYER_ORDER_MISTAKES = (dict(flip_norm_first=True), dict(residual=False), dict(swap_norms=True))


@register
class EncoderLayerCheck(Exercise):
    """``EncoderLayer(d_model, num_heads, d_ff, dropout=0.0, norm_first=False)``."""

    name = "EncoderLayer"
    chapter = CHAPTER
    kind = "class"
    what = "post- and pre-norm encoder layers with padding masks, exact state_dict keys, gradients"
    parts = {
        "post-norm (the paper): self-attention, FFN, each with Add & Norm": 2,
        "pre-norm (norm_first=True)": 1,
        "the src_mask reaches the self-attention": 1,
    }
    uses = ("PositionwiseFeedForward", "ResidualSublayer")

    def cases(self, rng, hidden):
        post, pre, mask = self.parts
        cases = [
            _encoder_case(rng, 1, 4, 8, 2, 16, norm_first=False, mask=None, part=post,
                          label="post-norm, one sentence of 4 tokens, d_model=8, h=2, no mask"),
            # The pre-norm part runs without a mask, so that a mask mistake costs only the
            # src_mask part (whose cases are post-norm, so a norm mistake costs only its own).
            _encoder_case(rng, 2, 4, 8, 4, 32, norm_first=True, mask=None, part=pre,
                          label="pre-norm (norm_first=True), 2 sentences of 4 tokens, no mask"),
            _encoder_case(rng, 2, 5, 8, 2, 16, norm_first=False, part=mask,
                          label="post-norm, 2 sentences with a padding src_mask (2, 1, 1, 5)"),
            _encoder_case(rng, 2, 3, 8, 2, 16, norm_first=False, mask=None, backward=True, part=post,
                          label="gradients flow back to x (post-norm)"),
        ]
        if not hidden:
            return cases
        for i in range(4):
            h = int(rng.choice([1, 2, 4]))
            d_model, d_ff = h * int(rng.integers(2, 5)), int(rng.integers(4, 33))
            nf = bool(i % 2)
            masked = i >= 2 and not nf
            b, t = int(rng.integers(2 if masked else 1, 4)), int(rng.integers(2, 7))
            part = mask if masked else pre if nf else post
            how = ("mask passed by keyword" if i == 2 else "mask passed by position") if masked else "no mask"
            cases.append(_encoder_case(rng, b, t, d_model, h, d_ff, norm_first=nf, part=part,
                                       mask="padding" if masked else None, as_kwarg=i == 2,
                                       label=f"random B={b}, T={t}, d_model={d_model}, h={h}, d_ff={d_ff}, "
                                             f"norm_first={nf}, {how}"))
        cases.append(_encoder_case(rng, 2, 3, 8, 2, 16, norm_first=False, mask=None, dropout=0.1, part=post,
                                   label="dropout=0.1 in eval mode (off)"))
        cases.append(_encoder_case(rng, 2, 4, 8, 2, 16, norm_first=True, mask=None, backward=True, part=pre,
                                   label="gradients flow back to x (norm_first=True)"))
        cases.append(_encoder_case(rng, 3, 5, 8, 2, 16, norm_first=False, as_kwarg=False, part=mask,
                                   label="post-norm, src_mask (3, 1, 1, 5) passed by position"))
        return cases

    def tolerated(self, case, want):
        """The src_mask part's cases (post-norm) accept the layer's order broken (pre-norm's
        formula, no residual, the norms swapped): the post-norm part states the order, this
        part where the mask goes, so a wrong order is not charged again here."""
        w = _array(want.value)
        if self.part_of(case) != list(self.parts)[2] or w is None or case.expect_error:
            return []
        return [dataclasses.replace(want, value=Tensor(encoder_layer_variant(case, **flags).numpy().astype(w.dtype)))
                for flags in _LAYER_ORDER_MISTAKES]

    def raised_hint(self, case, got):
        return load_state_hint(case, got, (
            "the state_dict keys must be exactly self_attn.w_{q,k,v,o}.{weight,bias}, "
            "feed_forward.linear{1,2}.{weight,bias}, norm{1,2}.{weight,bias}: use MultiHeadAttention, "
            "PositionwiseFeedForward and two nn.LayerNorm named self_attn, feed_forward, norm1, norm2."))

    def diagnose(self, case, got, want):
        g, w = _array(got.value), _array(want.value)
        if g is None:
            return "forward must return a tensor of shape (B, T, d_model)."
        has_mask = "src_mask" in case.kwargs or len(case.args) > 1
        if (case.init or {}).get("norm_first"):  # the post-norm formula where pre-norm was asked for
            flipped = ("with norm_first=True your layer computed the post-norm formula: pre-norm normalises each "
                       "sub-layer's input, x = x + self_attn(norm1(x)), x = x + feed_forward(norm2(x)); read "
                       "self.norm_first in forward.")
        else:
            flipped = ("pre- and post-norm are swapped: norm_first=False (the paper) is x = norm1(x + self_attn(x)), "
                       "x = norm2(x + feed_forward(x)).")
        variants = [
            (flipped, dict(flip_norm_first=True)),
            ("the residual connections are missing: each sub-layer's input is added back (x + sublayer(...)).",
             dict(residual=False)),
            ("norm1 and norm2 are swapped: norm1 follows the self-attention, norm2 the feed-forward network.",
             dict(swap_norms=True)),
            ("the pre-norm residual adds the normalised x; add the raw x: x = x + self_attn(norm1(x), ...).",
             dict(norm_residual=True)),
        ]
        if has_mask:
            variants += [
                ("the src_mask was ignored: pass it to self.self_attn(x, x, x, src_mask).", dict(mask="ignored")),
                ("the mask is inverted: True = may attend in this book; pass src_mask as it is.",
                 dict(mask="inverted")),
            ]
        hint = match_layer_variants(g, w, case, encoder_layer_variant, variants)
        if hint:
            return hint
        if got.grads and want.grads and layer_close(g, w):
            return "the output is right but the gradient is not: do not detach or leave autograd inside forward."
        return None
