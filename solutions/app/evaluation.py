"""Evaluation: corpus BLEU, the loss of a batch, the validation metrics of an epoch end.

:class:`CorpusBLEU` is sacreBLEU's standard corpus BLEU as the trainer and the results
report it. :func:`batch_loss` is the loss the trainer steps on and evaluation reports, so
that both measure alike. :class:`Evaluator` is what the :class:`~solutions.app.trainer.Trainer` measures a
model with (:meth:`~Evaluator.evaluate`: loss and token accuracy with teacher forcing, exact
match and BLEU of greedy translations; :meth:`~Evaluator.time_beam`: the final decoding's
cost) and the weights it keeps for averaging (:meth:`~Evaluator.snapshot`,
:meth:`~Evaluator.averaged`).

Paper: section 6.1 (BLEU on newstest2014); Post (2018), "A Call for Clarity in Reporting BLEU Scores".
"""
import math
import time

import torch
import torch.nn.functional as F
from sacrebleu.metrics import BLEU

from ..masking import decoder_mask, padding_mask
from ..tokens import PAD_ID
from ..translation import translate
from .batching import collate_batch

__all__ = ["CorpusBLEU", "batch_loss", "Evaluator"]


class CorpusBLEU:
    """sacreBLEU's standard corpus BLEU (13a tokenisation, exponential smoothing, mixed case).

    ``scorer(hypotheses, references)`` returns the score (0-100) of detokenised
    hypotheses against one reference each. sacreBLEU's warning about hypotheses
    that look tokenised ("That's 100 lines that end in a tokenized period") comes at
    most once per scorer, not at every evaluation. :attr:`signature` is the
    standard signature (``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...``)
    to report with the scores.
    """

    def __init__(self):
        self._first, self._later = BLEU(), BLEU(force=True)  # force=True: no tokenised-period warning
        self.calls = 0
        self.signature = None
        self.last = None  # the last sacrebleu BLEUScore (str() gives n-gram precisions, BP, lengths)

    def __call__(self, hypotheses, references):
        if len(hypotheses) != len(references):
            raise ValueError(f"expected one reference per hypothesis, got {len(hypotheses)} hypotheses "
                             f"and {len(references)} references")
        metric = self._first if self.calls == 0 else self._later
        self.last = metric.corpus_score(list(hypotheses), [list(references)])
        self.calls += 1
        self.signature = str(metric.get_signature())
        return self.last.score

    def lengths(self):
        """``{"brevity_penalty", "length_ratio"}`` of the last score: whether the hypotheses run short.

        The brevity penalty is BLEU's ``min(1, exp(1 - ref_len / sys_len))`` (1 = not short);
        the length ratio is ``sys_len / ref_len`` in 13a tokens.
        """
        if self.last is None:
            raise ValueError("no score yet: call the scorer first")
        return {"brevity_penalty": round(self.last.bp, 4),
                "length_ratio": round(self.last.sys_len / max(1, self.last.ref_len), 4)}


def batch_loss(model, batch, smoothing, bf16=False):
    """The label-smoothed loss of ``model`` on ``batch`` with teacher forcing, summed over its target tokens.

    Args:
        model: a :class:`~solutions.model.Transformer` (or a wrapper that calls one:
            ``DistributedDataParallel``, ``torch.compile``).
        batch: a :class:`~solutions.app.batching.Batch` on the model's device.
        smoothing: the label smoothing (section 5.4); 0 = plain cross-entropy.
        bf16: run the forward pass under ``torch.autocast(dtype=torch.bfloat16)`` (the loss
            is computed in float32 either way).

    Returns:
        ``(loss_sum, tokens, correct)`` tensors: the summed loss, the number of target tokens
        (padding left out) and how many of them the arg-max predicts.

    Paper: section 5.4 (label smoothing).
    """
    src_mask = padding_mask(batch.src, PAD_ID)  # (B, 1, 1, S)
    tgt_mask = decoder_mask(batch.tgt_in, PAD_ID)  # (B, 1, T, T)
    with torch.autocast(device_type=batch.src.device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(batch.src, batch.tgt_in, src_mask, tgt_mask)  # (B, T, V)
    vocab_size = logits.size(-1)
    loss_sum = F.cross_entropy(
        logits.float().reshape(-1, vocab_size), batch.labels.reshape(-1),  # (B*T, V), (B*T,)
        ignore_index=PAD_ID, label_smoothing=smoothing, reduction="sum",
    )
    keep = batch.labels != PAD_ID  # (B, T)
    correct = ((logits.argmax(dim=-1) == batch.labels) & keep).sum()
    return loss_sum, keep.sum(), correct


class Evaluator:
    """Measures a model on held-out pairs, and keeps the weights of the last epoch ends for averaging.

    Args:
        config: the run's :class:`~solutions.app.config.TrainConfig` (``eval_sentences``,
            ``label_smoothing``, ``average_last``, ``beam_size``, ``length_penalty``).
        src_tokenizer, tgt_tokenizer: the run's tokenizers.
        device: where the model runs.
        bf16: the forward pass in bfloat16, as the trainer runs it (:func:`batch_loss`).
        translate_options: keyword arguments of every :func:`~solutions.translation.translate`
            call (its decoders).
        log: a function of one message (default: none).
        clock: the clock of :meth:`time_beam` (default ``time.monotonic``).

    Attributes:
        bleu: the :class:`CorpusBLEU` scorer (``bleu.signature`` after the first evaluation).
        snapshots: CPU copies of the weights at the last ``average_last`` epoch ends.
    """

    def __init__(self, config, src_tokenizer, tgt_tokenizer, device, bf16=False, translate_options=None, log=None,
                 clock=time.monotonic):
        self.config, self.device, self.bf16 = config, device, bf16
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self.translate_options = translate_options or {}
        self.log = log or (lambda message: None)
        self.clock = clock
        self.bleu = CorpusBLEU()
        self.snapshots = []

    def evaluate(self, model, data, max_sentences=None):
        """Metrics of ``model`` on ``data`` (a :class:`~solutions.app.batching.TranslationDataset`).

        Args:
            model: the model (put in eval mode).
            data: the pairs, as ids (for the loss) and as text (``data.pairs``, for BLEU).
            max_sentences: translate at most this many for exact match and BLEU
                (default ``config.eval_sentences``; 0 = loss and accuracy only).

        Returns:
            ``{"loss", "accuracy", "exact_match", "bleu"}``: label-smoothed loss and
            arg-max accuracy per target token (teacher forcing); the fraction of
            greedy translations equal to the reference (up to whitespace); corpus BLEU
            (:attr:`bleu`, sacreBLEU's standard signature, logged at the first
            evaluation) of the detokenised translations against the references as
            they are in the data. Empty data gives NaN.
        """
        max_sentences = self.config.eval_sentences if max_sentences is None else max_sentences
        metrics = {"loss": math.nan, "accuracy": math.nan, "exact_match": math.nan, "bleu": math.nan}
        if len(data) == 0:
            return metrics
        model.eval()
        loss_sum, tokens, correct = 0.0, 0, 0
        with torch.no_grad():
            for start in range(0, len(data), 128):
                batch = collate_batch([data[i] for i in range(start, min(start + 128, len(data)))])
                s, n, c = batch_loss(model, batch.to(self.device), self.config.label_smoothing, self.bf16)
                loss_sum, tokens, correct = loss_sum + s.item(), tokens + n.item(), correct + c.item()
        metrics["loss"] = loss_sum / max(tokens, 1)
        metrics["accuracy"] = correct / max(tokens, 1)
        if max_sentences:
            chosen = data.pairs[:max_sentences]
            hypotheses = translate(model, [s for s, _ in chosen], self.src_tokenizer, self.tgt_tokenizer,
                                   device=self.device, **self.translate_options)
            references = [t for _, t in chosen]
            # Both sides as text (translate() detokenises); whitespace runs do not count.
            same = sum(h.split() == r.split() for h, r in zip(hypotheses, references))
            metrics["exact_match"] = same / len(chosen)
            first = self.bleu.calls == 0
            metrics["bleu"] = self.bleu(hypotheses, references)
            if first:
                self.log(f"BLEU: sacreBLEU corpus BLEU of detokenised translations, signature {self.bleu.signature}")
        return metrics

    def time_beam(self, model, pairs):
        """The final decoding's beam search, timed on validation ``pairs``: seconds per sentence, and how long
        the translations ran.

        The sentences are decoded as the final decoding decodes them (in batches, with the run's beam size
        and length penalty). The trainer measures again at every epoch end, because the time follows the
        translations' length: an undertrained model's can run to the length limit, a trained model's are
        about as long as the references.

        Args:
            model: the model being trained.
            pairs: ``(source, reference)`` strings.

        Returns:
            ``(seconds_per_sentence, length_ratio)``, ``length_ratio`` = the references' target tokens over
            the translations' (``<eos>`` counted): the time at the references' length is about their product,
            a decoding step costing about the same at every length. ``None`` for no pairs.
        """
        if not pairs:
            return None
        sources = [source for source, _ in pairs]
        start = self.clock()
        translations = translate(model, sources, self.src_tokenizer, self.tgt_tokenizer,
                                 beam_size=self.config.beam_size, length_penalty=self.config.length_penalty,
                                 device=self.device, **self.translate_options)
        seconds = self.clock() - start
        produced = sum(len(self.tgt_tokenizer.encode(text)) + 1 for text in translations)
        wanted = sum(len(self.tgt_tokenizer.encode(reference)) + 1 for _, reference in pairs)
        return seconds / len(pairs), wanted / produced

    def snapshot(self, model):
        """Keep a CPU copy of ``model``'s weights, of the last ``config.average_last`` kept (for averaging)."""
        self.snapshots.append({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
        del self.snapshots[:-self.config.average_last]

    def averaged(self, model):
        """The mean of the :attr:`snapshots` (floating-point tensors; others as ``model`` has them), on the CPU.

        Returns:
            A state dict for ``model``, or ``None`` with fewer than two snapshots.
        """
        if len(self.snapshots) < 2:
            return None
        return {name: (torch.stack([s[name].float() for s in self.snapshots]).mean(0).to(value.dtype)
                       if value.is_floating_point() else value)
                for name, value in model.state_dict().items()}
