"""Tests of the chapter 9 checks: plausible wrong answers are rejected with a hint
that names the mistake, valid answers in other styles earn full marks, half-right
answers earn the parts they get right (that the reference passes and hidden inputs are
fresh: test_checks_registry.py)."""
import functools
import math

import pytest
import numpy as np
import torch
import torch.nn.functional as F

from autograder.checks import get_exercise
import check_helpers
from check_helpers import cases_drawn_once  # noqa: F401 (a fixture: each seeded draw made once per process)
from check_helpers import accepted
from solutions import training

pytestmark = pytest.mark.usefixtures("one_torch_thread", "cases_drawn_once")  # tests/conftest.py: tiny tensors, one thread

NAMES = ["make_decoder_io", "noam_lr", "label_smoothed_cross_entropy", "label_smoothing_floor"]

rejected = functools.partial(check_helpers.rejected, seed=19)
partly = functools.partial(check_helpers.partly, seed=19)

SHIFT, PAD, IDS = get_exercise("make_decoder_io").parts
WARM, DECAY, FACTOR, STEP_ERROR = get_exercise("noam_lr").parts
PLAIN, SMOOTH, PAD_ID, STABLE = get_exercise("label_smoothed_cross_entropy").parts


# --------------------------------------------------------------------------- make_decoder_io


def make_io(mode):
    def make_decoder_io(targets, sos_id=1, eos_id=2, pad_id=0):
        rows_in, rows_lab = [], []
        for t in targets:
            t = list(t)
            if mode == "eos_in_input":
                rows_in.append([sos_id] + t + [eos_id])
                rows_lab.append(t + [eos_id])
            elif mode == "no_shift":
                rows_in.append([sos_id] + t)
                rows_lab.append([sos_id] + t)
            else:
                rows_in.append([sos_id] + t)
                rows_lab.append(t + [eos_id])
        width = max(map(len, rows_in + rows_lab))
        pad = 0 if mode == "zero_pad" else pad_id

        def padded(rows):
            if mode == "left":
                return torch.tensor([[pad] * (width - len(r)) + r for r in rows])
            return torch.tensor([r + [pad] * (width - len(r)) for r in rows])

        return padded(rows_in), padded(rows_lab)

    return make_decoder_io


def test_decoder_io_not_shifted_is_rejected():
    rejected("make_decoder_io", make_io("no_shift"), "not shifted")


def test_decoder_io_with_eos_in_the_input_is_rejected():
    rejected("make_decoder_io", make_io("eos_in_input"), "must not contain <eos>")


def test_decoder_io_padded_on_the_left_is_rejected():
    rejected("make_decoder_io", make_io("left"), "pad on the right")


def test_decoder_io_padding_with_zero_is_rejected():
    rejected("make_decoder_io", make_io("zero_pad"), "pad with pad_id")


def test_decoder_io_with_int32_is_rejected():
    def int32(targets, sos_id=1, eos_id=2, pad_id=0):
        a, b = training.make_decoder_io(targets, sos_id, eos_id, pad_id)
        return a.int(), b.int()

    rejected("make_decoder_io", int32, "LongTensors")


def test_decoder_io_padded_on_the_left_earns_the_shift_and_the_ids():
    partly("make_decoder_io", make_io("left"), [SHIFT, IDS], [PAD], "pad on the right")


def test_decoder_io_padding_with_zero_loses_only_the_padding():
    partly("make_decoder_io", make_io("zero_pad"), [SHIFT, IDS], [PAD], "pad with pad_id (here 3), not 0")


def test_decoder_io_with_loops_and_lists_passes():
    def with_loops(targets, sos_id=1, eos_id=2, pad_id=0):
        width = 1 + max(len(t) for t in targets)
        decoder_input, labels = [], []
        for target in targets:
            row_in = [sos_id] + list(target)
            row_lab = list(target) + [eos_id]
            decoder_input.append(row_in + [pad_id] * (width - len(row_in)))
            labels.append(row_lab + [pad_id] * (width - len(row_lab)))
        return torch.tensor(decoder_input, dtype=torch.long), torch.tensor(labels, dtype=torch.long)

    accepted("make_decoder_io", with_loops)


def test_decoder_io_built_in_numpy_passes():
    def in_numpy(targets, sos_id=1, eos_id=2, pad_id=0):
        longest = max(map(len, targets))
        full = np.full((len(targets), longest + 2), pad_id, dtype=np.int64)  # [<sos>, y…, <eos>, pads]
        for row, target in enumerate(targets):
            full[row, 0] = sos_id
            full[row, 1:len(target) + 1] = target
            full[row, len(target) + 1] = eos_id
        decoder_input = np.where(full == eos_id, pad_id, full)[:, :-1]
        decoder_input[:, 0] = sos_id
        return torch.from_numpy(np.ascontiguousarray(decoder_input)), torch.from_numpy(full[:, 1:].copy())

    accepted("make_decoder_io", in_numpy)


def test_a_different_valid_make_decoder_io_passes():
    def with_pad_sequence(targets, sos_id=1, eos_id=2, pad_id=0):
        inputs = [torch.tensor([sos_id] + list(t), dtype=torch.long) for t in targets]
        labels = [torch.tensor(list(t) + [eos_id], dtype=torch.long) for t in targets]
        pad = torch.nn.utils.rnn.pad_sequence
        return pad(inputs, batch_first=True, padding_value=pad_id), pad(labels, batch_first=True, padding_value=pad_id)

    accepted("make_decoder_io", with_pad_sequence)


# --------------------------------------------------------------------------- noam_lr


def make_noam(warm_exp=-1.5, d_exp=-0.5, check=True):
    def noam_lr(step, d_model, warmup_steps, factor=1.0):
        if check and step < 1:
            raise ValueError("step must be >= 1")
        return factor * d_model ** d_exp * min(step ** -0.5, step * warmup_steps ** warm_exp)

    return noam_lr


def test_noam_with_warmup_power_minus_one_is_rejected():
    rejected("noam_lr", make_noam(warm_exp=-1.0), "warmup_steps**-1.5")


def test_noam_without_d_model_factor_is_rejected():
    rejected("noam_lr", make_noam(d_exp=0.0), "d_model**-0.5 factor is missing")


def test_noam_accepting_step_zero_loses_only_the_named_error():
    partly("noam_lr", make_noam(check=False), [WARM, DECAY, FACTOR], [STEP_ERROR], "should raise ValueError",
           "step < 1")


def test_noam_with_a_wrong_warmup_power_keeps_the_decay_and_the_factor_and_names_the_power():
    # The factor part's warm-up cases accept any warm-up line times the factor: the
    # power is charged to the warm-up part once.
    partly("noam_lr", make_noam(warm_exp=-1.0), [DECAY, FACTOR, STEP_ERROR], [WARM], "warmup_steps**-1.5")
    partly("noam_lr", make_noam(warm_exp=-0.5), [DECAY, FACTOR, STEP_ERROR], [WARM], "not warmup_steps**-0.5")


def test_noam_ignoring_the_factor_loses_only_the_factor():
    def no_factor(step, d_model, warmup_steps, factor=1.0):
        return make_noam()(step, d_model, warmup_steps)

    partly("noam_lr", no_factor, [WARM, DECAY, STEP_ERROR], [FACTOR], "factor argument")


def test_a_different_valid_noam_lr_passes():
    def piecewise(step, d_model, warmup_steps, factor=1.0):
        if step < 1:
            raise ValueError(f"step counts from 1, got {step}")
        scale = factor / math.sqrt(d_model)
        if step < warmup_steps:
            return scale * step / warmup_steps ** 1.5
        return scale / math.sqrt(step)

    accepted("noam_lr", piecewise)


def test_noam_in_numpy_with_its_own_error_message_passes():
    def in_numpy(step, d_model, warmup_steps, factor=1.0):
        if step < 1:
            raise ValueError("the learning-rate schedule starts at step 1")
        return factor * np.float64(d_model) ** -0.5 * np.minimum(np.float64(step) ** -0.5,
                                                                 step * np.float64(warmup_steps) ** -1.5)

    accepted("noam_lr", in_numpy)


def test_noam_with_math_pow_in_a_helper_passes():
    def as_lambda(step, d_model, warmup_steps, factor=1.0):
        if not step >= 1:
            raise ValueError(f"step must be >= 1, got {step}")
        def rate(s):
            return math.pow(d_model, -0.5) * min(math.pow(s, -0.5), s * math.pow(warmup_steps, -1.5))

        return factor * rate(step)

    accepted("noam_lr", as_lambda)


# --------------------------------------------------------------------------- label_smoothed_cross_entropy


def test_loss_averaging_over_pads_is_rejected():
    def over_all(logits, labels, smoothing=0.1, pad_id=0):
        V = logits.size(-1)
        per_token = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), label_smoothing=smoothing,
                                    ignore_index=pad_id, reduction="none")
        return per_token.mean()

    rejected("label_smoothed_cross_entropy", over_all, "pads are counted in the mean")


def other_classes(logits, labels, smoothing=0.1, pad_id=0):
    V = logits.size(-1)
    lp = F.log_softmax(logits, dim=-1).reshape(-1, V)
    y = labels.reshape(-1)
    target = torch.full_like(lp, smoothing / (V - 1))
    target.scatter_(1, y[:, None], 1 - smoothing)
    per_token = -(target * lp).sum(-1)
    keep = y != pad_id
    return per_token[keep].mean()


def test_loss_smoothing_over_v_minus_one_is_rejected():
    rejected("label_smoothed_cross_entropy", other_classes, "ε / V")


def test_loss_smoothing_over_v_minus_one_keeps_the_other_parts():
    partly("label_smoothed_cross_entropy", other_classes, [PLAIN, PAD_ID, STABLE], [SMOOTH], "ε / V")


def test_loss_ignoring_the_pad_id_argument_loses_only_that_part():
    def pad_zero(logits, labels, smoothing=0.1, pad_id=0):
        V = logits.size(-1)
        return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), label_smoothing=smoothing, ignore_index=0)

    partly("label_smoothed_cross_entropy", pad_zero, [PLAIN, SMOOTH, STABLE], [PAD_ID], "use the pad_id argument")


def test_loss_without_ignoring_pads_is_rejected():
    def no_ignore(logits, labels, smoothing=0.1, pad_id=0):
        V = logits.size(-1)
        return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), label_smoothing=smoothing)

    rejected("label_smoothed_cross_entropy", no_ignore, "not ignored")


def test_loss_without_smoothing_is_rejected():
    def plain(logits, labels, smoothing=0.1, pad_id=0):
        V = logits.size(-1)
        return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=pad_id)

    rejected("label_smoothed_cross_entropy", plain, "smoothing is missing")


def test_loss_returning_a_float_is_rejected():
    def as_float(logits, labels, smoothing=0.1, pad_id=0):
        return float(training.label_smoothed_cross_entropy(logits, labels, smoothing, pad_id))

    rejected("label_smoothed_cross_entropy", as_float, "0-dim torch tensor")


def test_a_different_valid_loss_passes():
    def via_cross_entropy(logits, labels, smoothing=0.1, pad_id=0):
        V = logits.size(-1)
        return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), label_smoothing=smoothing,
                               ignore_index=pad_id)

    accepted("label_smoothed_cross_entropy", via_cross_entropy)


def test_loss_as_an_explicit_target_distribution_passes():
    def explicit(logits, labels, smoothing=0.1, pad_id=0):
        V = logits.size(-1)
        log_p = torch.log_softmax(logits, dim=-1)  # (B, T, V)
        target = F.one_hot(labels, V).to(log_p.dtype) * (1 - smoothing) + smoothing / V  # (B, T, V)
        per_token = -(target * log_p).sum(dim=-1)  # (B, T)
        keep = labels != pad_id
        return per_token.masked_select(keep).mean()

    accepted("label_smoothed_cross_entropy", explicit)


def test_loss_in_float64_passes_with_a_note():
    def with_gather(logits, labels, smoothing=0.1, pad_id=0):
        log_p = F.log_softmax(logits.double(), dim=-1)  # (B, T, V), float64
        nll = -log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (B, T)
        uniform = -log_p.mean(dim=-1)  # (B, T)
        keep = (labels != pad_id).double()
        return (((1 - smoothing) * nll + smoothing * uniform) * keep).sum() / keep.sum()

    report = accepted("label_smoothed_cross_entropy", with_gather)
    assert any("float64 where the reference returns float32" in note for note in report.notes), report.notes


def test_noam_with_the_warmup_line_only_loses_the_decay_with_a_hint_about_what_it_returns():
    """No max in this code: the hint says what the rate does after warm-up, not "take the
    min, not the max"; the factor part (cases after warm-up too) is not charged again."""
    def warmup_only(step, d_model, warmup_steps, factor=1.0):
        if step < 1:
            raise ValueError("step must be >= 1")
        return factor * d_model ** -0.5 * step * warmup_steps ** -1.5

    report = partly("noam_lr", warmup_only, [WARM, FACTOR, STEP_ERROR], [DECAY], "still follows the warm-up line")
    assert "not the max" not in report.render("noam_lr")


# --------------------------------------------------------------------------- label_smoothing_floor

FLOOR, MARGIN, ZERO, FLOOR_ERROR = get_exercise("label_smoothing_floor").parts


def _validated(fn):
    """``fn(V, eps)`` behind the contract's argument checks and the ε = 0 case."""
    def label_smoothing_floor(vocab_size, smoothing=0.1):
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
            raise ValueError("vocab_size")
        if not 0 <= smoothing < 1:
            raise ValueError("smoothing")
        if smoothing == 0:
            return 0.0, math.inf
        return fn(vocab_size, smoothing)
    return label_smoothing_floor


def test_floor_by_one_library_call_is_not_enough():
    """F.cross_entropy(label_smoothing=ε) at the optimal logits gives the floor, and no
    call gives the margin: an answer that returns the loss of one-hot-ish logits fails both."""
    def via_cross_entropy(V, eps):
        logits = torch.zeros(1, V)
        logits[0, 0] = 10.0  # a confident guess, not the optimum
        loss = F.cross_entropy(logits, torch.tensor([0]), label_smoothing=eps).item()
        return loss, 10.0

    partly("label_smoothing_floor", _validated(via_cross_entropy), [ZERO, FLOOR_ERROR], [FLOOR, MARGIN])


def test_floor_with_eps_over_the_other_classes_is_rejected_with_its_hint():
    def others(V, eps):
        q_label, q_other = 1 - eps, eps / (V - 1)
        return (-q_label * math.log(q_label) - (V - 1) * q_other * math.log(q_other),
                math.log(q_label / q_other))

    partly("label_smoothing_floor", _validated(others), [ZERO, FLOOR_ERROR], [FLOOR, MARGIN], "ε / (V - 1)")


def test_margin_without_the_labels_own_share_costs_the_margin_only():
    def margin_without_share(V, eps):
        floor, _ = training.label_smoothing_floor(V, eps)
        return floor, math.log((1 - eps) / (eps / V))

    partly("label_smoothing_floor", _validated(margin_without_share), [FLOOR, ZERO, FLOOR_ERROR], [MARGIN],
           "1 - ε + ε / V")


def test_floor_in_bits_is_rejected():
    def bits(V, eps):
        floor, margin = training.label_smoothing_floor(V, eps)
        return floor / math.log(2), margin / math.log(2)

    rejected("label_smoothing_floor", _validated(bits), "nats")


def test_floor_of_the_label_term_alone_costs_the_floor_only():
    def label_term(V, eps):
        q = 1 - eps + eps / V
        return -q * math.log(q), training.label_smoothing_floor(V, eps)[1]

    partly("label_smoothing_floor", _validated(label_term), [MARGIN, ZERO, FLOOR_ERROR], [FLOOR], "entropy of the whole")


def test_floor_with_nan_at_eps_zero_costs_that_part_with_a_hint():
    def nan_at_zero(vocab_size, smoothing=0.1):
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2 \
                or not 0 <= smoothing < 1:
            raise ValueError("bad arguments")
        q_other = smoothing / vocab_size
        q_label = 1 - smoothing + q_other
        with np.errstate(divide="ignore", invalid="ignore"):
            floor = float(-q_label * np.log(q_label) - (vocab_size - 1) * q_other * np.log(np.float64(q_other)))
            margin = float(np.log(q_label) - np.log(np.float64(q_other)))
        return floor, margin

    partly("label_smoothing_floor", nan_at_zero, [FLOOR, MARGIN, FLOOR_ERROR], [ZERO], "0 · log 0")


def test_floor_without_argument_checks_costs_the_error_part_only():
    def unchecked(vocab_size, smoothing=0.1):
        if smoothing == 0:
            return 0.0, math.inf
        return training.label_smoothing_floor(max(int(vocab_size), 2), min(smoothing, 0.99))

    partly("label_smoothing_floor", unchecked, [FLOOR, MARGIN, ZERO], [FLOOR_ERROR], "ValueError")


def test_floor_in_other_styles_gets_full_marks():
    def from_the_optimum(V, eps):
        """The floor as the loss at logits log q, through F.cross_entropy (the derivation done)."""
        q = torch.full((V,), eps / V, dtype=torch.float64)
        q[0] += 1 - eps
        floor = F.cross_entropy(q.log()[None], torch.tensor([0]), label_smoothing=eps).item()
        return floor, float(q.log()[0] - q.log()[1])

    def numpy_list(V, eps):
        q = np.full(V, eps / V)
        q[0] += 1 - eps
        return [float(-(q * np.log(q)).sum()), float(np.log1p(V * (1 - eps) / eps))]

    accepted("label_smoothing_floor", _validated(from_the_optimum))
    accepted("label_smoothing_floor", _validated(numpy_list))
    accepted("label_smoothing_floor", training.label_smoothing_floor)
