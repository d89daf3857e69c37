"""Training objectives and schedule (chapter 9): teacher forcing, the warm-up schedule, label smoothing.

The three graded objects of chapter 9 live here, each self-contained (the book
copies their source into the chapter notebook):

- :func:`make_decoder_io`: the decoder input "shifted right" and the labels;
- :func:`noam_lr`: the learning rate of section 5.3, equation (3);
- :func:`label_smoothed_cross_entropy`: the loss with label smoothing of section 5.4.

The training loop itself (optimizer, checkpoints, evaluation, several processes)
is :class:`solutions.app.trainer.Trainer`.
"""

import math

import torch
import torch.nn.functional as F

__all__ = ["make_decoder_io", "noam_lr", "label_smoothed_cross_entropy", "label_smoothing_floor"]


def make_decoder_io(targets, sos_id=1, eos_id=2, pad_id=0):
    """Decoder input and labels for teacher forcing: ``[<sos>, y...]``
    and ``[y..., <eos>]``.

    Args:
        targets: a non-empty list of target sentences, each a list of
            token ids without special tokens.
        sos_id, eos_id, pad_id: the ids of ``<sos>``, ``<eos>`` and
            ``<pad>``.

    Shape:
        decoder_input, labels: ``(B, L + 1)`` with ``L`` the longest
        target; right-padded with ``pad_id``.

    Returns:
        ``(decoder_input, labels)``, two ``LongTensor``. Position ``t``
        of ``labels`` is the token the decoder must predict after
        reading ``decoder_input[:, :t + 1]``.

    Paper: section 3.1
    ("the output embeddings are offset by one position") and section
    3.2.3 (the decoder predicts position i from the outputs before i).
    """
    if not isinstance(targets, (list, tuple)) or len(targets) == 0:
        raise ValueError(
            "targets must be a non-empty list of token-id lists"
        )
    for row, target in enumerate(targets):
        if not isinstance(target, (list, tuple)):
            raise TypeError(
                f"targets[{row}] must be a list of ints, got "
                f"{type(target).__name__}"
            )
    longest = max(len(target) for target in targets)
    # decoder_input: (B, L + 1)
    decoder_input = torch.full(
        (len(targets), longest + 1), pad_id, dtype=torch.long
    )
    # labels: (B, L + 1)
    labels = torch.full(
        (len(targets), longest + 1), pad_id, dtype=torch.long
    )
    for row, target in enumerate(targets):
        ids = torch.tensor(list(target), dtype=torch.long)  # (len,)
        decoder_input[row, 0] = sos_id
        decoder_input[row, 1:len(target) + 1] = ids
        labels[row, :len(target)] = ids
        labels[row, len(target)] = eos_id
    return decoder_input, labels


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    """The learning rate of the paper's schedule: linear warm-up, then
    ``1/sqrt(step)`` decay.

    ``lrate = factor * d_model**-0.5 * min(step**-0.5, step *
    warmup_steps**-1.5)``.

    Args:
        step: the training step, counted from 1.
        d_model: the model width (512 in the base model).
        warmup_steps: steps of linear increase (4000 in the paper).
        factor: a constant multiplier (1.0 in the paper).

    Returns:
        The learning rate (a float); its peak is at
        ``step == warmup_steps``.

    Raises:
        ValueError: when ``step < 1`` (``step**-0.5`` is undefined at
            0).

    Paper: section 5.3, equation (3).
    """
    if step < 1:
        raise ValueError(
            "step must be >= 1 (the schedule counts steps from 1), "
            f"got {step}"
        )
    if warmup_steps < 1:
        raise ValueError(
            f"warmup_steps must be >= 1, got {warmup_steps}"
        )
    return (
        factor
        * d_model**-0.5
        * min(step**-0.5, step * warmup_steps**-1.5)
    )


def label_smoothed_cross_entropy(
    logits, labels, smoothing=0.1, pad_id=0
):
    """Cross-entropy against a smoothed target distribution, averaged
    over non-pad tokens.

    The target puts ``1 - smoothing`` on the label and spreads
    ``smoothing`` uniformly over all ``V`` classes (the label included),
    as ``F.cross_entropy(..., label_smoothing=smoothing)`` does.
    Positions whose label is ``pad_id`` do not count.

    Args:
        logits: unnormalised scores.
        labels: the target ids.
        smoothing: ``epsilon_ls`` (0.1 in the paper), in ``[0, 1)``.
        pad_id: the label id that is ignored (default 0, the book's
            ``<pad>``; a vocabulary whose class 0 is a real token must
            pass its own pad id, or every class-0 target is silently
            dropped from the loss).

    Shape:
        logits: ``(B, T, V)``; labels: ``(B, T)``; output: scalar.

    Returns:
        The mean loss over the non-pad positions: a 0-dim float tensor
        in the logits' dtype, float32 for half-precision logits (a wider
        float dtype is accepted too). When every label is
        ``pad_id`` the loss is 0 (``F.cross_entropy`` gives NaN there).

    Paper: section 5.4 ("Label Smoothing ... epsilon_ls = 0.1").
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            "expected logits (B, T, V) and labels (B, T), got "
            f"{tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(
            f"smoothing must be in [0, 1), got {smoothing}"
        )
    vocab_size = logits.size(-1)
    # at least float32 (bf16/fp16 logits under autocast), float64 stays
    # float64
    dtype = torch.promote_types(logits.dtype, torch.float32)
    # log_probs: (B*T, V)
    log_probs = F.log_softmax(logits, dim=-1, dtype=dtype).reshape(
        -1, vocab_size
    )
    flat_labels = labels.reshape(-1)  # (B*T,)
    keep = flat_labels != pad_id  # (B*T,)
    safe_labels = flat_labels.masked_fill(~keep, 0)
    # nll: (B*T,)
    nll = -log_probs.gather(1, safe_labels[:, None]).squeeze(1)
    uniform = -log_probs.mean(dim=-1)  # (B*T,)
    loss = (1.0 - smoothing) * nll + smoothing * uniform  # (B*T,)
    return (loss * keep).sum() / keep.sum().clamp(min=1)


def label_smoothing_floor(vocab_size, smoothing=0.1):
    """The lowest value the label-smoothed cross-entropy of one position
    can take, and the label's logit margin at that minimum.

    The loss is the one of :func:`label_smoothed_cross_entropy`: the
    target puts ``1 - smoothing`` on the label and spreads ``smoothing``
    over all ``V`` classes.

    Args:
        vocab_size: ``V``, the number of classes (an int, at least 2).
        smoothing: ``epsilon_ls`` in ``[0, 1)``.

    Returns:
        ``(floor, margin)``, two Python floats, in nats: the minimum of
        the loss over all logits, and by how much the label's logit
        exceeds every other logit there. For ``smoothing = 0`` there is
        no minimum: ``(0.0, math.inf)``.

    Raises:
        ValueError: ``vocab_size`` is not an int >= 2, or ``smoothing``
            is outside ``[0, 1)``.

    Paper: section 5.4
    ("This hurts perplexity, as the model learns to be more unsure").
    """
    if (
        isinstance(vocab_size, bool)
        or not isinstance(vocab_size, int)
        or vocab_size < 2
    ):
        raise ValueError(
            f"vocab_size must be an int >= 2, got {vocab_size!r}"
        )
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(
            f"smoothing must be in [0, 1), got {smoothing!r}"
        )
    if smoothing == 0.0:
        # a one-hot target: the loss only approaches 0 as the margin
        # grows
        return 0.0, math.inf
    # -Σ q_i log p_i = H(q) + KL(q || p), and KL >= 0 with equality only
    # at p = q: the floor is H(q), reached by logits log q (+ any
    # constant), where the label's logit exceeds every other by
    # log(q_label / q_other).
    q_other = smoothing / vocab_size
    q_label = 1.0 - smoothing + q_other
    floor = -q_label * math.log(q_label) - (
        vocab_size - 1
    ) * q_other * math.log(q_other)
    return floor, math.log(q_label) - math.log(q_other)
