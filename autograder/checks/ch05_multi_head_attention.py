"""Checks of chapter 5, multi-head attention: ``split_heads``, ``merge_heads``,
``MultiHeadAttention`` (contract: ``shared/EXERCISES.md`` §5).

The hints are computed, not guessed: on a mismatch :meth:`diagnose` rebuilds the
plausible wrong answers from the case's own inputs (a head split without the
transpose, the heads concatenated in the wrong order, no ``1/√d_k`` scale, the
mask polarity inverted, the softmax over the query axis, no ``w_o`` ...) and names
the one the submission matches.

The parts and their points are fixed by the chapter's prompts ("Graded parts").
The one error the contract names here is ``d_model % num_heads != 0`` in
``split_heads`` (a part of its own); the same in ``MultiHeadAttention`` is advice
worth no points. ``MultiHeadAttention`` grades its layers, its output and its
``attn_weights`` as separate parts, so a mistake in one costs that part only.

Paper: "Attention Is All You Need" (Vaswani et al., 2017), section 3.2.2.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .base import ADVICE, Case, CheckFailure, Exercise, Tensor, redacting, register

__all__ = ["SplitHeads", "MergeHeads", "MultiHeadAttentionCheck"]

CHAPTER = "05_multi_head_attention"

# Tolerance used when matching a submission against a reconstructed mistake.
_MATCH_RTOL, _MATCH_ATOL = 1e-4, 1e-5


def _value(x):
    """The numpy data of a decoded result or case argument (None if absent)."""
    if isinstance(x, Tensor):
        return x.value
    if isinstance(x, np.ndarray):
        return x
    return None


def _matches(got, candidate) -> bool:
    g = _value(got)
    if g is None or candidate is None:
        return False
    c = np.asarray(candidate)
    if g.shape != c.shape:
        return False
    return bool(np.allclose(g.astype(np.float64), c.astype(np.float64), rtol=_MATCH_RTOL, atol=_MATCH_ATOL))


def _no_gradient(got, want) -> bool:
    """True when the reference produced input gradients and the submission did not."""
    if not want.grads:
        return False
    return not got.grads or any(_value(v) is None for v in got.grads.values())


def _float_dtype(rng: np.random.Generator):
    return np.float32 if rng.random() < 0.6 else np.float64


class _HeadsExercise(Exercise):
    """Hints for calls that raised: the classic `.view` on a transposed tensor."""

    def raised_hint(self, case, got):
        if case.expect_error or got.raised is None:
            return None
        message = got.raised.get("message", "")
        if "view" in message and "stride" in message:
            return ("a .view on a transposed (non-contiguous) tensor: use .reshape, "
                    "or .contiguous().view, after transpose")
        return None


# --------------------------------------------------------------------------- split_heads


@register
class SplitHeads(_HeadsExercise):
    name = "split_heads"
    chapter = CHAPTER
    kind = "function"
    what = "shapes (B, h, T, d_k), which values land in which head, d_model % h != 0 raises ValueError"
    parts = {"shapes and head order": 1, "d_model % num_heads != 0 raises ValueError": 1}

    SPLIT, ERROR = parts

    def cases(self, rng, hidden):
        tokens = np.arange(12, dtype=np.float32).reshape(1, 3, 4)  # 3 tokens, d_model = 4
        cases = [
            Case(args=(Tensor(tokens), 2), part=self.SPLIT,
                 label="1 sentence of 3 tokens, d_model=4, 2 heads (x = arange(12))"),
            Case(args=(Tensor(rng.normal(size=(2, 5, 8)).astype(np.float32)), 4), part=self.SPLIT,
                 label="(2, 5, 8) into 4 heads"),
            Case(args=(Tensor(np.zeros((1, 2, 6), np.float32)), 4), part=self.ERROR, expect_error=(ValueError,),
                 label="d_model=6 is not divisible by 4 heads"),
        ]
        if not hidden:
            return cases
        for _ in range(6):
            batch, length = int(rng.integers(1, 4)), int(rng.integers(1, 7))
            num_heads, d_k = int(rng.choice([1, 2, 3, 4, 8])), int(rng.integers(1, 6))
            x = rng.normal(size=(batch, length, num_heads * d_k)).astype(_float_dtype(rng))
            cases.append(Case(args=(Tensor(x), num_heads), part=self.SPLIT,
                              label=f"{x.shape} {x.dtype} into {num_heads} heads"))
        x = rng.normal(size=(2, 3, 12))
        cases.append(Case(args=(Tensor(x), 12), part=self.SPLIT, label="h = d_model = 12: one value per head"))
        cases.append(Case(args=(Tensor(x), 1), part=self.SPLIT, label="h = 1: a single head of width d_model"))
        grad = rng.normal(size=(2, 3, 3, 4))  # (B, h, T, d_k)
        cases.append(Case(args=(Tensor(x, requires_grad=True), 3), part=self.SPLIT,
                          label="gradient flows back through the split", backward=Tensor(grad)))
        d_model = int(rng.choice([5, 7, 9, 10]))
        heads = {5: 2, 7: 3, 9: 2, 10: 4}[d_model]
        cases.append(Case(args=(Tensor(np.ones((1, 2, d_model))), heads), part=self.ERROR,
                          expect_error=(ValueError,), label=f"d_model={d_model} is not divisible by {heads} heads"))
        return cases

    def raised_hint(self, case, got):
        if case.expect_error and got.raised is None:
            return ("check first: `if d_model % num_heads != 0: raise ValueError(...)` saying both numbers; "
                    "a reshape that happens to fit would split the features unevenly.")
        if case.expect_error:
            return (f"you raised {got.raised['type']}, but the contract asks for ValueError: check "
                    "`d_model % num_heads != 0` yourself before the reshape fails on its own.")
        return super().raised_hint(case, got)

    def diagnose(self, case, got, want):
        x = _value(case.args[0])
        num_heads = case.args[1]
        g = _value(got.value)
        if x is None or g is None:
            return None
        batch, length, d_model = x.shape
        d_k = d_model // num_heads
        want_shape = _value(want.value).shape
        if g.shape != want_shape:
            if g.shape == (batch, length, num_heads, d_k):
                return "the result is (B, T, h, d_k): transpose axes 1 and 2 to put the heads before the tokens"
            if g.shape in ((batch, length, d_k, num_heads), (batch, d_k, length, num_heads)):
                return ("d_model was split as (d_k, h): head i must be the contiguous slice "
                        "x[..., i*d_k:(i+1)*d_k], so reshape to (B, T, h, d_k)")
            if g.shape == (batch, num_heads, d_k, length):
                return "the last two axes are swapped: each head must be (T, d_k), tokens on the rows"
            return None
        if _matches(got.value, x.reshape(batch, num_heads, length, d_k)):
            return ("right shape, scrambled values: a plain view/reshape to (B, h, T, d_k) without a "
                    "transpose mixes tokens across heads; reshape to (B, T, h, d_k), then transpose(1, 2)")
        if _matches(got.value, x.reshape(batch, length, d_k, num_heads).transpose(0, 3, 1, 2)):
            return ("head split in the wrong order: you took every h-th feature (d_model as (d_k, h)); "
                    "head i must be the contiguous slice x[..., i*d_k:(i+1)*d_k]")
        if _no_gradient(got, want):
            return "no gradient reached x: use torch operations (reshape/transpose), not numpy or .detach()"
        return None


# --------------------------------------------------------------------------- merge_heads


@register
class MergeHeads(_HeadsExercise):
    name = "merge_heads"
    chapter = CHAPTER
    kind = "function"
    what = "shape (B, T, h * d_k), the heads concatenated in order [head_0 | head_1 | ...], the inverse of split_heads"
    parts = {"shape (B, T, h·d_k)": 1, "heads concatenated in order": 1}

    SHAPE, ORDER = parts

    def _pair(self, x, label):
        """Two cases on one input: its shape and dtype, then its values."""
        return [Case(args=(Tensor(x),), part=self.SHAPE, compare="structure", label=label),
                Case(args=(Tensor(x),), part=self.ORDER, label=label)]

    def cases(self, rng, hidden):
        heads = np.arange(12, dtype=np.float32).reshape(1, 2, 3, 2)  # 2 heads, 3 tokens, d_k = 2
        cases = self._pair(heads, "1 sentence, 2 heads of 3 tokens, d_k=2 (x = arange(12))")
        cases += self._pair(rng.normal(size=(2, 4, 5, 3)).astype(np.float32), "(2, 4, 5, 3): 4 heads, 5 tokens, d_k=3")
        if not hidden:
            return cases
        for _ in range(6):
            shape = (int(rng.integers(1, 4)), int(rng.choice([1, 2, 3, 4, 8])),
                     int(rng.integers(2, 7)), int(rng.integers(1, 6)))
            x = rng.normal(size=shape).astype(_float_dtype(rng))
            cases += self._pair(x, f"{shape} {x.dtype}")
        cases += self._pair(rng.normal(size=(2, 3, 1, 4)), "a single token (T = 1)")
        x = rng.normal(size=(2, 3, 4, 2))
        # One weight for every output entry: the gradient's route follows from the values
        # (graded above); this case asks that it flows, whatever the output's shape, so an
        # unmerged (B, T, h, d_k) result is charged to the shape part alone.
        cases.append(Case(args=(Tensor(x, requires_grad=True),), part=self.ORDER,
                          label="gradient flows back through the merge",
                          backward=Tensor(np.array(rng.normal()))))
        return cases

    def tolerated(self, case, want):
        """The order part's cases accept the reference's heads transposed but not merged,
        ``(B, T, h, d_k)``: the same values in the same order, one reshape short. The
        merged width is the rule of the shape part, which states it; the order of the
        heads is this part's."""
        w = _value(want.value)
        if self.part_of(case) != self.ORDER or w is None or w.ndim != 3:
            return []
        batch, num_heads, length, d_k = _value(case.args[0]).shape
        unmerged = Tensor(w.reshape(batch, length, num_heads, d_k))
        unmerged.dtype = getattr(want.value, "dtype", None) or unmerged.value.dtype.name
        return [dataclasses.replace(want, value=unmerged)]

    def diagnose(self, case, got, want):
        x = _value(case.args[0])
        g = _value(got.value)
        if x is None or g is None:
            return None
        batch, num_heads, length, d_k = x.shape
        if g.shape != _value(want.value).shape:
            if g.shape == (batch, num_heads, length * d_k):
                return "the heads ended up on axis 1: transpose(1, 2) to (B, T, h, d_k) before reshaping"
            if g.shape == (batch, length, num_heads, d_k):
                return "transposed but not merged: reshape (B, T, h, d_k) to (B, T, h * d_k)"
            return None
        if _matches(got.value, x.reshape(batch, length, num_heads * d_k)):
            return ("right shape, scrambled values: reshaping (B, h, T, d_k) straight to (B, T, h*d_k) "
                    "mixes tokens; transpose(1, 2) first, then .reshape (or .contiguous().view)")
        if _matches(got.value, x.transpose(0, 2, 3, 1).reshape(batch, length, num_heads * d_k)):
            return ("heads concatenated in the wrong order ((d_k, h) interleaved): the output must be "
                    "[head_0 | head_1 | ...], head i in features i*d_k:(i+1)*d_k")
        if _no_gradient(got, want):
            return "no gradient reached x: use torch operations (transpose/reshape), not numpy or .detach()"
        return None


# --------------------------------------------------------------------------- MultiHeadAttention


def _random_state(rng, d_model, scale=1.0) -> dict:
    """A reference ``state_dict`` (numpy float32) for ``MultiHeadAttention(d_model, h)``."""
    state = {}
    for name in ("w_q", "w_k", "w_v", "w_o"):
        state[f"{name}.weight"] = (rng.normal(size=(d_model, d_model)) * scale / math.sqrt(d_model)).astype(np.float32)
        state[f"{name}.bias"] = (rng.normal(size=(d_model,)) * 0.1).astype(np.float32)
    return state


def _mha_variant(case: Case, *, scale="d_k", invert_mask=False, softmax_axis=-1, use_w_o=True,
                 split="right", keys_from_query=False, values_from_key=False, mask_ignored=False,
                 with_grad=False):
    """Recompute multi-head attention for ``case`` with one deliberate mistake.

    Returns ``(output, weights)`` as float64 numpy arrays, or ``None`` when the
    variant cannot be computed for this case (shapes do not allow it). With
    ``with_grad``, ``(output, weights, grad)``: ``grad`` the gradient of
    ``sum(case.backward * output)`` with respect to the query (``None`` for a case
    without ``backward``).
    """
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    state = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in case.state.items()}
    num_heads = case.init["num_heads"]
    query, key, value = (torch.from_numpy(np.asarray(_value(a), dtype=np.float64)) for a in case.args[:3])
    track = with_grad and case.backward is not None
    if track:  # as in the runner: only the query tracks gradients
        query.requires_grad_(True)
    mask = case.kwargs.get("mask")
    mask = None if mask is None or mask_ignored else torch.from_numpy(_value(mask))
    if keys_from_query:
        key, value = query, query
    if values_from_key:
        value = key

    def linear(name, x):
        return x @ state[f"{name}.weight"].T + state[f"{name}.bias"]

    def split_fn(x):
        batch, length, d_model = x.shape
        d_k = d_model // num_heads
        if split == "right":
            return x.reshape(batch, length, num_heads, d_k).transpose(1, 2)
        if split == "no_transpose":
            return x.reshape(batch, num_heads, length, d_k)
        if split == "d_k_major":
            return x.reshape(batch, length, d_k, num_heads).permute(0, 3, 1, 2)
        raise ValueError(split)

    q, k, v = split_fn(linear("w_q", query)), split_fn(linear("w_k", key)), split_fn(linear("w_v", value))
    if q.shape[:2] != k.shape[:2] or k.shape[2] != v.shape[2]:
        return None
    d_k = q.shape[-1]
    divisor = {"d_k": math.sqrt(d_k), "none": 1.0, "d_model": math.sqrt(d_k * num_heads)}[scale]
    scores = q @ k.transpose(-2, -1) / divisor  # (B, h, T_q, T_k)
    if mask is not None:
        allowed = ~mask if invert_mask else mask
        allowed = torch.broadcast_to(allowed, scores.shape)
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=softmax_axis).masked_fill(~allowed, 0.0)
    else:
        weights = torch.softmax(scores, dim=softmax_axis)
    context = weights @ v  # (B, h, T_q, d_k)
    batch, heads, length, width = context.shape
    merged = context.transpose(1, 2).reshape(batch, length, heads * width)  # (B, T_q, d_model)
    out = linear("w_o", merged) if use_w_o else merged
    if not with_grad:
        return out.numpy(), weights.numpy()
    grad = None
    if track:
        (out * torch.from_numpy(np.asarray(_value(case.backward), dtype=np.float64))).sum().backward()
        grad = query.grad.numpy()
    return out.detach().numpy(), weights.detach().numpy(), grad


def _inverted_with_nan(case: Case, g: np.ndarray) -> bool:
    """Whether an output with NaN rows is multi-head attention with the mask's
    polarity inverted and -inf scores: the NaN rows are exactly the queries that
    the inverted mask blocks from every key (in some head), and every other row
    equals the inverted-mask result."""
    mask = case.kwargs.get("mask")
    if mask is None:
        return False
    result = _mha_variant(case, invert_mask=True)
    if result is None or result[0].shape != g.shape:
        return False
    scores_shape = (g.shape[0], case.init["num_heads"], g.shape[1], _value(case.args[1]).shape[1])
    blocked = np.broadcast_to(_value(mask), scores_shape)  # read inverted, True blocks the key
    dead = blocked.all(axis=-1).any(axis=1)  # (B, T_q): a query with no key left in some head
    nan_rows = np.isnan(g).any(axis=-1)
    if not dead.any() or not np.array_equal(nan_rows, dead):
        return False
    return _matches(g[~nan_rows], result[0][~nan_rows])


_LAYER_PROBES = ("state_dict_keys", "type:w_q", "type:w_k", "type:w_v", "type:w_o")

# The rules "self-attention" states, each broken alone (flags of :func:`_mha_variant`):
# the scores divided by √d_k (not by nothing, not by √d_model), the softmax over the
# keys, w_o after the merge. The cases of "cross-attention and masks" and "attn_weights"
# accept them (:meth:`MultiHeadAttentionCheck.tolerated`).
_SELF_ATTENTION_RULES_BROKEN = (dict(scale="none"), dict(scale="d_model"), dict(softmax_axis=-2),
                                dict(use_w_o=False))


@register
class MultiHeadAttentionCheck(_HeadsExercise):
    name = "MultiHeadAttention"
    chapter = CHAPTER
    kind = "class"
    what = ("exactly w_q/w_k/w_v/w_o, self-attention, cross-attention with masks (True = may attend), "
            "self.attn_weights (B, h, T_q, T_k)")
    parts = {"layers w_q, w_k, w_v, w_o": 1, "self-attention": 2, "cross-attention and masks": 2,
             "attn_weights": 1}
    uses = ("split_heads", "merge_heads")

    LAYERS, SELF, CROSS, WEIGHTS = parts

    @staticmethod
    def _case(rng, batch, t_q, t_k, d_model, num_heads, *, cross, part, mask=None, label, scale=1.0,
              dropout=None, backward=False, rtol=1e-4, atol=1e-5):
        """A forward case; the ``attn_weights`` part reads the attribute (of unmasked
        self-attention: a mistake with masks or with ``key``/``value`` is charged to
        "cross-attention and masks" once), the other parts the output."""
        query = (rng.normal(size=(batch, t_q, d_model)) * scale).astype(np.float32)
        if cross:
            key = (rng.normal(size=(batch, t_k, d_model)) * scale).astype(np.float32)
            value = (rng.normal(size=(batch, t_k, d_model)) * scale).astype(np.float32)
        else:
            key = value = query
        init = {"d_model": d_model, "num_heads": num_heads}
        if dropout is not None:
            init["dropout"] = dropout
        kwargs = {} if mask is None else {"mask": Tensor(mask)}
        q_arg = Tensor(query, requires_grad=backward)
        args = (q_arg, Tensor(key), Tensor(value)) if cross else (q_arg, Tensor(query), Tensor(query))
        weight = Tensor(rng.normal(size=(batch, t_q, d_model)).astype(np.float32)) if backward else None
        attrs = ("attn_weights",) if part == MultiHeadAttentionCheck.WEIGHTS else ()
        # the layers' names are the rule of the layers part: the reference's weights go to
        # four (d_model, d_model) layers under any names, in the order w_q, w_k, w_v, w_o
        return Case(args=args, kwargs=kwargs, init=init, state=_random_state(rng, d_model), attrs=attrs,
                    part=part, label=label, backward=weight, rtol=rtol, atol=atol, state_by_shape=True)

    @staticmethod
    def _fully_masked():
        """A (2, 1, 3, 5) mask in which one query may attend to no key (and the
        others to some keys only, so that an inverted mask is told apart)."""
        mask = np.ones((2, 1, 3, 5), dtype=bool)
        mask[0, 0, :, 3:] = False  # the last two keys of the first sentence are padding
        mask[1, 0, 2, :] = False  # one query with every key masked
        return mask

    def _layers(self, rng, d_model, num_heads):
        x = Tensor(rng.normal(size=(1, 2, d_model)).astype(np.float32))
        return Case(init={"d_model": d_model, "num_heads": num_heads}, args=(x, x, x), probes=_LAYER_PROBES,
                    part=self.LAYERS, label=f"the layers of MultiHeadAttention({d_model}, {num_heads})")

    def cases(self, rng, hidden):
        causal = np.tril(np.ones((4, 4), dtype=bool))[None, None]  # (1, 1, T, T)
        padding = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=bool)[:, None, None, :]  # (B, 1, 1, T_k)
        cases = [
            self._layers(rng, 8, 2),
            self._case(rng, 1, 3, 3, 4, 2, cross=False, part=self.SELF,
                       label="self-attention, 1 sentence of 3 tokens, d_model=4, h=2"),
            self._case(rng, 2, 4, 4, 8, 4, cross=False, part=self.SELF,
                       label="self-attention, 2 sentences of 4 tokens, d_model=8, h=4"),
            self._case(rng, 1, 4, 4, 8, 2, cross=False, mask=causal, part=self.CROSS,
                       label="self-attention with a causal mask (1, 1, 4, 4), d_model=8, h=2"),
            self._case(rng, 2, 3, 5, 8, 4, cross=True, mask=padding, part=self.CROSS,
                       label="cross-attention T_q=3, T_k=5 with a padding mask (2, 1, 1, 5), h=4"),
            self._case(rng, 2, 3, 5, 8, 2, cross=True, mask=self._fully_masked(), part=self.CROSS,
                       label="a query whose keys are all masked (its weights must be 0, not NaN)"),
            self._case(rng, 2, 5, 5, 8, 4, cross=False, part=self.WEIGHTS,
                       label="self.attn_weights of self-attention, 2 sentences of 5 tokens, h=4"),
        ]
        if not hidden:
            return cases
        num_heads = int(rng.choice([1, 2, 3, 4]))
        cases.append(self._layers(rng, num_heads * int(rng.integers(1, 5)), num_heads))
        for i in range(4):  # random self- and cross-attention, no mask
            num_heads = int(rng.choice([1, 2, 4]))
            d_model = num_heads * int(rng.integers(2, 5))
            batch, t_q = int(rng.integers(1, 4)), int(rng.integers(2, 7))
            cross = i % 2 == 1
            t_k = t_q + int(rng.integers(1, 4)) if cross else t_q
            kind = "cross" if cross else "self"
            cases.append(self._case(rng, batch, t_q, t_k, d_model, num_heads, cross=cross,
                                    part=self.CROSS if cross else self.SELF,
                                    label=f"{kind}-attention B={batch} T_q={t_q} T_k={t_k} d_model={d_model} "
                                          f"h={num_heads}"))
        cases.append(self._case(rng, 2, 4, 4, 8, 8, cross=False, part=self.SELF, label="h = d_model = 8 (d_k = 1)"))
        cases.append(self._case(rng, 2, 4, 4, 8, 2, cross=False, scale=30.0, rtol=1e-3, atol=1e-3, part=self.SELF,
                                label="large inputs (x 30): saturated softmax, no overflow"))
        batch, t_q, t_k, d_model, num_heads = 3, 4, 6, 12, 3
        shapes = {
            "(B, 1, 1, T_k) padding": (batch, 1, 1, t_k),
            "(1, 1, T_q, T_k)": (1, 1, t_q, t_k),
            "(B, h, T_q, T_k) per head": (batch, num_heads, t_q, t_k),
        }
        for what, shape in shapes.items():
            mask = rng.random(size=shape) < 0.7
            mask[..., 0] = True  # every query keeps at least one key
            cases.append(self._case(rng, batch, t_q, t_k, d_model, num_heads, cross=True, mask=mask,
                                    part=self.CROSS, label=f"cross-attention with a random {what} mask"))
        t = int(rng.integers(3, 7))
        causal = np.tril(np.ones((t, t), dtype=bool))[None, None]
        cases.append(self._case(rng, 2, t, t, 8, 2, cross=False, mask=causal, part=self.CROSS,
                                label=f"self-attention with a causal mask (1, 1, {t}, {t})"))
        cases.append(self._case(rng, 2, 3, 5, 8, 2, cross=True, mask=self._fully_masked(), part=self.CROSS,
                                label="a query whose keys are all masked (its weights must be 0, not NaN)"))
        cases.append(self._case(rng, 2, 3, 4, 8, 2, cross=True, dropout=0.1, part=self.CROSS,
                                label="dropout=0.1 in eval mode (dropout must be off)"))
        # Cross-attention, so that only the query tracks gradients (self-attention
        # would pass one tensor three times, which a case cannot encode).
        cases.append(self._case(rng, 2, 3, 4, 8, 4, cross=True, backward=True, part=self.CROSS,
                                label="cross-attention: the gradient flows back to the query"))
        cases.append(self._case(rng, 2, t, t, 8, 4, cross=False, part=self.WEIGHTS,
                                label=f"self.attn_weights of self-attention, T={t}, h=4"))
        cases.append(self._case(rng, 3, t, t, 12, 3, cross=False, part=self.WEIGHTS,
                                label=f"self.attn_weights of self-attention, T={t}, h=3"))
        cases.append(Case(init={"d_model": 10, "num_heads": 4}, args=(Tensor(np.zeros((1, 2, 10), np.float32)),) * 3,
                          part=ADVICE, expect_error=(ValueError,), label="d_model=10 is not divisible by 4 heads"))
        return cases

    def judge(self, case, got, want):
        """Judge only what the case's part is about: the layers case its probes (a
        forward that raises is graded by the other parts), an ``attn_weights`` case
        the attribute, the other cases the output (and gradient)."""
        part = self.part_of(case)
        if part == self.LAYERS:
            raised = got.raised if got.raised and got.raised.get("phase") in ("decode", "init", "probe") else None
            got = dataclasses.replace(got, value=None, grads={}, attrs={}, raised=raised)
            want = dataclasses.replace(want, value=None, grads={}, attrs={})
        elif part == self.WEIGHTS:
            # The weights another part's broken rule gives, asked of the whole reference
            # result (as the student package recorded them at release), then judged as the
            # reference's are: on the attribute alone.
            others = [] if got.raised else self._tolerated(case, want)
            got = dataclasses.replace(got, value=None, grads={})
            want = dataclasses.replace(want, value=None, grads={})
            try:
                return super().judge(case, got, want)
            except CheckFailure:
                for other in others:
                    try:
                        return super().judge(case, got, dataclasses.replace(other, value=None, grads={}))
                    except CheckFailure:
                        continue
                raise
        return super().judge(case, got, want)

    def tolerated(self, case, want):
        """The cases of "cross-attention and masks" and of "attn_weights" accept the
        result made with one rule of "self-attention" broken (no 1/√d_k or √d_model
        instead, the softmax over the queries, no w_o), outputs, weights and the query's
        gradient alike: the part about the attention itself states those rules, so a
        missing scale is charged there once. Cross-attention's own rules (w_k(key),
        w_v(value), T_k, the mask) and the weights' (one map per head, before dropout)
        are held: each variant computes them right. Compared at the case's tolerance
        (float32: rtol 1e-4, atol 1e-5), as the reference is."""
        part = self.part_of(case)
        if part not in (self.CROSS, self.WEIGHTS) or case.state is None or case.expect_error:
            return []
        results = []
        for flags in _SELF_ATTENTION_RULES_BROKEN:
            variant = _mha_variant(case, with_grad=True, **flags)
            if variant is None:
                continue
            out, weights, grad = variant
            if part == self.WEIGHTS:
                kept = _value(want.attrs.get("attn_weights"))
                if kept is not None and kept.shape == weights.shape and not _matches(kept, weights):
                    results.append(dataclasses.replace(
                        want, attrs={**want.attrs, "attn_weights": Tensor(weights.astype(kept.dtype))}))
                continue
            w = _value(want.value)
            if w is None or w.shape != out.shape or _matches(w, out):
                continue
            grads = dict(want.grads)
            if grad is not None and "0" in grads:
                grads["0"] = Tensor(grad.astype(_value(grads["0"]).dtype))
            results.append(dataclasses.replace(want, value=Tensor(out.astype(w.dtype)), grads=grads))
        return results

    def raised_hint(self, case, got):
        """A hint for a call that raised."""
        if case.expect_error or got.raised is None:
            return None
        if got.raised.get("phase") == "load_state_dict":
            return ("the graders load a state_dict with exactly w_q, w_k, w_v, w_o (weight and bias each, "
                    "nn.Linear(d_model, d_model)): no other parameters, and these names (a buffer of your "
                    "own is fine)")
        if len(case.args) >= 2 and _value(case.args[0]).shape[1] != _value(case.args[1]).shape[1]:
            return ("it failed on cross-attention (T_q != T_k): the keys and values come from `key` and "
                    "`value` (w_k(key), w_v(value)), with their own length T_k = key.size(1); split them "
                    "with that length, not the query's")
        return super().raised_hint(case, got)

    def diagnose(self, case, got, want):
        if want.probes:
            return self._layers_hint(got.probes, want.probes)
        if case.state is None:
            return None
        if self.part_of(case) == self.WEIGHTS:
            return self._weights_hint(case, got, want)
        for flags, hint in self._variants(case):
            try:
                result = _mha_variant(case, **flags)
            except Exception:  # noqa: BLE001 - a variant that does not apply to this case
                result = None
            # A variant that coincides with the right answer on this case names nothing.
            if result is not None and _matches(got.value, result[0]) and not _matches(want.value, result[0]):
                return hint
        g = _value(got.value)
        if g is not None and np.isnan(g).any():
            if _inverted_with_nan(case, g):
                return ("mask polarity inverted: in this book True = may attend, so fill the positions where "
                        "the mask is False (masked_softmax(scores, mask) does this); the NaN rows are queries "
                        "whose keys were all allowed, which your inverted mask blocks entirely")
            return "NaN in the output: a query whose keys are all masked needs masked_softmax (zeros, not NaN)"
        if _no_gradient(got, want):
            return "no gradient reached the query: do not detach or leave torch inside forward"
        return None

    @staticmethod
    def _layers_hint(got, want) -> str:
        keys, want_keys = set(got.get("state_dict_keys") or ()), set(want["state_dict_keys"])
        if keys != want_keys:
            missing, extra = sorted(want_keys - keys), sorted(keys - want_keys)
            if redacting():  # the answer's own names are not quoted for a hidden case
                extra = f"{len(extra)} of the answer's own" if extra else []
            return ("the module must hold exactly w_q, w_k, w_v, w_o (nn.Linear(d_model, d_model) with bias)"
                    + (f"; missing {missing}" if missing else "") + (f"; unexpected {extra}" if extra else ""))
        for name in ("w_q", "w_k", "w_v", "w_o"):
            if got.get(f"type:{name}") != want[f"type:{name}"]:
                other = "another class" if redacting() else f"a {got.get(f'type:{name}')}"
                return f"self.{name} must be an nn.Linear(d_model, d_model), not {other}"
        return "each of w_q, w_k, w_v, w_o is nn.Linear(d_model, d_model): weight (d_model, d_model), bias (d_model,)"

    def _weights_hint(self, case, got, want) -> str | None:
        attn = got.attrs.get("attn_weights")
        want_attn = _value(want.attrs.get("attn_weights"))
        a = _value(attn)
        if attn is None:
            return "self.attn_weights is not set: store the softmax weights (B, h, T_q, T_k) in forward"
        if a is None or want_attn is None:
            return "self.attn_weights must be a tensor (B, h, T_q, T_k)"
        if a.shape == want_attn.shape[:1] + want_attn.shape[2:]:
            return "self.attn_weights is averaged over the heads: keep one map per head, shape (B, h, T_q, T_k)"
        if a.shape != want_attn.shape:
            return f"self.attn_weights must have shape (B, h, T_q, T_k) = {want_attn.shape}"
        if np.isnan(a).any():
            return "NaN in the weights of a fully masked query: use masked_softmax, which returns zeros there"
        for flags, hint in self._variants(case):
            try:
                result = _mha_variant(case, **flags)
            except Exception:  # noqa: BLE001 - a variant that does not apply to this case
                result = None
            if result is not None and _matches(attn, result[1]) and not _matches(want_attn, result[1]):
                return "in self.attn_weights: " + hint
        return ("store in self.attn_weights the weights after the softmax (and the mask), before dropout, "
                "one map per head")

    @staticmethod
    def _variants(case):
        """The plausible mistakes, as flags of :func:`_mha_variant`, and their hints."""
        variants = [
            (dict(scale="none"), "no 1/√d_k scale: divide the scores Q Kᵀ by math.sqrt(d_k)"),
            (dict(scale="d_model"), "scaled by √d_model: each head's scores are divided by √d_k, d_k = d_model // h"),
            (dict(invert_mask=True), "mask polarity inverted: in this book True = may attend, so fill the "
                                     "positions where the mask is False (masked_softmax does this)"),
            (dict(mask_ignored=True), "the mask was ignored: pass it to masked_softmax(scores, mask)"),
            (dict(softmax_axis=-2), "softmax over the wrong axis (the queries): each query's weights over "
                                    "the keys must sum to 1, softmax over the last axis"),
            (dict(use_w_o=False), "w_o is missing: after merging the heads apply self.w_o"),
            (dict(split="no_transpose"), "heads split in the wrong order: view(B, h, T, d_k) without a transpose "
                                         "mixes tokens; reshape to (B, T, h, d_k), then transpose(1, 2)"),
            (dict(split="d_k_major"), "heads split in the wrong order: head i must be the contiguous slice "
                                      "i*d_k:(i+1)*d_k of the projection, reshape to (B, T, h, d_k)"),
            (dict(keys_from_query=True), "keys and values come from the query: project key with w_k and "
                                         "value with w_v (cross-attention passes different tensors)"),
            (dict(values_from_key=True), "the values were projected from `key`: use w_v(value)"),
        ]
        if case.kwargs.get("mask") is None:
            variants = [v for v in variants if "invert_mask" not in v[0] and "mask_ignored" not in v[0]]
        return variants
