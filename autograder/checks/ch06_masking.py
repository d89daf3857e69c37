"""Checks of chapter 6, masking (torch): ``padding_mask``, ``causal_mask``,
``decoder_mask`` and ``masked_softmax``.

The contract is ``shared/EXERCISES.md`` section 6; the references are in
``solutions/masking.py`` ("Attention Is All You Need", section 3.2.3). Every mask
is boolean with **True = may attend**.

Every ``diagnose`` recomputes the plausible wrong answers from the case's own
inputs (polarity inverted, the diagonal masked, the upper triangle, OR instead of
AND, the padding part missing, the softmax over the query axis, masked scores
filled with 0, ...) and names the one the student's result matches, so a hint is
a measurement, not a guess. ``masked_softmax`` additionally requires masked
positions to be *exactly* zero (not merely small) in the cases of its part
"masked positions exactly 0", which ``judge`` checks after the usual comparison.

The parts and their points are fixed by the chapter's prompts ("Graded parts").
Each mask exercise has a part "shape and bool dtype" (cases compared by
structure) and a part about which positions are True (the same inputs, judged on
the truth values even when the shape or dtype is off, so one mistake costs one
part). The contract names no error in this chapter: 1-D ids, ``size < 1`` and a
mask that does not fit the scores are advice worth no points.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .base import ADVICE, Case, CheckFailure, Exercise, Result, Tensor, dtype_verdict, redacting, register
from .base import as_array as _array, close

CHAPTER = "06_masking"

_close = functools.partial(close, rtol=2e-3, atol=1e-4, equal_nan=True)

_POLARITY = (
    "the polarity is inverted: in this book True = may attend (the convention of "
    "F.scaled_dot_product_attention), so the mask is True where the token is real "
    "and False where it is <pad> or in the future."
)


# --------------------------------------------------------------------------- helpers


def _dtype(value) -> str | None:
    """The torch dtype name of a decoded tensor (``"bool"``, ``"float32"``), or None."""
    if isinstance(value, Tensor):
        return str(getattr(value, "dtype", value.value.dtype))
    if isinstance(value, np.ndarray):
        return str(value.dtype)
    return None


def _same_bool(got, want) -> bool:
    """True when ``got`` holds the same truth values as ``want`` (any dtype, same shape)."""
    return got is not None and got.shape == want.shape and bool(np.array_equal(got.astype(bool), want))


def _mask_dtype_hint(got_value) -> str | None:
    dtype = _dtype(got_value)
    if dtype is None:
        return "return a torch.Tensor (a boolean mask), not a " + type(got_value).__name__ + "."
    if dtype != "bool":
        return (
            f"your mask has dtype {dtype}; masks are boolean. A comparison such as "
            "`ids != pad_id` or `torch.ones(T, T, dtype=torch.bool).tril()` already gives "
            "torch.bool: do not cast it with .int(), .long() or .float()."
        )
    return None


def _pad_id(case: Case) -> int:
    if len(case.args) > 1:
        return int(case.args[1])
    return int(case.kwargs.get("pad_id", 0))


def _ids_with_padding(rng, batch, length, pad_id, vocab=12, left=False):
    """``(B, T)`` int64 ids with random real lengths and ``pad_id`` after them (or before)."""
    ids = rng.integers(0, vocab, size=(batch, length))
    # Real tokens never equal pad_id; 0 stays a real token when pad_id != 0.
    ids = np.where(ids == pad_id, (pad_id + 1) % vocab, ids)
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[rng.integers(0, batch)] = length  # the longest sentence decides T
    for b, n in enumerate(lengths):
        if left:
            ids[b, : length - n] = pad_id
        else:
            ids[b, n:] = pad_id
    return ids.astype(np.int64)


def _random_padded_batch(rng, lengths):
    """Random ids for a hidden case, padded with a random ``pad_id`` on a random side.

    Args:
        rng: the cases' generator.
        lengths: the range of the length T, ``(low, high)`` as for ``rng.integers``
            (``high`` excluded).

    Returns:
        ``(ids, pad_id, left)``: ``(B, T)`` int64 ids with 1 ≤ B ≤ 5
        (:func:`_ids_with_padding`), the pad id (0, 1 or 3, 0 twice as likely) and
        whether the padding is on the left.
    """
    batch, length = int(rng.integers(1, 6)), int(rng.integers(*lengths))
    pad_id = int(rng.choice([0, 0, 1, 3]))
    left = bool(rng.integers(0, 2))
    return _ids_with_padding(rng, batch, length, pad_id, left=left), pad_id, left


class _MaskingExercise(Exercise):
    """An exercise whose hints also cover calls that raised, or did not raise."""

    def error_hint(self, case: Case) -> str | None:
        """Hint when a case that must raise did not raise the right error."""
        return None

    def call_hint(self, case: Case, raised: dict) -> str | None:
        """Hint when a case that must succeed raised."""
        return None

    def raised_hint(self, case: Case, got: Result) -> str | None:
        if case.expect_error:
            return self.error_hint(case)
        return self.call_hint(case, got.raised) if got.raised is not None else None


class _MaskExercise(_MaskingExercise):
    """A boolean mask exercise: a "shape and bool dtype" part (:attr:`SHAPE`) and a
    part about which positions are True (:attr:`TRUTH`)."""

    SHAPE: str = "shape and bool dtype"
    TRUTH: str = ""

    def pair(self, args, label, kwargs=None) -> list[Case]:
        """Two cases on one input: its shape and dtype, then its truth values."""
        kwargs = dict(kwargs or {})
        return [Case(args=args, kwargs=kwargs, part=self.SHAPE, compare="structure", label=label),
                Case(args=args, kwargs=kwargs, part=self.TRUTH, label=label)]

    def judge(self, case, got, want):
        if self.part_of(case) == self.TRUTH:
            got = _as_truth(got, want)
        return super().judge(case, got, want)


def _as_truth(got: Result, want: Result) -> Result:
    """``got`` with its mask read as the reference's boolean layout, so the truth part
    judges which positions are True and nothing else: a 0/1 mask of another dtype
    (``.long()``, ``.float()``, a numpy array) or with the same elements in another
    shape (``(B, T)`` for ``(B, 1, 1, T)``) becomes a bool tensor of the reference's
    shape. Anything else is returned unchanged (and fails as it is)."""
    g, w = _array(got.value), _array(want.value)
    if g is None or w is None or g.size != w.size or got.raised is not None:
        return got
    if g.dtype != bool and not np.isin(g, (0, 1)).all():
        return got
    marker = Tensor(g.astype(bool).reshape(w.shape))
    marker.dtype = getattr(want.value, "dtype", "bool")
    return dataclasses.replace(got, value=marker)


_IDS_SHAPE_HINT = ("the ids are a (B, T) batch; the reference checks that first "
                   "(`if ids.dim() != 2: raise ValueError(...)`) instead of returning a mask of another shape.")


# --------------------------------------------------------------------------- padding_mask


@register
class PaddingMask(_MaskExercise):
    """``padding_mask(ids, pad_id=0)``: ``(B, T)`` ids → ``(B, 1, 1, T)`` bool, True where not pad."""

    name = "padding_mask"
    chapter = CHAPTER
    kind = "function"
    what = "shape (B, 1, 1, T) and dtype bool, True at real tokens, pad_id honoured"
    parts = {"shape and bool dtype": 1, "True at real tokens": 1}
    TRUTH = "True at real tokens"

    def cases(self, rng, hidden):
        ids = np.array([[5, 7, 9, 0, 0], [3, 4, 6, 8, 2]], dtype=np.int64)
        cases = [
            *self.pair((Tensor(ids),), "2 sentences of lengths 3 and 5, <pad> = 0"),
            Case(args=(Tensor(np.array([[4, 0, 6, 2, 2]], dtype=np.int64)),), kwargs={"pad_id": 2},
                 part=self.TRUTH, label="pad_id=2 (here 0 is a real token)"),
            Case(args=(Tensor(np.array([5, 7, 0], dtype=np.int64)),), part=ADVICE,
                 label="1-D ids (no batch axis)", expect_error=(ValueError,)),
        ]
        if not hidden:
            return cases
        for _ in range(4):
            ids, pad_id, _ = _random_padded_batch(rng, (1, 9))
            kwargs = {} if pad_id == 0 else {"pad_id": pad_id}
            cases += self.pair((Tensor(ids),), f"random {ids.shape} ids, pad_id={pad_id}", kwargs)
        ids = _ids_with_padding(rng, 3, 6, 0)
        ids[1] = 0  # a sentence that is all padding
        cases.append(Case(args=(Tensor(ids),), part=self.TRUTH, label="a (3, 6) batch with one all-<pad> row"))
        cases.append(Case(args=(Tensor(np.zeros((2, 3, 4), dtype=np.int64)),), part=ADVICE,
                          label="3-D ids", expect_error=(ValueError,)))
        return cases

    def error_hint(self, case):
        return _IDS_SHAPE_HINT

    def diagnose(self, case, got, want):
        hint = _mask_dtype_hint(got.value)
        g, w = _array(got.value), _array(want.value)
        ids = _array(case.args[0])
        if g is not None and g.shape != w.shape:
            batch, length = ids.shape
            if g.shape == (batch, length):
                return ("add the two singleton axes: (B, T) → (B, 1, 1, T), e.g. mask[:, None, None, :], "
                        "so the mask broadcasts over the heads and the query positions.")
            if g.shape in ((batch, 1, length), (batch, length, 1)):
                return "one axis is missing: the shape is (B, 1, 1, T) — one for the heads, one for the queries."
            if sorted(g.shape) == sorted(w.shape):
                return "the axes are in the wrong order: the keys (T) are the LAST axis, (B, 1, 1, T)."
            return f"the mask must have shape (B, 1, 1, T) = {w.shape}."
        if hint:
            return hint
        if g is None or g.shape != w.shape:
            return None
        if _same_bool(g, ~w):
            return _POLARITY
        pad_id = _pad_id(case)
        if pad_id != 0 and _same_bool(g, (ids != 0)[:, None, None, :]):
            return f"you compared with 0, but this case has pad_id={pad_id}: compare with the pad_id argument."
        return None


# --------------------------------------------------------------------------- causal_mask


@register
class CausalMask(_MaskExercise):
    """``causal_mask(size)``: ``(1, 1, T, T)`` bool, True on and below the diagonal."""

    name = "causal_mask"
    chapter = CHAPTER
    kind = "function"
    what = "shape (1, 1, T, T) and dtype bool, True on and below the diagonal"
    parts = {"shape and bool dtype": 1, "True on and below the diagonal": 1}
    TRUTH = "True on and below the diagonal"

    def cases(self, rng, hidden):
        cases = [
            *self.pair((4,), "size 4"),
            *self.pair((1,), "size 1 (a single token sees itself)"),
            Case(args=(0,), part=ADVICE, label="size 0", expect_error=(ValueError,)),
        ]
        if not hidden:
            return cases
        for size in sorted({int(s) for s in rng.integers(2, 40, size=4)}):
            cases += self.pair((size,), f"size {size}")
        cases.append(Case(args=(-int(rng.integers(1, 5)),), part=ADVICE, label="a negative size",
                          expect_error=(ValueError,)))
        return cases

    def error_hint(self, case):
        return ("a mask needs at least one position: `if size < 1: raise ValueError(...)` "
                "(torch.ones(0, 0) would silently give an empty mask).")

    def diagnose(self, case, got, want):
        g, w = _array(got.value), _array(want.value)
        size = int(case.args[0])
        if g is not None and g.shape != w.shape:
            if g.shape == (size, size):
                return ("add two leading axes: (T, T) → (1, 1, T, T), e.g. mask[None, None], so the mask "
                        "broadcasts over the batch and the heads.")
            return f"the mask must have shape (1, 1, T, T) = {w.shape}."
        hint = _mask_dtype_hint(got.value)
        if hint:
            return hint
        if g is None:
            return None
        tri = np.tril(np.ones((size, size), dtype=bool))[None, None]
        strict_lower = np.tril(np.ones((size, size), dtype=bool), k=-1)[None, None]
        upper = np.triu(np.ones((size, size), dtype=bool))[None, None]
        if _same_bool(g, ~tri):
            return _POLARITY + " Here True should be ON and BELOW the diagonal (tril), not above it."
        if _same_bool(g, strict_lower):
            return ("the diagonal is masked: position i must be allowed to attend to itself. Use "
                    "tril() (diagonal included), not tril(-1) / tril(diagonal=-1).")
        if _same_bool(g, upper):
            return ("you kept the upper triangle (the FUTURE positions): use tril(), True on and below "
                    "the diagonal — query row i may see keys 0..i.")
        return None


# --------------------------------------------------------------------------- decoder_mask


@register
class DecoderMask(_MaskExercise):
    """``decoder_mask(tgt_ids, pad_id=0)``: ``(B, 1, T, T)`` = padding ∧ causal."""

    name = "decoder_mask"
    chapter = CHAPTER
    kind = "function"
    what = "shape (B, 1, T, T) and dtype bool, padding (on the keys) AND causal, pad_id honoured"
    parts = {"shape and bool dtype": 1, "padding and causal combined": 1}
    TRUTH = "padding and causal combined"
    uses = ("padding_mask", "causal_mask")

    def cases(self, rng, hidden):
        ids = np.array([[1, 7, 9, 2, 0], [1, 4, 2, 0, 0]], dtype=np.int64)
        cases = [
            *self.pair((Tensor(ids),), "2 target sentences of lengths 4 and 3, <pad> = 0"),
            Case(args=(Tensor(np.array([[0, 5, 0, 9, 9]], dtype=np.int64)),), kwargs={"pad_id": 9},
                 part=self.TRUTH, label="pad_id=9 (here 0 is a real token)"),
            Case(args=(Tensor(np.array([1, 5, 0], dtype=np.int64)),), part=ADVICE,
                 label="1-D ids (no batch axis)", expect_error=(ValueError,)),
        ]
        if not hidden:
            return cases
        for _ in range(4):
            ids, pad_id, left = _random_padded_batch(rng, (2, 10))
            kwargs = {} if pad_id == 0 else {"pad_id": pad_id}
            side = "left" if left else "right"
            cases += self.pair((Tensor(ids),), f"random {ids.shape} ids, {side} padding, pad_id={pad_id}",
                               kwargs)
        cases += self.pair((Tensor(_ids_with_padding(rng, 1, 1, 0)),), "a (1, 1) batch")
        cases.append(Case(args=(Tensor(np.zeros((2, 2, 3), dtype=np.int64)),), part=ADVICE,
                          label="3-D ids", expect_error=(ValueError,)))
        return cases

    def error_hint(self, case):
        return _IDS_SHAPE_HINT

    def diagnose(self, case, got, want):
        g, w = _array(got.value), _array(want.value)
        ids = _array(case.args[0])
        batch, length = ids.shape
        pad = (ids != _pad_id(case))[:, None, None, :]  # (B, 1, 1, T)
        causal = np.tril(np.ones((length, length), dtype=bool))[None, None]  # (1, 1, T, T)
        if g is not None and g.shape != w.shape:
            if g.shape in ((1, 1, length, length), (length, length)):
                return ("the padding part is missing (your mask has no batch axis): combine "
                        "padding_mask(tgt_ids, pad_id) (B, 1, 1, T) with causal_mask(T) (1, 1, T, T) "
                        "by `&`, which broadcasts to (B, 1, T, T).")
            if g.shape == (batch, 1, 1, length):
                return ("the causal part is missing: combine the padding mask with causal_mask(T) by `&` "
                        "to get (B, 1, T, T).")
            return f"the mask must have shape (B, 1, T, T) = {w.shape}."
        hint = _mask_dtype_hint(got.value)
        if hint:
            return hint
        if g is None:
            return None
        if _same_bool(g, ~w):
            return _POLARITY
        if _same_bool(g, pad | causal):
            return ("you combined the masks with OR (|): a position may be attended only if it is "
                    "real AND not in the future, so use AND (&).")
        if _same_bool(g, np.broadcast_to(causal, w.shape)):
            return "the padding part is missing: AND the causal mask with padding_mask(tgt_ids, pad_id)."
        if _same_bool(g, np.broadcast_to(pad, w.shape)):
            return "the causal part is missing: AND the padding mask with causal_mask(T)."
        rows = np.swapaxes(pad, -1, -2)  # (B, 1, T, 1): padding on the query axis
        if _same_bool(g, np.broadcast_to(rows & causal, w.shape)) or _same_bool(
                g, np.broadcast_to(rows & pad & causal, w.shape)):
            return ("the padding is applied on the query axis (rows): your padded queries see no key at all. "
                    "The mask hides padded KEYS, the last axis: padding_mask(tgt_ids, pad_id), shape "
                    "(B, 1, 1, T), broadcasts over the rows; AND it with causal_mask(T) — no (B, 1, T, 1) "
                    "part (the rows of padded queries are ignored by the loss anyway).")
        pad0 = (ids != 0)[:, None, None, :]
        if _pad_id(case) != 0 and _same_bool(g, pad0 & causal):
            return f"you compared with 0, but this case has pad_id={_pad_id(case)}: pass pad_id on."
        strict = np.tril(np.ones((length, length), dtype=bool), k=-1)[None, None]
        if _same_bool(g, pad & strict):
            return "the diagonal is masked: position i must be allowed to attend to itself (tril, not tril(-1))."
        return None


# --------------------------------------------------------------------------- masked_softmax


def _softmax(x, axis=-1):
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    with np.errstate(invalid="ignore", divide="ignore"):
        return e / np.sum(e, axis=axis, keepdims=True)


def _masked_softmax_variant(scores, mask, axis=-1, fill=-np.inf, zero_after=True):
    """A trusted masked softmax with the knobs the plausible mistakes turn."""
    s = np.asarray(scores, dtype=np.float64)
    m = np.broadcast_to(mask, s.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        p = _softmax(np.where(m, s, fill), axis=axis)
        if zero_after:
            p = np.where(m, p, 0.0)
    return p


@register
class MaskedSoftmax(_MaskingExercise):
    """``masked_softmax(scores, mask)``: masked positions exactly 0, fully masked rows all 0."""

    name = "masked_softmax"
    chapter = CHAPTER
    kind = "function"
    what = ("softmax over the keys (float16/32/64, extreme scores, input left unchanged), masked weights "
            "exactly 0, fully masked rows 0 (no NaN, no NaN gradient)")
    parts = {"values": 2, "masked positions exactly 0": 1, "fully masked rows give zeros, not NaN": 1}

    VALUES, EXACT, FULL = parts

    def _rows(self, scores, mask, label, **kw) -> Case:
        """A case in "values", or in the fully-masked-rows part when ``mask`` has a
        row whose keys are all masked."""
        full = not np.broadcast_to(mask, scores.shape).any(axis=-1).all()
        return Case(args=(Tensor(scores), Tensor(mask)), part=self.FULL if full else self.VALUES, label=label, **kw)

    def cases(self, rng, hidden):
        scores = np.array([[2.0, 1.0, 0.5, 3.0], [0.0, 1.0, 2.0, 3.0]], dtype=np.float32)
        keep_three = np.array([True, True, True, False])
        causal = np.tril(np.ones((3, 3), dtype=bool))[None, None]
        fully = np.array([[[True, False, True], [False, False, False]]])
        big = np.array([[-3000.0, -8000.0, -5000.0, 9000.0], [-2500.0, 4000.0, -9500.0, 7000.0]], dtype=np.float32)
        big_mask = np.array([[True, True, True, False], [True, False, True, False]])
        cases = [
            Case(args=(Tensor(scores), Tensor(keep_three)), return_args=(0,), part=self.VALUES,
                 label="2x4 scores, the last key masked (scores must not change)"),
            Case(args=(Tensor(rng.normal(size=(2, 1, 3, 3)).astype(np.float32)), Tensor(causal)), part=self.VALUES,
                 label="(2, 1, 3, 3) scores with a causal mask"),
            Case(args=(Tensor(scores), Tensor(keep_three)), part=self.EXACT, compare="structure",
                 label="2x4 scores, the last key masked: its weight must be exactly 0"),
            # "The fill value must lie below every real score, exist in float16 too" (the
            # prompt's hint) is a rule of the values: the visible check decides it as the
            # hidden scales below do. A fill of -20 or -1e4 beats the first pair's real
            # scores, -1e9 the second's and does not fit in float16.
            Case(args=(Tensor(big), Tensor(big_mask)), part=self.VALUES,
                 label="2x4 float32 scores of magnitude 1e4: the masked fill must be below -9500"),
            Case(args=(Tensor(big), Tensor(big_mask)), part=self.EXACT, compare="structure",
                 label="2x4 float32 scores of magnitude 1e4: masked weights exactly 0"),
            Case(args=(Tensor(-1e10 + scores.astype(np.float64)), Tensor(keep_three)), rtol=1e-4, atol=1e-6,
                 part=self.VALUES, label="2x4 float64 scores near -1e10: the masked fill must be below every score"),
            Case(args=(Tensor(scores.astype(np.float16) * 4), Tensor(keep_three)), rtol=1e-2, atol=2e-3,
                 part=self.VALUES, label="2x4 float16 scores: the masked fill must exist in float16 (down to -65504)"),
            Case(args=(Tensor(np.array([[[0.5, -1.0, 2.0], [1.0, 2.0, 3.0]]], dtype=np.float32),
                              requires_grad=True), Tensor(fully)), part=self.FULL,
                 backward=np.ones((1, 2, 3), dtype=np.float32) * np.array([1.0, -2.0, 0.5], dtype=np.float32),
                 label="a row whose keys are ALL masked (all zeros, no NaN, zero gradient)"),
            Case(args=(Tensor(np.zeros((2, 3, 4), dtype=np.float32)), Tensor(np.ones((2, 1, 5), dtype=bool))),
                 part=ADVICE, label="a (2, 1, 5) mask for (2, 3, 4) scores", expect_error=(ValueError,)),
            # mask=None is one rule of the prompt beside the graded parts: advice, so that an
            # answer without it keeps the "values" part its masked cases earn.
            Case(args=(Tensor(scores), None), part=ADVICE, label="mask=None: the plain softmax"),
        ]
        if not hidden:
            return cases
        # float16 keeps ~3 digits: an answer computed another way (logsumexp, float32
        # inside) may differ by a few units in the last place of scores up to ~10.
        for dtype, tol in ((np.float32, (1e-5, 1e-6)), (np.float64, (1e-7, 1e-9)), (np.float16, (1e-2, 2e-3))):
            batch, heads, length = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(2, 8))
            ids = _ids_with_padding(rng, batch, length, 0, left=bool(rng.integers(0, 2)))
            pad = (ids != 0)[:, None, None, :]  # (B, 1, 1, T): every sentence keeps a real token
            causal = np.tril(np.ones((length, length), dtype=bool))[None, None]  # (1, 1, T, T)
            scores = (rng.normal(size=(batch, heads, length, length)) * rng.choice([0.5, 2.0, 5.0])).astype(dtype)
            name = np.dtype(dtype).name
            cases.append(Case(args=(Tensor(scores), Tensor(pad)), rtol=tol[0], atol=tol[1], return_args=(0,),
                              part=self.VALUES, label=f"{name} scores {scores.shape}, padding mask {pad.shape}"))
            if dtype == np.float16:  # whether the fill exists in float16 is the values' rule: no other part's
                continue
            cases.append(Case(args=(Tensor(scores), Tensor(pad)), rtol=tol[0], atol=tol[1], part=self.EXACT,
                              compare="structure", label=f"{name} scores {scores.shape}, padding mask {pad.shape}: "
                                                         "masked weights exactly 0"))
            cases.append(self._rows(scores, pad & causal, rtol=tol[0], atol=tol[1],
                                    label=f"{name} scores {scores.shape}, padding & causal mask"))
        # Rows with every key masked, in a full-shape random mask.
        shape = (int(rng.integers(1, 4)), int(rng.integers(2, 6)), int(rng.integers(2, 7)))
        mask = rng.random(shape) < 0.6
        mask[0, int(rng.integers(0, shape[1]))] = False  # one fully masked row
        scores = rng.normal(size=shape).astype(np.float32)
        cases.append(Case(args=(Tensor(scores, requires_grad=True), Tensor(mask)), part=self.FULL,
                          backward=rng.normal(size=shape).astype(np.float32),
                          label=f"{shape} scores, random mask with a fully masked row (values and gradient)"))
        # Extreme scales: scores of magnitude 1e4 (a naive exp overflows) and real
        # scores far below -1e4 (a fill of -1e4 or -1e9 would beat them).
        shape = (2, int(rng.integers(3, 7)))
        mask = rng.random(shape) < 0.7
        mask[:, 0] = True  # every row keeps a key ...
        mask[:, -1] = False  # ... and masks one, so a too-small fill always shows
        big = (rng.uniform(-1.0, 1.0, size=shape) * 1e4).astype(np.float32)
        cases.append(Case(args=(Tensor(big), Tensor(mask)), part=self.VALUES,
                          label=f"{shape} float32 scores of magnitude 1e4"))
        cases.append(Case(args=(Tensor(big), Tensor(mask)), part=self.EXACT, compare="structure",
                          label=f"{shape} float32 scores of magnitude 1e4: masked weights exactly 0"))
        # float64, so that a logsumexp-based answer keeps its digits at this magnitude.
        low = -1e10 + rng.normal(size=shape) * 10
        cases.append(Case(args=(Tensor(low), Tensor(mask)), rtol=1e-4, atol=1e-6, part=self.VALUES,
                          label=f"{shape} float64 scores near -1e10 (the masked fill must be below every score)"))
        low16 = (-3e4 + rng.normal(size=shape) * 40).astype(np.float16)
        cases.append(Case(args=(Tensor(low16), Tensor(mask)), rtol=2e-3, atol=1e-3, part=self.VALUES,
                          label=f"{shape} float16 scores near -3e4 (float16 ends at -65504)"))
        cases.append(Case(args=(Tensor(rng.normal(size=(3, 4))), None), part=ADVICE,
                          label="mask=None (a plain softmax)"))
        cases.append(Case(args=(Tensor(rng.normal(size=(2, 3, 4)).astype(np.float32)),
                                Tensor(np.ones((3, 3), dtype=bool))), part=ADVICE,
                          label="a (3, 3) mask for (2, 3, 4) scores", expect_error=(ValueError,)))
        return cases

    def judge(self, case: Case, got: Result, want: Result) -> list[str]:
        notes = super().judge(case, got, want)
        if self.part_of(case) != self.EXACT:
            return notes
        g = _array(got.value)
        mask = np.broadcast_to(_array(case.args[1]), g.shape)
        leaked = np.argwhere((~mask) & (g != 0))
        if leaked.size:
            idx = tuple(int(i) for i in leaked[0])
            where = f" ({case.label})" if case.label else ""
            holds = "another value" if redacting() else f"{float(g[idx]):.3g}"
            raise CheckFailure(
                f"masked positions must be exactly 0, but the output holds {holds} at masked "
                f"index {idx}{where}\n  Hint: a large negative fill (-1e4, -100) only makes masked weights "
                "small; fill with -inf or torch.finfo(scores.dtype).min and set the masked weights to exactly "
                "0 after the softmax (weights.masked_fill(~mask, 0.0))."
            )
        return notes

    def error_hint(self, case):
        return ("check the shapes first: if torch.broadcast_shapes(mask.shape, scores.shape) != scores.shape "
                "(or it raises), raise ValueError saying which shapes you got.")

    def call_hint(self, case, raised):
        message = raised.get("message", "")
        if "without overflow" in message:
            return ("a fixed fill such as -1e9 does not fit in float16 (its most negative number is -65504): "
                    "use torch.finfo(scores.dtype).min, which fits every float dtype.")
        if len(case.args) > 1 and case.args[1] is None:
            return "mask=None means no mask at all: return torch.softmax(scores, dim=-1)."
        return None

    def diagnose(self, case, got, want):
        g = _array(got.value)
        w = _array(want.value)
        scores = _array(case.args[0])
        mask_arr = _array(case.args[1]) if len(case.args) > 1 else None
        after = got.args_after.get("0")
        if after is not None and scores is not None and _array(after) is not None:
            if not _close(_array(after), scores, rtol=0, atol=0):
                return ("you changed the caller's scores in place (masked_fill_ with an underscore, or "
                        "scores[~mask] = ...): use the out-of-place scores.masked_fill(~mask, value).")
        for grad in got.grads.values():
            ga = _array(grad)
            if g is not None and np.isnan(g.astype(np.float64)).any():
                break  # the output itself is NaN: the value hints below say why
            if ga is not None and np.isnan(ga.astype(np.float64)).any():
                return ("the gradient is NaN on a fully masked row: an additive -inf mask (scores + bias) lets "
                        "the NaN of softmax([-inf, ..., -inf]) flow back through the addition, even if you zero "
                        "the output afterwards. Fill with torch.finfo(scores.dtype).min (finite), or use "
                        "masked_fill, whose backward sends 0 to the masked positions.")
        if g is None or w is None or g.shape != w.shape:
            if g is not None and w is not None:
                return f"return weights of the scores' shape {w.shape} (the mask only broadcasts onto them)."
            return None
        if not dtype_verdict(_dtype(got.value) or "", _dtype(want.value) or "")[0]:
            return (f"{_dtype(want.value)} scores need {_dtype(want.value)} weights (or a wider float): "
                    f"yours are {_dtype(got.value)}, which loses precision.")
        if mask_arr is None:
            return None
        g64 = g.astype(np.float64)
        mask = np.broadcast_to(mask_arr, g.shape)
        full_rows = ~mask.any(axis=-1)  # (..., T_q): rows whose keys are all masked
        if np.isnan(g64).any():
            nan_rows = np.isnan(g64).any(axis=-1)
            if full_rows.any() and np.array_equal(nan_rows, full_rows):
                return ("NaN exactly on the rows whose keys are ALL masked: softmax over [-inf, ..., -inf] "
                        "is 0/0. Return zeros for such rows: fill with torch.finfo(dtype).min instead of "
                        "-inf, and zero the masked weights after the softmax.")
            if np.abs(scores.astype(np.float64)).max() > 80:
                return "exp overflowed to inf (inf/inf = NaN): subtract each row's maximum, or use torch.softmax."
            return "the output has NaN: fully masked rows must give zeros, and exp must not overflow."
        s = scores.astype(np.float64)
        if full_rows.any() and np.allclose(g64[full_rows].sum(axis=-1), 1.0, atol=1e-3):
            return ("a row whose keys are ALL masked must be all zeros, but yours sums to 1 (a uniform "
                    "distribution over masked keys): zero the masked weights after the softmax "
                    "(weights.masked_fill(~mask, 0.0)).")
        if _close(g64, _masked_softmax_variant(s, ~mask)):
            return _POLARITY
        if _close(g64, _softmax(s)):
            return "the mask was ignored: your weights equal a plain softmax of the scores."
        if s.ndim >= 2 and _close(g64, _masked_softmax_variant(s, mask, axis=-2)):
            return ("the softmax runs over axis -2 (the queries): normalise over the LAST axis, the keys "
                    "(dim=-1), so each query's weights sum to 1.")
        live = mask.any(axis=-1)
        sums = g64.sum(axis=-1)
        if live.any() and not np.allclose(sums[live], 1.0, atol=1e-2) and s[mask].min() < -1e3:
            bad = float(sums[live][np.argmax(np.abs(sums[live] - 1.0))])
            fills = [f for f in (-1.0, -10.0, -20.0, -50.0, -100.0, -1e3, -1e4, -1e5, -1e9) if f > s[mask].min()]
            if redacting():  # the sums and the scores are the hidden case's
                sums_to, low, at = "does not sum to 1", "", "at such large negative scores"
            else:
                sums_to = f"sums to {bad:.3g}, not 1"
                low, at = f" (they go down to {s[mask].min():.3g} here)", f"at scores of {s[mask].min():.3g}"
            if any(_close(g64, _masked_softmax_variant(s, mask, fill=f, zero_after=z))
                   for f in fills for z in (True, False)):
                return (f"a row with unmasked keys {sums_to}: your masked fill is not below "
                        f"the real scores{low}. Fill with -inf or "
                        "torch.finfo(scores.dtype).min, not a fixed number such as 0, -1e4 or -1e9.")
            return (f"a row with unmasked keys {sums_to}: {at} the "
                    f"{_dtype(got.value)} arithmetic lost the differences between them. Subtract each row's "
                    "maximum before exp (torch.softmax and torch.log_softmax do), and do not add a large "
                    "number (logsumexp) back to the scores before subtracting.")
        if _close(g64, _masked_softmax_variant(s, mask, fill=0.0)) or _close(
            g64, _masked_softmax_variant(s, mask, fill=0.0, zero_after=False)
        ):
            return ("masked scores were filled with 0, but exp(0) = 1 still takes a share of the weight: "
                    "fill with -inf (or torch.finfo(dtype).min) before the softmax.")
        if live.any() and not np.allclose(sums[live], 1.0, atol=1e-2):
            bad = float(sums[live][np.argmax(np.abs(sums[live] - 1.0))])
            sums_to = "does not sum to 1" if redacting() else f"sums to {bad:.3g}, not 1"
            return f"a row with unmasked keys {sums_to}: normalise over the last axis."
        return None
