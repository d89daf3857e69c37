"""Evaluation: corpus BLEU, the validation metrics of an epoch end, and the end of the training.

:class:`CorpusBLEU` is sacreBLEU's standard corpus BLEU as the trainer and the results
report it. :class:`EvaluationMixin` is the :class:`~solutions.app.trainer.Trainer`'s part
that measures a model on held-out pairs (:meth:`~EvaluationMixin.evaluate`: loss and
token accuracy with teacher forcing, exact match and BLEU of greedy translations) and
ends the training (:meth:`~EvaluationMixin.finish`: the weights left unevaluated, the
average of the last epochs' weights, the best of them loaded).

Paper: section 6.1 (BLEU on newstest2014); Post (2018), "A Call for Clarity in Reporting BLEU Scores".
"""
import math
import os

import torch
from sacrebleu.metrics import BLEU

from ..translation import translate
from .batching import TranslationDataset, collate_batch
from .checkpoint import load_checkpoint

__all__ = ["CorpusBLEU", "EvaluationMixin"]


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


class EvaluationMixin:
    """The :class:`~solutions.app.trainer.Trainer`'s evaluation and the end of its training.

    Reads the trainer's model, tokenizers, ``valid_data``, ``config``, ``bleu`` (a
    :class:`CorpusBLEU`), ``translate_options`` and position; appends to its
    ``history["valid"]`` and ``epoch_log``; keeps the weights of the last epoch ends in
    ``_snapshots`` for averaging.
    """

    def evaluate(self, pairs=None, max_sentences=None):
        """Validation metrics; also appended to ``history["valid"]`` when ``pairs`` is ``None``.

        Args:
            pairs: sentence pairs to evaluate on (default: the validation split).
            max_sentences: translate at most this many for exact match and BLEU
                (default ``config.eval_sentences``).

        Returns:
            ``{"loss", "accuracy", "exact_match", "bleu"}``: label-smoothed loss and
            arg-max accuracy per target token (teacher forcing); the fraction of
            greedy translations equal to the reference (up to whitespace); corpus BLEU
            (:attr:`bleu`, sacreBLEU's standard signature, logged at the first
            evaluation) of the detokenised translations against the references as
            they are in the data. Empty data gives NaN.
        """
        record = pairs is None
        data = self.valid_data if pairs is None else TranslationDataset(
            pairs, self.src_tokenizer, self.tgt_tokenizer, max_len=self.config.model.max_len - 1)
        max_sentences = self.config.eval_sentences if max_sentences is None else max_sentences
        metrics = {"loss": math.nan, "accuracy": math.nan, "exact_match": math.nan, "bleu": math.nan}
        if len(data) > 0:
            self.model.eval()
            loss_sum, tokens, correct = 0.0, 0, 0
            with torch.no_grad():
                for start in range(0, len(data), 128):
                    batch = collate_batch([data[i] for i in range(start, min(start + 128, len(data)))])
                    s, n, c = self._forward_loss(self.model, batch.to(self.device), self.config.label_smoothing)
                    loss_sum, tokens, correct = loss_sum + s.item(), tokens + n.item(), correct + c.item()
            metrics["loss"] = loss_sum / max(tokens, 1)
            metrics["accuracy"] = correct / max(tokens, 1)
            if max_sentences:
                chosen = data.pairs[:max_sentences]
                hypotheses = translate(self.model, [s for s, _ in chosen], self.src_tokenizer,
                                       self.tgt_tokenizer, device=self.device, **self.translate_options)
                references = [t for _, t in chosen]
                # Both sides as text (translate() detokenises); whitespace runs do not count.
                same = sum(h.split() == r.split() for h, r in zip(hypotheses, references))
                metrics["exact_match"] = same / len(chosen)
                first = self.bleu.calls == 0
                metrics["bleu"] = self.bleu(hypotheses, references)
                if first:
                    self._log("BLEU: sacreBLEU corpus BLEU of detokenised translations, "
                              f"signature {self.bleu.signature}")
        if record:
            history = self.history["valid"]
            history["step"].append(self.step)
            history["epoch"].append(self.epoch)
            history["time"].append(self.elapsed)
            for name, value in metrics.items():
                history[name].append(value)
        return metrics

    def _log_epoch(self, metrics):
        """Append a row to :attr:`epoch_log` (wall minutes since the run began, mean training loss)."""
        total, count = self._epoch_loss
        wall = self.budget.elapsed() if self.budget is not None else self.clock() - self._clock_start
        self.epoch_log.append({"epoch": self.epoch, "step": self.step, "minutes": round(wall / 60, 2),
                               "train_loss": round(total / count, 4) if count else None,
                               "valid_loss": round(metrics["loss"], 4), "valid_bleu": round(metrics["bleu"], 2)})
        self._epoch_loss = [0.0, 0]

    def _snapshot(self):
        """Keep a CPU copy of the current weights, of the last ``config.average_last`` kept (for averaging)."""
        self._snapshots.append({k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()})
        del self._snapshots[:-self.config.average_last]

    def finish(self):
        """The end of a run: evaluate what :meth:`train` left unevaluated, and the averaged weights.

        When training stopped inside an epoch (the budget or ``max_steps``), the
        final weights are evaluated on the validation set; with ``average_last``
        N > 1, the mean of the weights at the last N epoch ends (and the final
        weights, when they are newer) is evaluated too. Whichever has the best
        validation BLEU becomes ``best.pt``, and its weights are loaded into
        :attr:`model` (so that a test evaluation afterwards uses them).

        Returns:
            ``{"final_bleu", "averaged_bleu", "averaged": int, "chosen": "epoch" | "final" |
            "averaged"}`` (BLEU values NaN when not evaluated).
        """
        report = {"final_bleu": math.nan, "averaged_bleu": math.nan, "averaged": 0, "chosen": "epoch"}
        best_weights = None
        last_evaluated = self.history["valid"]["step"][-1] if self.history["valid"]["step"] else None
        if last_evaluated != self.step and len(self.valid_data):
            metrics = self.evaluate()
            report["final_bleu"] = metrics["bleu"]
            self._log_epoch(metrics)
            self._log(f"final weights (step {self.step}): valid BLEU {report['final_bleu']:.2f}")
            if self._keep_best(report["final_bleu"]):
                report["chosen"] = "final"
            if self.config.average_last > 1:
                self._snapshot()
        if self.config.average_last > 1 and len(self._snapshots) > 1 and len(self.valid_data):
            current = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            averaged = {name: (torch.stack([s[name].float() for s in self._snapshots]).mean(0).to(value.dtype)
                               if value.is_floating_point() else value)
                        for name, value in current.items()}
            self.model.load_state_dict({k: v.to(self.device) for k, v in averaged.items()})
            bleu = self.evaluate(self.valid_data.pairs)["bleu"]  # not recorded in the history
            report["averaged_bleu"], report["averaged"] = bleu, len(self._snapshots)
            self._log(f"average of the last {len(self._snapshots)} checkpoints: valid BLEU {bleu:.2f}")
            if not math.isnan(bleu) and (self.best_bleu is None or bleu > self.best_bleu):
                self.best_bleu = bleu
                best_weights = averaged
                report["chosen"] = "averaged"
                if self.out_dir is not None:
                    self.save_best(os.path.join(self.out_dir, "best.pt"), model_state=averaged)
            self.model.load_state_dict(current)
        if report["chosen"] == "epoch" and self.out_dir is not None and \
                os.path.isfile(os.path.join(self.out_dir, "best.pt")):
            best_weights = load_checkpoint(os.path.join(self.out_dir, "best.pt"))["model"]
        if best_weights is not None:
            self.model.load_state_dict({k: v.to(self.device) for k, v in best_weights.items()})
        return report
