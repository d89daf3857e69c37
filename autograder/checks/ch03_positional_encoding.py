"""Checks of chapter 3, positional encoding: ``sinusoidal_positional_encoding``,
``PositionalEncoding`` and ``relative_position_matrix``.

The contract is ``shared/EXERCISES.md`` section 3; the references are in
``solutions/positional.py`` ("Attention Is All You Need", section 3.5).

Parts (what each exercise teaches; the points are split over them):

* ``sinusoidal_positional_encoding``: "shape (max_len, d_model)" 1 · "sin/cos pairs
  (d_model = 2)" 1 · "frequencies 1/10000^(2i/d_model)" 2 · "odd d_model raises
  ValueError" 1;
* ``PositionalEncoding``: "pe: a buffer, not a parameter" 1 · "x + pe[:seq_len]" 2 ·
  "dropout on the sum" 1 · "seq_len > max_len raises ValueError" 1;
* ``relative_position_matrix``: "one 2x2 rotation by k (d_model = 2)" 1 ·
  "block-diagonal, w_i = 1/10000^(2i/d_model)" 2 (an odd ``d_model`` is advice here).

``PositionalEncoding`` and ``relative_position_matrix`` may call
``sinusoidal_positional_encoding`` (``uses``): when that one fails its check, they
are graded with the reference table in its place.

The diagnoses rebuild the table with one plausible mistake at a time (sin and cos
swapped, ``i`` instead of ``2i`` in the exponent, positions from 1, the halves
layout, dropout before the addition, the rotation by ``-k``, ...) and name the one
the result equals.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from .base import ADVICE, Case, CheckFailure, Exercise, Tensor, redacting, register
from .base import as_array as _array, close

CHAPTER = "03_positional_encoding"

_close = functools.partial(close, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- helpers


def _pe(max_len, d_model, *, swap=False, exponent="2i", start=0, layout="interleaved"):
    """A trusted sinusoidal table with switches for the plausible mistakes."""
    pos = np.arange(start, start + max_len)[:, None]  # (max_len, 1)
    cols = np.arange(d_model)  # (d_model,)
    two_i = {"2i": 2 * (cols // 2), "i": cols // 2, "column": cols, "2column": 2 * cols}[exponent]
    angle = pos / 10000 ** (two_i / d_model)  # (max_len, d_model)
    first, second = (np.cos, np.sin) if swap else (np.sin, np.cos)
    if layout == "halves":
        half = np.arange(d_model // 2)
        a = pos / 10000 ** (2 * half / d_model)  # (max_len, d_model / 2)
        return np.concatenate([first(a), second(a)], axis=1)
    return np.where(cols % 2 == 0, first(angle), second(angle))


_PE_VARIANTS = [
    ("sin and cos are swapped: even columns 2i get sin, odd columns 2i+1 get cos.", dict(swap=True)),
    ("the exponent uses i where the paper has 2i: pos / 10000**(2i / d_model), and both columns 2i and "
     "2i+1 share that frequency.", dict(exponent="i")),
    ("each column got its own frequency: columns 2i and 2i+1 share pos / 10000**(2i / d_model), so the "
     "odd column uses 2i, not 2i+1.", dict(exponent="column")),
    ("the exponent is doubled: for columns 2i and 2i+1 it is 2i / d_model (use the even column index "
     "2i, not 2 × column).", dict(exponent="2column")),
    ("positions start at 0: row pos holds the encoding of position pos (np.arange(max_len)).", dict(start=1)),
    ("sin and cos are interleaved, not in two halves: column 2i is sin, column 2i+1 is cos of the same "
     "frequency.", dict(layout="halves")),
]


def _pe_hint(got, max_len, d_model, want):
    for hint, flags in _PE_VARIANTS:
        value = _pe(max_len, d_model, **flags)
        if _close(got, value) and not _close(value, want):
            return hint
    return None


# --------------------------------------------------------------------------- sinusoidal_positional_encoding


@register
class SinusoidalPositionalEncoding(Exercise):
    """``sinusoidal_positional_encoding(max_len, d_model) -> (max_len, d_model)``."""

    name = "sinusoidal_positional_encoding"
    chapter = CHAPTER
    kind = "function"
    what = ("the (max_len, d_model) table: sin on even, cos on odd columns, frequencies 1/10000**(2i/d_model), "
            "odd d_model raises ValueError")

    parts = {"shape (max_len, d_model)": 1, "sin/cos pairs (d_model = 2)": 1,
             "frequencies 1/10000^(2i/d_model)": 2, "odd d_model raises ValueError": 1}

    def cases(self, rng, hidden):
        shape, pair, frequencies, odd = self.parts
        cases = [
            Case(args=(10, 6), label="max_len=10, d_model=6: one row per position", compare="structure", part=shape),
            Case(args=(6, 2), label="d_model=2: PE[pos] = (sin pos, cos pos)", atol=1e-5, part=pair),
            Case(args=(4, 4), label="the lecture notes' table: max_len=4, d_model=4", atol=1e-5, part=frequencies),
            Case(args=(10, 6), label="max_len=10, d_model=6", atol=1e-5, part=frequencies),
            Case(args=(5, 3), label="odd d_model=3: sin/cos come in pairs, raise ValueError",
                 expect_error=(ValueError,), part=odd),
        ]
        if not hidden:
            return cases
        for _ in range(2):
            max_len, d_model = int(rng.integers(1, 60)), 2 * int(rng.integers(1, 33))
            cases.append(Case(args=(max_len, d_model), compare="structure", part=shape,
                              label=f"random max_len={max_len}, d_model={d_model}: the shape"))
        max_len = int(rng.integers(1, 60))
        cases.append(Case(args=(max_len, 2), label=f"d_model=2, max_len={max_len}", atol=1e-5, part=pair))
        for _ in range(3):
            max_len, d_model = int(rng.integers(1, 60)), 2 * int(rng.integers(2, 33))
            cases.append(Case(args=(max_len, d_model), label=f"random max_len={max_len}, d_model={d_model}",
                              atol=1e-5, part=frequencies))
        cases.append(Case(args=(1, 8), label="a single position (max_len=1): sin 0 = 0, cos 0 = 1", atol=1e-5,
                          part=frequencies))
        cases.append(Case(args=(50, 512), label="the paper's d_model=512, 50 positions", atol=1e-5,
                          part=frequencies))
        d_model = 2 * int(rng.integers(1, 20)) + 1
        cases.append(Case(args=(7, d_model), label=f"odd d_model={d_model}: raise ValueError",
                          expect_error=(ValueError,), part=odd))
        return cases

    def tolerated(self, case, want):
        """The frequencies part accepts sin and cos swapped (cos on even columns): which
        of the pair comes first is the rule of "sin/cos pairs", which states it, so a
        swap is not charged again to the frequencies. Both parts accept the table
        transposed, (d_model, max_len): the layout is the rule of "shape (max_len,
        d_model)"."""
        _, pair, frequencies, _ = self.parts
        w = _array(want.value)
        if self.part_of(case) not in (pair, frequencies) or w is None or w.ndim != 2 or case.expect_error:
            return []
        tables = [w]
        if self.part_of(case) == frequencies:
            max_len, d_model = case.args
            tables.append(_pe(max_len, d_model, swap=True).astype(w.dtype))
        return [dataclasses.replace(want, value=t) for t in tables[1:] + [t.T.copy() for t in tables]]

    def raised_hint(self, case, got):
        if case.expect_error:
            return "check d_model % 2 at the start and raise ValueError('d_model must be even ...')."
        return None

    def diagnose(self, case, got, want):
        g = _array(got.value)
        if g is None:
            return "return a numpy array of shape (max_len, d_model)."
        max_len, d_model = case.args
        if np.issubdtype(g.dtype, np.floating) and g.dtype.itemsize < 8:
            return (f"the table is {g.dtype}; the reference returns numpy's default float64 (np.arange, np.sin, "
                    "or torch with dtype=torch.float64, then .numpy()).")
        if g.shape == (d_model, max_len) and _close(g.T, _array(want.value)):
            return "rows are positions and columns are dimensions: shape (max_len, d_model)."
        return _pe_hint(g, max_len, d_model, _array(want.value))


# --------------------------------------------------------------------------- PositionalEncoding


def _pe_case(rng, batch, seq_len, d_model, max_len, *, dropout=0.1, train=False, label, backward=False, seed=0,
             part="", compare="full"):
    x = rng.normal(size=(batch, seq_len, d_model)).astype(np.float32)
    weight = Tensor(rng.normal(size=x.shape).astype(np.float32)) if backward else None
    if compare == "structure":
        # The buffer part reads the module's buffers and parameters after the
        # constructor; it calls no method of the answer's own (nn.Module's
        # extra_repr, whose result is not judged), so a mistake in forward is
        # charged to the parts about forward only.
        return Case(init={"d_model": d_model, "max_len": max_len, "dropout": dropout}, method="extra_repr",
                    probes=("buffer_names", "parameter_names"), label=label, part=part, compare=compare)
    return Case(init={"d_model": d_model, "max_len": max_len, "dropout": dropout},
                args=(Tensor(x, requires_grad=backward),), train=train, backward=weight, seed=seed,
                label=label, rtol=1e-5, atol=1e-5, part=part, compare=compare)


@register
class PositionalEncodingCheck(Exercise):
    """``PositionalEncoding(d_model, max_len=5000, dropout=0.1)``: ``dropout(x + pe[:T])``."""

    name = "PositionalEncoding"
    chapter = CHAPTER
    kind = "class"
    what = ("dropout(x + pe[:T]) in eval and train mode, pe a buffer named pe (not a parameter), "
            "T > max_len raises ValueError")

    parts = {"pe: a buffer, not a parameter": 1, "x + pe[:seq_len]": 2, "dropout on the sum": 1,
             "seq_len > max_len raises ValueError": 1}
    uses = ("sinusoidal_positional_encoding",)

    def cases(self, rng, hidden):
        buffer, added, dropout, too_long = self.parts
        cases = [
            _pe_case(rng, 2, 5, 8, 50, label="d_model 8, max_len 50: the buffers and parameters", part=buffer,
                     compare="structure"),
            _pe_case(rng, 2, 5, 8, 50, label="eval mode: x (2, 5, 8) + pe[:5] (dropout off)", part=added),
            _pe_case(rng, 1, 3, 4, 10, dropout=0.0, backward=True, part=added,
                     label="dropout=0.0, x (1, 3, 4), max_len=10: the values, and gradients flow back to x"),
            _pe_case(rng, 1, 6, 4, 6, label="seq_len == max_len = 6 is allowed", part=added),
            _pe_case(rng, 2, 4, 8, 20, dropout=0.5, train=True, seed=7, part=dropout,
                     label="train mode, dropout=0.5: dropout(x + pe), one dropout on the sum"),
            Case(init={"d_model": 4, "max_len": 6}, args=(Tensor(np.zeros((1, 7, 4), np.float32)),), part=too_long,
                 label="7 tokens with max_len=6: raise ValueError", expect_error=(ValueError,)),
        ]
        if not hidden:
            return cases
        d_model = 2 * int(rng.integers(1, 17))
        cases.append(_pe_case(rng, 1, 3, d_model, int(rng.integers(3, 40)), part=buffer, compare="structure",
                              label=f"d_model {d_model}: the buffers and parameters"))
        for _ in range(3):
            d_model = 2 * int(rng.integers(1, 17))
            batch, seq_len = int(rng.integers(1, 4)), int(rng.integers(1, 20))
            cases.append(_pe_case(rng, batch, seq_len, d_model, seq_len + int(rng.integers(0, 30)), part=added,
                                  label=f"random x ({batch}, {seq_len}, {d_model}) in eval mode"))
        cases.append(_pe_case(rng, 2, 6, 8, 6, label="seq_len == max_len = 6 is allowed", part=added))
        cases.append(_pe_case(rng, 2, 4, 8, 20, backward=True, label="gradients flow back to x unchanged",
                              part=added))
        cases.append(_pe_case(rng, 2, 7, 16, 40, dropout=0.5, train=True, seed=int(rng.integers(0, 2**31)),
                              label="train mode, dropout=0.5: dropout(x + pe), one dropout on the sum", part=dropout))
        cases.append(Case(init={"d_model": 6, "max_len": 3, "dropout": 0.0},
                          args=(Tensor(np.zeros((2, 4, 6), np.float32)),), part=too_long,
                          label="4 tokens with max_len=3: raise ValueError", expect_error=(ValueError,)))
        return cases

    def judge(self, case, got, want):
        """A structure case compares kinds and shapes only; here it also asks that
        ``pe`` be a buffer and not a parameter (other buffers are the answer's own
        business)."""
        if case.compare != "structure":
            return super().judge(case, got, want)
        # Only the constructor is judged here: what the no-op call returned is not.
        raised = got.raised if got.raised and got.raised.get("phase") in ("decode", "init", "probe") else None
        notes = super().judge(case, dataclasses.replace(got, probes={}, value=None, raised=raised),
                              dataclasses.replace(want, probes={}, value=None))
        buffers = got.probes.get("buffer_names") or []
        params = got.probes.get("parameter_names") or []
        if "pe" in params or "pe" not in buffers:
            # The answer's own buffer names are not quoted for a hidden case.
            found = "a parameter" if "pe" in params else (
                "not a buffer" if redacting() else f"not a buffer (the buffers are {buffers})")
            hint = self.diagnose(case, got, want)
            raise CheckFailure(f"pe is {found} ({case.label})" + (f"\n  Hint: {hint}" if hint else ""))
        return notes

    def raised_hint(self, case, got):
        if case.expect_error:
            return ("compare x.size(1) with the table's length in forward and raise ValueError saying "
                    "the sequence is longer than max_len (slicing pe silently gives a shorter table).")
        if got.raised and got.raised.get("phase") == "backward" and "does not require grad" in got.raised["message"]:
            return ("no gradient reached x: do not detach x (or pass it through numpy); the output "
                    "dropout(x + pe[:seq_len]) must stay connected to x.")
        return None

    def diagnose(self, case, got, want):
        # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
        import torch

        if "buffer_names" in want.probes:  # the structure cases
            params = got.probes.get("parameter_names") or []
            buffers = got.probes.get("buffer_names") or []
            if "pe" in params:
                return ("pe must not be a parameter: the encodings are fixed, not learned. Register it with "
                        "self.register_buffer('pe', table).")
            if "pe" not in buffers:
                return ("register the table as a buffer named pe: self.register_buffer('pe', table) (a plain "
                        "attribute does not follow .to(device) and is not a buffer).")
        g = _array(got.value)
        w = _array(want.value)
        if g is None or w is None:
            return None
        x = torch.from_numpy(_array(case.args[0]).astype(np.float32))
        d_model, seq_len = case.init["d_model"], x.shape[1]
        pe = torch.tensor(_pe(seq_len, d_model), dtype=torch.float32)
        p = case.init.get("dropout", 0.1)
        variants = [("the positional encodings were not added: return dropout(x + pe[:seq_len]).", x)]
        if case.train and p > 0:
            torch.manual_seed(case.seed)
            before = torch.nn.functional.dropout(x, p) + pe
            variants += [
                ("dropout is missing: the paper applies dropout to the sums, dropout(x + pe[:seq_len]).", x + pe),
                ("dropout was applied to x before adding pe: apply it to the sum, dropout(x + pe[:seq_len]).",
                 before),
            ]
        for hint, value in variants:
            if _close(g, value.numpy()) and not _close(value.numpy(), w):
                return hint
        if not case.train:
            hint = _pe_hint(g - x.numpy(), seq_len, d_model, w - x.numpy())
            if hint:
                return hint
        if got.grads and want.grads and not _close(_array(got.grads.get("0")), _array(want.grads.get("0"))):
            return "the gradient with respect to x must pass through unchanged: do not detach x."
        return None


# --------------------------------------------------------------------------- relative_position_matrix


def _rotation(k, d_model, *, transpose=False, exponent="2i", layout="pairs"):
    """A trusted block-diagonal rotation with switches for the plausible mistakes."""
    M = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        e = {"2i": 2 * i, "i": i}[exponent]
        theta = k / 10000 ** (e / d_model)
        c, s = math.cos(theta), math.sin(theta)
        a, b = (2 * i, 2 * i + 1) if layout == "pairs" else (i, i + d_model // 2)
        M[a, a], M[a, b], M[b, a], M[b, b] = c, s, -s, c
    return M.T if transpose else M


@register
class RelativePositionMatrix(Exercise):
    """``relative_position_matrix(k, d_model) -> M`` with ``M @ pe[pos] == pe[pos + k]``."""

    name = "relative_position_matrix"
    chapter = CHAPTER
    kind = "function"
    what = "the block-diagonal rotation M (d_model, d_model) with M @ pe[pos] = pe[pos + k], for any k"

    parts = {"one 2x2 rotation by k (d_model = 2)": 1, "block-diagonal, w_i = 1/10000^(2i/d_model)": 2}
    uses = ("sinusoidal_positional_encoding",)

    def cases(self, rng, hidden):
        rotation, blocks = self.parts
        cases = [
            Case(args=(1, 2), label="k=1, d_model=2: a single 2x2 rotation by the angle 1", atol=1e-8, part=rotation),
            Case(args=(1, 4), label="k=1, d_model=4 (two 2x2 rotations)", atol=1e-8, part=blocks),
            Case(args=(3, 6), label="k=3, d_model=6", atol=1e-8, part=blocks),
            Case(args=(2, 5), label="odd d_model=5: the reference raises ValueError", expect_error=(ValueError,),
                 part=ADVICE),
        ]
        if not hidden:
            return cases
        k = int(rng.integers(-20, 40))
        cases.append(Case(args=(k, 2), label=f"k={k}, d_model=2: a single 2x2 rotation", atol=1e-8, part=rotation))
        for _ in range(3):
            k, d_model = int(rng.integers(-20, 40)), 2 * int(rng.integers(2, 17))
            cases.append(Case(args=(k, d_model), label=f"random k={k}, d_model={d_model}", atol=1e-8, part=blocks))
        cases.append(Case(args=(0, 8), label="k=0 is the identity", atol=1e-8, part=blocks))
        cases.append(Case(args=(-5, 10), label="a negative offset k=-5 (rotation the other way)", atol=1e-8,
                          part=blocks))
        return cases

    def tolerated(self, case, want):
        """The block-diagonal part accepts the rotation by -k (Mᵀ): the direction of
        the rotation is the rule of "one 2x2 rotation by k", which states it."""
        rotation, blocks = self.parts
        w = _array(want.value)
        if self.part_of(case) != blocks or w is None or case.expect_error:
            return []
        k, d_model = case.args
        return [dataclasses.replace(want, value=_rotation(k, d_model, transpose=True).astype(w.dtype))]

    def diagnose(self, case, got, want):
        g = _array(got.value)
        if g is None:
            return "return a numpy array of shape (d_model, d_model)."
        k, d_model = case.args
        variants = [
            ("M is transposed, i.e. it rotates by -k: with pe = (sin, cos) pairs, "
             "sin((pos+k)w) = cos(kw) sin(pos w) + sin(kw) cos(pos w), so row 2i is (cos kw, sin kw) and "
             "row 2i+1 is (-sin kw, cos kw).", dict(transpose=True)),
            ("the frequency exponent uses i where the paper has 2i: w_i = 1 / 10000**(2i / d_model).",
             dict(exponent="i")),
            ("the 2x2 blocks act on columns 2i and 2i+1 (interleaved sin/cos), not on the two halves.",
             dict(layout="halves")),
        ]
        for hint, flags in variants:
            value = _rotation(k, d_model, **flags)
            if _close(g, value, atol=1e-8) and not _close(value, _array(want.value), atol=1e-8):
                return hint
        if k != 0 and _close(g, np.eye(d_model), atol=1e-8):
            return ("M is the identity, which shifts by k = 0 only: each 2x2 block rotates its (sin, cos) pair "
                    "by the angle k w_i, w_i = 1 / 10000**(2i / d_model).")
        return None
