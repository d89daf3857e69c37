"""Checks of chapter 9, training: ``make_decoder_io``, ``noam_lr``,
``label_smoothed_cross_entropy`` and ``label_smoothing_floor``.

The contract is ``shared/EXERCISES.md`` section 9; the references are in
``solutions/training.py`` ("Attention Is All You Need", sections 3.1, 5.3 and 5.4).

The diagnoses recompute the plausible wrong answers from the case's inputs (no
shift, ``<eos>`` in the decoder input, left padding, ``warmup**-1``, no
``d_model**-0.5``, pads in the mean, smoothing over ``V - 1`` classes, ...) and
name the one the result equals.

Each exercise's points are split over named parts (``parts``): the shift, the
padding and the special ids of ``make_decoder_io``; warm-up, decay, ``factor`` and
the named ``step < 1`` error of ``noam_lr``; plain cross-entropy, smoothing,
``pad_id`` and stability of the loss (smoothing 0 outside the smoothing part, so
that a smoothing mistake costs that part only).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import numpy as np

from .base import Case, Exercise, Tensor, register
from .base import as_array as _array, close

CHAPTER = "09_training"

_close = functools.partial(close, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- make_decoder_io


def _decoder_io(targets, sos, eos, pad, *, mode="right", extra=0):
    """Trusted (decoder_input, labels) with switches for the plausible mistakes;
    ``extra`` columns more than the width L + 1 (-1: width L, the sequences cut at
    L ids, the longest target's last input id and its ``<eos>`` lost)."""
    L = max(len(t) for t in targets)
    B = len(targets)
    width = (L + 2 if mode == "eos_in_input" else L + 1) + extra
    inp = np.full((B, width), pad, dtype=np.int64)
    lab = np.full((B, width), pad, dtype=np.int64)
    for r, t in enumerate(targets):
        t = list(t)
        if mode == "no_shift":
            seq_in, seq_lab = [sos] + t, [sos] + t
        elif mode == "eos_in_input":
            seq_in, seq_lab = [sos] + t + [eos], t + [eos]
        elif mode == "labels_with_sos":
            seq_in, seq_lab = [sos] + t, [sos] + t + [eos]
            seq_lab = seq_lab[:width]
        elif mode == "swapped":
            seq_in, seq_lab = t + [eos], [sos] + t
        else:
            seq_in, seq_lab = [sos] + t, t + [eos]
        seq_in, seq_lab = seq_in[:width], seq_lab[:width]
        if mode == "left":
            inp[r, width - len(seq_in):] = seq_in
            lab[r, width - len(seq_lab):] = seq_lab
        else:
            inp[r, :len(seq_in)] = seq_in
            lab[r, :len(seq_lab)] = seq_lab
    return inp, lab


# The rules of "right padding with pad_id to L + 1", each way of breaking them: the
# side (``mode`` of :func:`_decoder_io`), the width (``extra``: width L, the sequences
# cut there, or L + 2) and the value (pad_id, or -100 as for cross-entropy's ignore_index).
_PADDING_SIDES = ("right", "left")
_PADDING_WIDTHS = (0, -1, 1)
_PADDING_VALUES = ("pad_id", -100)


@register
class MakeDecoderIO(Exercise):
    """``make_decoder_io(targets, sos_id=1, eos_id=2, pad_id=0) -> (decoder_input, labels)``."""

    name = "make_decoder_io"
    chapter = CHAPTER
    kind = "function"
    what = "[<sos>, y…] and [y…, <eos>] as LongTensors (B, L + 1), right-padded, other special ids, empty targets"
    parts = {
        "shifted right: [<sos>, y…] and [y…, <eos>] as LongTensors": 1,
        "right padding with pad_id to L + 1": 1,
        "the sos_id and eos_id arguments": 1,
    }

    def cases(self, rng, hidden):
        shift, pad, ids = self.parts
        # The contract fixes LongTensor outputs; the first part grades the dtype, the
        # others compare the ids as values, so an int32 answer loses one part only.
        cases = [
            Case(args=([[5, 6, 7]],), label="one target [5, 6, 7] → [1, 5, 6, 7] and [5, 6, 7, 2]", part=shift),
            Case(args=([[5, 6, 7], [8, 9]],), label="targets [5, 6, 7] and [8, 9]: each row shifted, <eos> after 9",
                 part=shift),
            Case(args=([[5, 6, 7], [8]],), label="targets of lengths 3 and 1: the short one is right-padded with 0",
                 compare="values", part=pad),
            Case(args=([[9, 8, 7], [4]],), kwargs={"pad_id": 3}, label="pad_id=3: the short target is padded with 3",
                 compare="values", part=pad),
            Case(args=([[4, 9], [7, 7]],), kwargs={"sos_id": 10, "eos_id": 11},
                 label="other special ids: sos_id=10, eos_id=11 (targets of one length)", compare="values", part=ids),
            Case(args=([[4, 9, 5], [7]],), kwargs={"sos_id": 10, "eos_id": 11},
                 label="other special ids: sos_id=10, eos_id=11, targets of lengths 3 and 1", compare="values",
                 part=ids),
        ]
        if not hidden:
            return cases
        for _ in range(2):
            B, L = int(rng.integers(1, 5)), int(rng.integers(1, 9))
            targets = [[int(v) for v in rng.integers(4, 50, size=L)] for _ in range(B)]
            cases.append(Case(args=(targets,), label=f"random batch of {B} targets, all of length {L}", part=shift))
        for _ in range(2):
            B = int(rng.integers(2, 6))
            lengths = [int(n) for n in rng.integers(1, 9, size=B)]
            lengths[0] = max(lengths) + 1  # at least two lengths
            targets = [[int(v) for v in rng.integers(4, 50, size=n)] for n in lengths]
            cases.append(Case(args=(targets,), label=f"random batch of {B} targets, lengths {lengths}",
                              compare="values", part=pad))
        cases.append(Case(args=([[6, 5], []],), label="an empty target gives [<sos>] and [<eos>], then padding",
                          compare="values", part=pad))
        pad_id = int(rng.integers(3, 60))
        cases.append(Case(args=([[9, 8, 7], [4, 5], []],), kwargs={"pad_id": pad_id},
                          label=f"pad_id={pad_id}: the short targets are padded with {pad_id}", compare="values",
                          part=pad))
        cases.append(Case(args=(([9, 8, 7], [4, 5, 6]),), kwargs={"eos_id": 0, "sos_id": 2},
                          label="a tuple of targets with eos_id=0, sos_id=2", compare="values", part=ids))
        return cases

    def tolerated(self, case, want):
        """The cases of the shift and of the special ids accept the outputs made with the
        padding's rules broken (left padding, width L with the sequences cut there or
        L + 2, -100 for pad_id), alone or together: "right padding with pad_id to L + 1"
        states them, so a width one short is charged there once. The shift's and the ids'
        own rules are held: each variant puts [<sos>, y…] and [y…, <eos>] with the given
        ids in every row that has room (a case with a shorter target shows its <eos> even
        at width L). Ids are compared exactly, as the reference is."""
        shift, _, ids = self.parts
        if self.part_of(case) not in (shift, ids) or case.expect_error or not isinstance(want.value, tuple):
            return []
        targets = case.args[0]
        sos, eos, pad = (case.kwargs.get(k, d) for k, d in (("sos_id", 1), ("eos_id", 2), ("pad_id", 0)))
        results = []
        for side, extra, value in itertools.product(_PADDING_SIDES, _PADDING_WIDTHS, _PADDING_VALUES):
            if (side, extra, value) == ("right", 0, "pad_id"):
                continue
            arrays = _decoder_io(targets, sos, eos, pad if value == "pad_id" else value, mode=side, extra=extra)
            results.append(dataclasses.replace(want, value=tuple(Tensor(a) for a in arrays)))
        return results

    def diagnose(self, case, got, want):
        if not isinstance(got.value, tuple) or len(got.value) != 2:
            return "return a tuple of two tensors: (decoder_input, labels)."
        g_in, g_lab = (_array(v) for v in got.value)
        if g_in is None or g_lab is None:
            return "return two torch LongTensors."
        if case.compare == "full" and any(getattr(v, "dtype", None) != "int64" for v in got.value):
            return "both outputs must be LongTensors (dtype=torch.long): they are ids."
        targets = case.args[0]
        sos = case.kwargs.get("sos_id", 1)
        eos = case.kwargs.get("eos_id", 2)
        pad = case.kwargs.get("pad_id", 0)
        variants = [
            ("the decoder input must not contain <eos>: it is [<sos>, y…] (shifted right), the labels "
             "are [y…, <eos>], both of length L + 1.", "eos_in_input"),
            ("the labels are not shifted: the decoder reads [<sos>, y…] and must predict [y…, <eos>], "
             "the next token at each position.", "no_shift"),
            ("the labels start with <sos>: they are [y…, <eos>], one step ahead of the input.", "labels_with_sos"),
            ("the two outputs are swapped: return (decoder_input, labels) = ([<sos>, y…], [y…, <eos>]).", "swapped"),
            ("pad on the right: the tokens start at column 0 and pad_id fills the end.", "left"),
        ]
        want_in, want_lab = _decoder_io(targets, sos, eos, pad)
        for hint, mode in variants:
            v_in, v_lab = _decoder_io(targets, sos, eos, pad, mode=mode)
            if (_close(g_in, v_in) and _close(g_lab, v_lab)) and not (_close(v_in, want_in) and _close(v_lab, want_lab)):
                return hint
        width = want_in.shape[1]  # L + 1
        if g_in.shape == g_lab.shape == (len(targets), width - 1):
            return ("the outputs are (B, L), one column short: [<sos>, y…] and [y…, <eos>] each hold len + 1 "
                    "ids, so the width is L + 1 and the longest target keeps its <eos>.")
        if g_in.shape == g_lab.shape == (len(targets), width + 1):
            return ("the outputs are (B, L + 2), one column of padding too many: the width is L + 1, the "
                    "longest target's [<sos>, y…] and [y…, <eos>] fill every column.")
        for wrong_pad in (0, -100):
            if wrong_pad != pad:
                v_in, v_lab = _decoder_io(targets, sos, eos, wrong_pad)
                if _close(g_in, v_in) and _close(g_lab, v_lab):
                    return f"pad with pad_id (here {pad}), not {wrong_pad}."
        if (sos, eos) != (1, 2):
            v_in, v_lab = _decoder_io(targets, 1, 2, pad)
            if _close(g_in, v_in) and _close(g_lab, v_lab):
                return "use the sos_id and eos_id arguments, not the default ids 1 and 2."
        return None


# --------------------------------------------------------------------------- noam_lr


def _noam(step, d_model, warmup, factor=1.0, *, warm_exp=-1.5, decay_exp=-0.5, d_exp=-0.5, branch="min"):
    """A trusted rate with switches for the plausible mistakes: the warm-up exponent,
    the decay exponent, the d_model exponent, and which branch is taken (``"min"``,
    ``"max"``, ``"warm"``: the warm-up line only, ``"decay"``: the decay only)."""
    a, b = step ** decay_exp, step * warmup ** warm_exp
    chosen = {"min": min, "max": max, "warm": lambda a, b: b, "decay": lambda a, b: a}[branch](a, b)
    return factor * d_model ** d_exp * chosen


# The ways each of noam_lr's rules can be broken (:meth:`NoamLr.tolerated`): the
# warm-up line's exponent (the warm-up part), the decay's exponent (the after-warm-up
# part), which branch is taken and the d_model exponent (both parts state them).
_NOAM_WARM = [dict(warm_exp=-1.5), dict(warm_exp=-1.0), dict(warm_exp=-0.5), dict(warm_exp=-2.5)]
_NOAM_DECAY = [dict(decay_exp=-0.5), dict(decay_exp=-1.0), dict(decay_exp=-1.5)]
_NOAM_D = [dict(d_exp=-0.5), dict(d_exp=0.0), dict(d_exp=0.5), dict(d_exp=-1.0)]
_NOAM_BRANCH = [dict(branch="min"), dict(branch="max"), dict(branch="warm"), dict(branch="decay")]


@register
class NoamLr(Exercise):
    """``noam_lr(step, d_model, warmup_steps, factor=1.0) -> float``."""

    name = "noam_lr"
    chapter = CHAPTER
    kind = "function"
    what = "factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5) during and after warm-up, step < 1 raises"
    parts = {
        "warm-up: d_model^-0.5 · step · warmup_steps^-1.5": 1,
        "after warm-up: d_model^-0.5 · step^-0.5": 1,
        "the factor argument": 1,
        "step < 1 raises ValueError": 1,
    }

    def cases(self, rng, hidden):
        warm, decay, factor, error = self.parts
        cases = [
            Case(args=(1, 512, 4000), label="step 1 of the paper's schedule (d_model=512, warmup 4000)", rtol=1e-9,
                 part=warm),
            Case(args=(4000, 512, 4000), label="the peak, step == warmup_steps", rtol=1e-9, part=decay),
            Case(args=(100000, 512, 4000), label="after warm-up (step 100000)", rtol=1e-9, part=decay),
            Case(args=(100000, 512, 4000), kwargs={"factor": 2.0}, label="factor=2 doubles the rate", rtol=1e-9,
                 part=factor),
            Case(args=(0, 512, 4000), label="step 0: the schedule counts from 1, raise ValueError",
                 expect_error=(ValueError,), part=error),
        ]
        if not hidden:
            return cases
        for _ in range(2):
            warmup = int(rng.integers(10, 10000))
            d_model = int(rng.choice([64, 128, 256, 512, 1024]))
            step = int(rng.integers(1, warmup))
            cases.append(Case(args=(step, d_model, warmup), label=f"warm-up: step {step} of {warmup}, d_model {d_model}",
                              rtol=1e-9, part=warm))
            step = int(rng.integers(warmup, 30 * warmup))
            cases.append(Case(args=(step, d_model, warmup), label=f"decay: step {step} > warmup {warmup}, "
                              f"d_model {d_model}", rtol=1e-9, part=decay))
        cases.append(Case(args=(37, 256, 100), label="during warm-up (37 of 100): the linear part", rtol=1e-9,
                          part=warm))
        for _ in range(2):
            warmup = int(rng.integers(10, 10000))
            step = int(rng.integers(1, 3 * warmup))
            f = float(rng.uniform(0.5, 3.0))
            cases.append(Case(args=(step, 512, warmup), kwargs={"factor": f}, rtol=1e-9, part=factor,
                              label=f"factor={f:.3g} at step {step}, warmup {warmup}"))
        cases.append(Case(args=(-3, 512, 4000), label="a negative step raises ValueError", expect_error=(ValueError,),
                          part=error))
        return cases

    def raised_hint(self, case, got):
        if case.expect_error:
            return ("check step < 1 first and raise ValueError: step**-0.5 is undefined at 0 "
                    "(ZeroDivisionError) and complex for negative steps.")
        return None

    def tolerated(self, case, want):
        """A case of one part accepts the rates made with another part's rule broken:
        a warm-up case any decay (the decay part states it), an after-warm-up case any
        warm-up line, a factor case any schedule times the factor (so a mistake in
        either branch is not charged again to "the factor argument")."""
        if not isinstance(want.value, float) or case.expect_error:
            return []
        warm, decay, factor, _ = self.parts
        part = self.part_of(case)
        step, d_model, warmup = case.args
        f = case.kwargs.get("factor", 1.0)
        if part == warm:
            axes = [_NOAM_DECAY, [dict(branch="min"), dict(branch="warm")]]
        elif part == decay:
            axes = [_NOAM_WARM, [dict(branch="min"), dict(branch="decay")]]
        elif part == factor:
            axes = [_NOAM_WARM, _NOAM_DECAY, _NOAM_D, _NOAM_BRANCH]
        else:
            return []
        values = []
        for combo in itertools.product(*axes):
            flags = {k: v for d in combo for k, v in d.items()}
            value = float(_noam(step, d_model, warmup, f, **flags))
            if value != want.value:
                values.append(dataclasses.replace(want, value=value))
        return values

    def diagnose(self, case, got, want):
        if isinstance(got.value, bool) or not isinstance(got.value, (int, float)):
            return "return a Python float (float(...)), not a tensor or an array."
        step, d_model, warmup = case.args
        factor = case.kwargs.get("factor", 1.0)
        variants = [
            ("during warm-up the rate is step · warmup_steps**-1.5, not warmup_steps**-1.",
             _noam(step, d_model, warmup, factor, warm_exp=-1.0)),
            ("during warm-up the rate is step · warmup_steps**-1.5, not warmup_steps**-0.5: the line must "
             "reach warmup_steps**-0.5 (the decay's value) exactly at step = warmup_steps.",
             _noam(step, d_model, warmup, factor, warm_exp=-0.5)),
            ("after warm-up the rate decays as step**-0.5 (the inverse square root of the step).",
             _noam(step, d_model, warmup, factor, decay_exp=-1.0)),
            ("the d_model**-0.5 factor is missing.", _noam(step, d_model, warmup, factor, d_exp=0.0)),
            ("the scale is d_model**-0.5 (1/√d_model), not √d_model.", _noam(step, d_model, warmup, factor, d_exp=0.5)),
            ("the scale is d_model**-0.5 (1/√d_model), not 1/d_model.",
             _noam(step, d_model, warmup, factor, d_exp=-1.0)),
            # What the output shows, whatever the code (a max, or one branch only):
            ("after warm-up your rate still follows the warm-up line step · warmup_steps**-1.5, which keeps "
             "growing: the schedule is the smaller of step**-0.5 and step · warmup_steps**-1.5 (a min), so it "
             "turns into the step**-0.5 decay at step = warmup_steps.",
             _noam(step, d_model, warmup, factor, branch="warm")),
            ("during warm-up your rate is already the decay step**-0.5: the schedule is the smaller of "
             "step**-0.5 and step · warmup_steps**-1.5 (a min), which is the linear warm-up line until "
             "step = warmup_steps.", _noam(step, d_model, warmup, factor, branch="decay")),
            ("the factor argument is not applied: multiply the whole rate by factor.",
             _noam(step, d_model, warmup, 1.0)),
        ]
        for hint, value in variants:
            if np.isclose(got.value, value, rtol=1e-7) and not np.isclose(value, want.value, rtol=1e-7):
                return hint
        return None


# --------------------------------------------------------------------------- label_smoothed_cross_entropy


def _lsce_variants(logits, labels, smoothing, pad_id):
    """Plausible wrong losses (float64) by hint, and the right one under ``None``."""
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch.nn.functional as F

    V = logits.shape[-1]
    lp = F.log_softmax(logits.double(), dim=-1).reshape(-1, V)  # (B*T, V)
    y = labels.reshape(-1)  # (B*T,)
    keep = y != pad_id  # (B*T,)
    nll = -lp.gather(1, y.masked_fill(~keep, 0)[:, None]).squeeze(1)  # (B*T,)
    total = -lp.sum(dim=-1)  # (B*T,): the sum of -log p over all V classes
    uniform = total / V  # ε spread over all V classes, the label included (the contract)
    over_others = (total - nll) / (V - 1)  # ε over the V - 1 other classes
    over_others_no_pad = (total - nll + lp[:, pad_id]) / (V - 2)  # ... and not on <pad> (Annotated Transformer)

    def mean(per_token):
        return (per_token * keep).sum() / keep.sum()

    loss = (1 - smoothing) * nll + smoothing * uniform
    return {
        None: mean(loss),
        "pads are counted in the mean: average over the non-pad positions only (divide by their number).":
            (loss * keep).sum() / len(y),
        "pad positions are not ignored: their labels must not count at all (ignore_index=pad_id).": loss.mean(),
        "you summed the losses: return the mean over the non-pad positions.": (loss * keep).sum(),
        "the smoothing mass goes to all V classes, the label included, as F.cross_entropy(label_smoothing=ε) "
        "does: target = (1 - ε) one-hot + ε / V, not ε / (V - 1) on the others.":
            mean((1 - smoothing) * nll + smoothing * over_others),
        "the smoothing mass goes to all V classes (the label and <pad> included), as F.cross_entropy("
        "label_smoothing=ε) does: target = (1 - ε) one-hot + ε / V, not ε / (V - 2).":
            mean((1 - smoothing) * nll + smoothing * over_others_no_pad),
        "the smoothing is missing: ε of the target mass is spread uniformly over the classes.": mean(nll),
        "the weights are swapped: the label gets 1 - ε and the uniform part ε.":
            mean(smoothing * nll + (1 - smoothing) * uniform),
    }


def _lsce_case(rng, B, T, V, *, smoothing=None, pad_id=0, label, part, backward=False, scale=1.0,
               dtype=np.float32):
    logits = (rng.normal(size=(B, T, V)) * scale).astype(dtype)
    ids = [i for i in range(V) if i != pad_id]
    labels = rng.choice(ids, size=(B, T)).astype(np.int64)
    for b in range(B):  # right padding, at least one real token per sentence
        n = int(rng.integers(1, T + 1)) if b else T - 1 if T > 1 else T
        labels[b, n:] = pad_id
    kwargs = {"pad_id": pad_id} if pad_id != 0 else {}
    if smoothing is not None:
        kwargs["smoothing"] = smoothing
    weight = np.float32(rng.uniform(0.5, 2.0)) if backward else None
    return Case(args=(Tensor(logits, requires_grad=backward), Tensor(labels)), kwargs=kwargs,
                backward=None if weight is None else Tensor(np.array(weight)), label=label, part=part,
                rtol=1e-4, atol=1e-6)


@register
class LabelSmoothedCrossEntropy(Exercise):
    """``label_smoothed_cross_entropy(logits, labels, smoothing=0.1, pad_id=0)``."""

    name = "label_smoothed_cross_entropy"
    chapter = CHAPTER
    kind = "function"
    what = ("F.cross_entropy(..., label_smoothing=ε, ignore_index=pad_id): mean over non-pad tokens, "
            "ε spread over all V classes, gradients")
    # Half a point each: one call of F.cross_entropy(label_smoothing=...) passes them all,
    # and the contract says that any answer with the right values earns its points.
    parts = {
        "mean cross-entropy over the non-pad tokens": 0.5,
        "label smoothing: ε spread over all V classes": 0.5,
        "the pad_id argument": 0.5,
        "stable for large logits, differentiable": 0.5,
    }

    def cases(self, rng, hidden):
        plain, smooth, pad, stable = self.parts
        cases = [
            _lsce_case(rng, 2, 5, 8, smoothing=0.0, part=plain,
                       label="smoothing=0.0: plain cross-entropy over the non-pad tokens"),
            _lsce_case(rng, 2, 4, 6, part=smooth, label="logits (2, 4, 6), default smoothing 0.1, padded labels"),
            _lsce_case(rng, 3, 3, 5, smoothing=0.3, part=smooth, label="smoothing=0.3"),
            _lsce_case(rng, 2, 4, 7, smoothing=0.0, pad_id=5, part=pad,
                       label="pad_id=5 (not 0), smoothing=0.0: ignore label 5"),
            _lsce_case(rng, 2, 4, 6, smoothing=0.0, scale=50.0, part=stable,
                       label="large logits (x 50), smoothing=0.0: use log_softmax, not log(softmax)"),
            _lsce_case(rng, 2, 3, 5, smoothing=0.0, backward=True, part=stable,
                       label="gradients flow back to the logits (smoothing=0.0)"),
        ]
        if not hidden:
            return cases
        for _ in range(2):
            B, T, V = int(rng.integers(1, 5)), int(rng.integers(1, 9)), int(rng.integers(3, 40))
            cases.append(_lsce_case(rng, B, T, V, smoothing=0.0, part=plain,
                                    label=f"random logits ({B}, {T}, {V}), smoothing 0"))
            eps = float(rng.choice([0.05, 0.1, 0.2]))
            B, T, V = int(rng.integers(1, 5)), int(rng.integers(1, 9)), int(rng.integers(3, 40))
            cases.append(_lsce_case(rng, B, T, V, smoothing=eps, part=smooth,
                                    label=f"random logits ({B}, {T}, {V}), smoothing {eps}"))
        pad_id = int(rng.integers(1, 9))
        cases.append(_lsce_case(rng, 3, 5, 9, smoothing=0.0, pad_id=pad_id, part=pad,
                                label=f"pad_id={pad_id}, smoothing=0.0: ignore label {pad_id}"))
        cases.append(_lsce_case(rng, 2, 4, 6, smoothing=0.0, scale=80.0, part=stable,
                                label="large logits (x 80), smoothing=0.0"))
        cases.append(_lsce_case(rng, 2, 5, 9, smoothing=0.0, backward=True, part=stable,
                                label="gradients flow back to the logits (smoothing=0.0)"))
        cases.append(_lsce_case(rng, 2, 5, 9, smoothing=0.2, backward=True, part=smooth,
                                label="gradients of the smoothed loss (smoothing 0.2)"))
        return cases

    def tolerated(self, case, want):
        """The cases of every part but the mean's accept the loss divided by all positions,
        pads included (the sum over the non-pad tokens / B·T), with its gradient: which
        positions the mean counts is the rule of "mean cross-entropy over the non-pad
        tokens", which states it, so that mistake is not charged again to the smoothing,
        the pad_id argument or the gradient."""
        w = _array(want.value)
        if self.part_of(case) == list(self.parts)[0] or w is None or case.expect_error or len(case.args) < 2:
            return []
        labels = _array(case.args[1])
        ratio = float((labels != case.kwargs.get("pad_id", 0)).sum()) / labels.size
        if ratio == 1.0:
            return []
        grads = {k: Tensor((_array(v) * ratio).astype(_array(v).dtype)) for k, v in want.grads.items()}
        return [dataclasses.replace(want, value=Tensor(np.asarray(w * ratio, dtype=w.dtype)), grads=grads)]

    def diagnose(self, case, got, want):
        # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
        import torch

        g = _array(got.value)
        if g is None:
            return "return a 0-dim torch tensor (the loss), not a Python number."
        if g.shape != ():
            return "return the mean loss, a scalar (0-dim tensor), not one loss per token."
        if np.isnan(g) or np.isinf(g):
            return "NaN or inf: compute log probabilities with F.log_softmax (stable), not torch.log(softmax)."
        logits = torch.from_numpy(_array(case.args[0]))
        labels = torch.from_numpy(_array(case.args[1]))
        smoothing = case.kwargs.get("smoothing", 0.1)
        pad_id = case.kwargs.get("pad_id", 0)
        w = float(_array(want.value))
        for hint, value in _lsce_variants(logits, labels, smoothing, pad_id).items():
            value = float(value)
            if hint and np.isclose(float(g), value, rtol=1e-4) and not np.isclose(value, w, rtol=1e-4):
                return hint
        if pad_id != 0 and np.isclose(float(g), float(_lsce_variants(logits, labels, smoothing, 0)[None]), rtol=1e-4):
            return f"use the pad_id argument: here the padding label is {pad_id}, not 0."
        if got.grads and want.grads and _close(g, _array(want.value), rtol=1e-4):
            return "the loss is right but its gradient is not: keep everything in torch (no .item(), no numpy)."
        return None


# --------------------------------------------------------------------------- label_smoothing_floor


def _floor_variants(V, eps):
    """Plausible wrong ``(floor, margin)`` pairs by hint (nats unless said otherwise)."""
    def pair(q_label, q_other, n_other):
        floor = -q_label * math.log(q_label) - n_other * q_other * math.log(q_other)
        return floor, math.log(q_label) - math.log(q_other)

    right = pair(1 - eps + eps / V, eps / V, V - 1)
    return {
        "ε goes to all V classes, the label included: the label's target is 1 - ε + ε / V and "
        "every other class gets ε / V (not ε / (V - 1) on the others).": pair(1 - eps, eps / (V - 1), V - 1),
        "the label's own share: its target is 1 - ε + ε / V, not 1 - ε.":
            (-(1 - eps) * math.log(1 - eps) - (V - 1) * (eps / V) * math.log(eps / V),
             math.log(1 - eps) - math.log(eps / V)),
        "work in nats (natural logarithms), as the loss does, not in bits.":
            (right[0] / math.log(2), right[1] / math.log(2)),
        "the floor is the entropy of the whole target, -Σ q_i log q_i over all V classes, "
        "not the label's term alone.": (-(1 - eps + eps / V) * math.log(1 - eps + eps / V), right[1]),
        "the margin is a difference of logits, log q_label - log q_other, not a ratio of "
        "probabilities.": (right[0], (1 - eps + eps / V) / (eps / V)),
    }


@register
class LabelSmoothingFloor(Exercise):
    """``label_smoothing_floor(vocab_size, smoothing=0.1) -> (floor, margin)``."""

    name = "label_smoothing_floor"
    chapter = CHAPTER
    kind = "function"
    what = ("the floor H(q) of the smoothed loss and the label's logit margin log(q_label / q_other) "
            "at it, ε = 0, the named errors")
    # Derived, not looked up: no library call returns the margin, and the floor needs the
    # optimum p = q. Each part reads its own element of the returned pair (_judge).
    parts = {
        "the floor, the loss's minimum": 1,
        "the label's logit margin at the floor": 1,
        "ε = 0: floor 0, margin inf": 0.5,
        "vocab_size < 2 or ε outside [0, 1) raises ValueError": 0.5,
    }

    def cases(self, rng, hidden):
        floor, margin, zero, error = self.parts

        def both(V, eps, label):
            return [Case(args=(V,), kwargs={"smoothing": eps}, label=f"{label}: the floor", part=floor,
                         rtol=1e-6, atol=1e-9, compare="values"),
                    Case(args=(V,), kwargs={"smoothing": eps}, label=f"{label}: the margin", part=margin,
                         rtol=1e-6, atol=1e-9, compare="values")]

        cases = both(4, 0.1, "V = 4, ε = 0.1 (the worked example: 0.349 and log 37)")
        cases += both(37000, 0.1, "V = 37,000, ε = 0.1 (the paper's vocabulary)")
        cases += [
            Case(args=(10,), kwargs={"smoothing": 0.0}, label="ε = 0: a one-hot target", part=zero,
                 compare="values"),
            Case(args=(1,), kwargs={"smoothing": 0.1}, label="vocab_size = 1 raises ValueError",
                 expect_error=(ValueError,), part=error),
            Case(args=(8,), kwargs={"smoothing": 1.0}, label="smoothing = 1.0 raises ValueError",
                 expect_error=(ValueError,), part=error),
        ]
        if not hidden:
            return cases
        for _ in range(3):
            V = int(rng.integers(2, 60000))
            eps = float(np.round(rng.uniform(0.01, 0.6), 3))
            cases += both(V, eps, f"V = {V}, ε = {eps}")
        cases += both(2, 0.5, "V = 2, ε = 0.5")
        cases.append(Case(args=(2,), kwargs={"smoothing": 0.0}, label="ε = 0, V = 2", part=zero, compare="values"))
        cases.append(Case(args=(5,), kwargs={"smoothing": -0.1}, label="smoothing = -0.1 raises ValueError",
                          expect_error=(ValueError,), part=error))
        return cases

    def _judge(self, case, got, want):
        floor, margin, _, _ = self.parts
        index = {floor: 0, margin: 1}.get(case.part)
        pair = isinstance(got.value, (tuple, list)) and len(got.value) == 2
        if index is not None and got.raised is None and not case.expect_error and pair:
            got = dataclasses.replace(got, value=got.value[index])
            want = dataclasses.replace(want, value=want.value[index])
        return super()._judge(case, got, want)

    def raised_hint(self, case, got):
        if case.expect_error:
            return "check the arguments first: vocab_size an int >= 2, smoothing in [0, 1), else raise ValueError."
        if case.kwargs.get("smoothing") == 0.0:
            return "with ε = 0 the terms ε/V · log(ε/V) are 0 · log 0 = 0: return (0.0, math.inf) without the logs."
        return None

    def diagnose(self, case, got, want):
        # For the floor and margin parts, _judge has already reduced got and want to the
        # element the part grades; for ε = 0 they are still the whole pair.
        floor_part, margin_part, _, _ = self.parts
        V, eps = case.args[0], case.kwargs.get("smoothing", 0.1)
        if case.part in (floor_part, margin_part):
            if isinstance(got.value, (tuple, list)) or not isinstance(got.value, (int, float, np.number)):
                return "return a pair (floor, margin) of two numbers."
            index = 0 if case.part == floor_part else 1
            mine, right = float(got.value), float(want.value)
            for hint, variant in _floor_variants(V, eps).items():
                if math.isclose(mine, variant[index], rel_tol=1e-6) and not math.isclose(variant[index], right,
                                                                                         rel_tol=1e-6):
                    return hint
            return None
        if not (isinstance(got.value, (tuple, list)) and len(got.value) == 2):
            return "return a pair (floor, margin) of two numbers."
        if any(isinstance(v, float) and math.isnan(v) for v in got.value):
            return "0 · log 0 is 0 (the limit), and with a one-hot target no finite margin is optimal: (0.0, math.inf)."
        return None
