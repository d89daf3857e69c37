"""The training loop: :class:`Trainer`, from a config and sentence pairs to a trained model and its results.

:class:`Trainer` trains a :class:`~solutions.model.Transformer` on sentence pairs the way
section 5 of the paper describes (Adam with a warm-up schedule, label smoothing, batches
of similar length), at any scale from the book's ``tiny`` preset on a laptop CPU to the
paper's ``base`` model on several GPUs (``torchrun``, ``DistributedDataParallel``; only
rank 0 logs and saves). Its parts are objects of their own: the schedule and the time
budget (:class:`~solutions.app.schedule.RunPlan`), evaluation
(:class:`~solutions.app.evaluation.Evaluator`), the run's files
(:class:`~solutions.app.checkpoint.Checkpointer`), its record
(:class:`~solutions.app.history.RunHistory`) and its progress display
(:class:`~solutions.app.progress.TrainingProgress`); the device, ``bf16`` and ``compile``
are settled by :func:`~solutions.app.device.training_device` (weights, optimizer and loss
stay float32 under ``bf16``). This module holds the set-up, one step, the loop and
:meth:`Trainer.fit`, which runs a whole run, from the first step to the results files, and
returns a :class:`~solutions.app.summary.RunSummary`.

Paper: section 5 (Training) and Table 3 (the base configuration).
"""
import logging
import math
import os
import random
import time

import numpy as np
import torch
import torch.nn.functional as F

from ..model import count_parameters
from ..packing import packed_logits, takes_packed_rows
from ..tokens import PAD_ID
from ..translation import DECODE_BATCH_SIZE
from .batching import TranslationDataset, collate_batch, training_data
from .checkpoint import Checkpointer, best_state, restore_trainer, resume_point, store_decoding, trainer_state
from .config import TrainConfig
from .device import resolve_device, training_device
from .distributed import all_reduce_sum, setup_distributed, training_model
from .evaluation import Evaluator, batch_loss
from .history import RunHistory
from .progress import TrainingProgress
from .schedule import RunPlan, TimeBudget, format_duration, paper_adam
from .summary import LoadSampler, end_of_run, finish_training
from .tokenizer import build_tokenizers

__all__ = ["Trainer"]

logger = logging.getLogger("solutions.app.trainer")


class Trainer:
    """Train a Transformer on sentence pairs; evaluate; save and resume checkpoints.

    Args:
        config: a :class:`~solutions.app.config.TrainConfig` (e.g. ``PRESETS["tiny"]``).
        train_pairs, valid_pairs: lists of ``(source, target)`` strings.
        src_tokenizer, tgt_tokenizer: trained on ``train_pairs`` when ``None``.
        out_dir: where :meth:`train` writes ``checkpoint.pt`` after every epoch
            (rank 0 only); ``None`` = no automatic checkpoints.
        distributed: a :class:`~solutions.app.distributed.DistributedContext`; default:
            read from the environment (``torchrun``).
        decoders: a function of the trainer's device that returns the keyword arguments of
            every :func:`~solutions.translation.translate` call (its ``greedy=`` and ``beam=``
            decoders), e.g. :func:`solutions.app.inference.decoders_for`; ``None`` =
            ``translate``'s own decoders.
        tuner: a function choosing the beam's length penalty on validation, called as
            :func:`solutions.app.tuning.tune_decoding` is (what ``train`` passes); ``None`` =
            not tuned (the config's ``length_penalty`` stands). Passed in, not imported, for
            the reason ``decoders`` is: the batched beam search it runs is chapter 10's answer
            written again, so chapter 9's and 10's student packages, which ship this module,
            must not ship it.
        clock, started: the clock of the time budget and of the run's wall time (default
            ``time.monotonic``), and its reading when the run began (default: now), so that
            what the caller did before (reading the data) counts.

    Building a trainer seeds ``random``, ``numpy`` and ``torch`` with ``config.seed``
    (the initialisation and the dropout masks depend on it).

    Attributes:
        model: the :class:`~solutions.model.Transformer` (unwrapped).
        optimizer, scheduler: Adam and the ``LambdaLR`` warm-up schedule.
        step, epoch: optimizer steps done; the current epoch (from 0).
        data_identity: a JSON-like description of the training data (set by the
            caller, e.g. file paths and SHA-256 fingerprints); stored in checkpoints.
        record: the run's :class:`~solutions.app.history.RunHistory`; :attr:`history` (its
            curves, for plots) and :attr:`epoch_log` (one row per evaluated epoch) read it.
        translate_options: the keyword arguments of every ``translate`` call (``decoders``).
        plan: the :class:`~solutions.app.schedule.RunPlan` (schedule, budget, measured times).
        evaluator: the :class:`~solutions.app.evaluation.Evaluator` (metrics, BLEU, snapshots).
        checkpointer: the :class:`~solutions.app.checkpoint.Checkpointer` (files, best BLEU).
        stop_reason: why the last :meth:`train` stopped (``"epochs"``, ``"max_steps"``,
            ``"budget"``, ``"planned steps done"``).
        packed_rows: whether the steps compute the real tokens only (a model built with
            ``attention="fused"``, the default, outside DDP and ``torch.compile``).

    Paper: section 5.
    """

    def __init__(self, config, train_pairs, valid_pairs=(), src_tokenizer=None, tgt_tokenizer=None,
                 out_dir=None, distributed=None, decoders=None, tuner=None, clock=None, started=None):
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        if not train_pairs:
            raise ValueError("train_pairs is empty: nothing to train on")
        self.config = config
        self.context = distributed or setup_distributed(resolve_device(config.device).type)
        self.device, self.use_bf16, use_compile = training_device(config, self.context)
        self.out_dir = out_dir
        clock = clock or time.monotonic
        # The budget starts before the tokenizers are trained: they are part of the run.
        budget = TimeBudget(config.time_budget, clock, started) if config.time_budget else None
        self.translate_options = decoders(self.device) if decoders is not None else {}  # of every translate() call
        self.tuner = tuner
        self.stop_reason = None
        self.clock, self._clock_start = clock, clock() if started is None else started
        self.record = RunHistory(config.log_every)
        if config.threads is not None:  # checked by TrainConfig, like every field
            torch.set_num_threads(config.threads)
        random.seed(config.seed)  # the initialisation and the dropout masks depend on the seed
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)

        # one vocabulary for both languages with tied embeddings (section 5.1)
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer = build_tokenizers(
            train_pairs, config.tokenizer, config.bpe_vocab_size, config.model.share_embeddings,
            src_tokenizer, tgt_tokenizer)
        self.train_data, self.valid_data, self.sampler = training_data(
            config, train_pairs, valid_pairs, src_tokenizer, tgt_tokenizer, self.context.world_size, self.context.rank)
        self.plan = RunPlan(config, len(self.sampler), budget, log=self.log)
        self.evaluator = Evaluator(config, src_tokenizer, tgt_tokenizer, self.device, self.use_bf16,
                                   self.translate_options, log=self.log, clock=clock)
        self.checkpointer = Checkpointer(out_dir, is_main=self.context.is_main)

        # config.model.attention chooses the attention class (default "fused": SDPA with packed projections)
        self.model = config.model.build(len(src_tokenizer), len(tgt_tokenizer)).to(self.device)
        self.train_model = training_model(self.model, self.context, compile=use_compile)  # DDP, compiled
        self.optimizer = paper_adam(self.model.parameters(), self.device)
        self.scheduler = self.plan.scheduler(self.optimizer)
        self.step = self.epoch = self.batch_in_epoch = 0  # optimizer steps; the epoch and the batch in it
        self.elapsed = 0.0
        self.data_identity = None
        self.tokens_seen = 0  # source + target tokens of the training steps of this process's run

    def log(self, message):
        """Log ``message`` (the main process only; nothing when ``config.quiet``)."""
        if self.context.is_main and not self.config.quiet:
            logger.info(message)

    def train_step(self, batch):
        """One optimizer step on a (local share of a) batch; returns the global mean loss per token."""
        self.train_model.train()
        batch = batch.to(self.device)
        if self.packed_rows:  # the position-wise layers and the loss on real tokens only
            loss_sum, tokens = self._packed_loss(batch)
        else:
            loss_sum, tokens, _ = batch_loss(self.train_model, batch, self.config.label_smoothing, self.use_bf16)
        src_tokens = (batch.src != PAD_ID).sum()
        # Mean over the tokens of the *global* batch: DDP averages gradients over the
        # processes, so each scales its sum by world_size / global token count.
        totals = all_reduce_sum(torch.stack([loss_sum.detach(), tokens.float(), src_tokens.float()]), self.context)
        global_tokens = totals[1].clamp(min=1)
        loss = loss_sum * self.context.world_size / global_tokens
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        self.tokens_seen += int(totals[1].item() + totals[2].item())
        return (totals[0] / global_tokens).item()

    @property
    def packed_rows(self):
        """Whether the steps leave the padding out (:mod:`solutions.packing`): the one switch of the
        fast path, ``config.model.attention = "fused"``, decides, read at every step (a model set to
        its readable path by ``set_fused(False)`` steps padded). Not through DDP or ``torch.compile``:
        those wrap the model's forward, which computes every padded position. On the CPU only: no GPU
        has run the packed path yet (its row selections wait for the device, several times a step),
        so a CUDA run keeps the padded step it was measured with."""
        return (self.train_model is self.model and self.device.type == "cpu"
                and takes_packed_rows(self.model))

    def _packed_loss(self, batch):
        """``batch_loss``'s summed loss and token count, computed on the batch's real tokens only
        (:func:`~solutions.packing.packed_logits`): the same value and gradients."""
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            logits, targets = packed_logits(self.model, batch.src, batch.tgt_in, batch.labels, PAD_ID)  # (M, V), (M,)
        loss_sum = F.cross_entropy(logits.float(), targets, label_smoothing=self.config.label_smoothing,
                                   reduction="sum")
        return loss_sum, torch.tensor(targets.numel(), device=targets.device)

    # -- the loop -------------------------------------------------------------------------------
    def train(self, epochs=None, max_steps=None, callback=None):
        """Train until ``epochs`` epochs (total, counted from 0) or ``max_steps`` steps are done.

        On a terminal a tqdm bar shows the epoch's progress; off a terminal a line goes to
        the log every ``config.progress_seconds`` seconds or ``config.progress_steps`` steps
        (:mod:`solutions.app.progress`); ``quiet`` turns both off.

        With ``config.time_budget`` the run plans itself (:attr:`plan`): after a few steps
        it measures the seconds per step and plans the last step the budget allows,
        keeping time for an evaluation at every epoch end and for the end of the run; the
        "linear" schedule decays to that step. Every quarter epoch and at every epoch end
        the plan is made again with the measured times. The loop stops at the planned
        step or when the budget left is only the reserve; :attr:`stop_reason` says why.

        Args:
            epochs: defaults to ``config.epochs``.
            max_steps: defaults to ``config.max_steps`` (``None`` = no limit).
            callback: called as ``callback(trainer)`` after every step (e.g. to record a curve).

        Returns:
            :attr:`history`.
        """
        epochs = self.config.epochs if epochs is None else epochs
        max_steps = self.config.max_steps if max_steps is None else max_steps
        planned = self.step + max(0, (epochs - self.epoch) * len(self.sampler) - self.batch_in_epoch)
        if max_steps is not None:
            planned = min(planned, max(max_steps, self.step))
        self._progress = TrainingProgress(self.log, self.config, self.context.is_main, self.step, self.tokens_seen,
                                          planned, epochs)
        budget = self.plan.budget
        self.plan.begin(self.step)
        self.stop_reason = None
        while self.epoch < epochs and (max_steps is None or self.step < max_steps):
            self.sampler.set_epoch(self.epoch)
            batches = list(self.sampler)
            self._progress.start_epoch(self.epoch, len(batches), self.batch_in_epoch)
            start = time.perf_counter()
            for indices in batches[self.batch_in_epoch:]:
                if max_steps is not None and self.step >= max_steps:
                    break
                if budget is not None and self.plan.exhausted(self.step, self._progress.line.first_step):
                    break
                step_start, clock_start = time.perf_counter(), self.clock()
                batch = collate_batch([self.train_data[i] for i in indices])
                loss = self.train_step(batch)
                self._progress.line.busy(time.perf_counter() - step_start)
                self.batch_in_epoch += 1
                if self.plan.time_step(self.step, self.clock() - clock_start, len(batches)):
                    self._replan()
                lr = self.scheduler.get_last_lr()[0]
                self.record.add_step(self.step, loss, lr, self.elapsed + time.perf_counter() - start)
                self._progress.update(self.step, self.epoch, loss, lr, self.tokens_seen, budget)
                if callback is not None:
                    self.elapsed += time.perf_counter() - start
                    start = time.perf_counter()
                    callback(self)
            self._progress.end_epoch()
            self.elapsed += time.perf_counter() - start
            if self.batch_in_epoch < len(batches):
                break  # stopped inside the epoch (max_steps or the budget)
            self.epoch += 1
            self.batch_in_epoch = 0
            if self.plan.no_time_to_evaluate():
                break  # no time for this epoch's evaluation: finish() evaluates
            self._end_of_epoch(epochs)
            if budget is not None and self.plan.exhausted(self.step, self._progress.line.first_step):
                break
        reached = max_steps is not None and self.step >= max_steps
        self.stop_reason = self.plan.stop_reason or ("max_steps" if reached else "epochs")
        if self.out_dir is not None:
            self.save_checkpoint(self.checkpointer.path("checkpoint.pt"))
        return self.history

    def _replan(self):
        self._progress.line.planned = self.plan.replan(self.step)

    def _end_of_epoch(self, epochs):
        """Evaluate, keep the best and the snapshots for averaging, save, and (with a budget) re-plan."""
        eval_start = self.clock()
        metrics = self.evaluate()
        self.plan.seconds["eval"] = self.clock() - eval_start
        self.log(f"epoch {self.epoch}/{epochs} step {self.step}: " + ", ".join(
            f"{name} {value:.4g}" for name, value in metrics.items()))
        self.keep_best(metrics["bleu"])
        self.record_epoch(metrics)
        if self.config.average_last > 1:
            self.evaluator.snapshot(self.model)
        if self.out_dir is not None:
            self.save_checkpoint(self.checkpointer.path("checkpoint.pt"))
        if self.plan.budget is not None:
            if self.config.beam_size > 1 and self.plan.final_sentences:
                # every epoch: the time follows the translations' length, which training changes;
                # one batch of the final decoding's size, at whose rate it decodes
                timed = self.evaluator.time_beam(self.model, self.valid_data.pairs[:DECODE_BATCH_SIZE])
                if timed is not None:
                    self.plan.seconds["beam_sentence"], self.plan.beam_length_ratio = timed
                    self.log(f"beam {self.config.beam_size}: {timed[0]:.3f} s a sentence, the translations "
                             f"{1 / timed[1]:.2f}x the references' length; kept for the end "
                             f"{format_duration(self.plan.reserve())}")
            if self.plan.seconds["step"] is not None:
                self._replan()

    # -- evaluation and the end of training -----------------------------------------------------
    def evaluate(self, pairs=None, max_sentences=None):
        """:meth:`Evaluator.evaluate <solutions.app.evaluation.Evaluator.evaluate>` of the model on
        ``pairs`` (default: the validation split, and then the metrics are appended to
        ``history["valid"]``); ``max_sentences`` defaults to ``config.eval_sentences``."""
        data = self.valid_data if pairs is None else TranslationDataset(
            pairs, self.src_tokenizer, self.tgt_tokenizer, max_len=self.config.model.max_len - 1)
        metrics = self.evaluator.evaluate(self.model, data, max_sentences)
        if pairs is None:
            self.record.add_evaluation(self.step, self.epoch, self.elapsed, metrics)
        return metrics

    def record_epoch(self, metrics):
        """Append a row to :attr:`epoch_log` (wall minutes since the run began, mean training loss)."""
        wall = self.plan.budget.elapsed() if self.plan.budget is not None else self.clock() - self._clock_start
        self.record.end_epoch(self.epoch, self.step, wall, metrics)

    def keep_best(self, bleu, model_state=None):
        """A new best validation BLEU is kept, with ``best.pt`` written (of ``model_state``, default the model's)."""
        if not self.checkpointer.improves(bleu):
            return False
        if self.out_dir is not None:  # saved after best_bleu is updated, so that best.pt records its own score
            self.save_best(self.checkpointer.path("best.pt"), model_state=model_state)
        return True

    def tune_length_penalty(self):
        """The end of a run's length penalty, chosen on validation by the trainer's ``tuner``
        (:func:`~solutions.app.tuning.tune_decoding`).

        With a ``tuner``, ``config.beam_size > 1``, a ``config.length_penalty_grid``, validation
        pairs and the time to decode them (:meth:`~solutions.app.schedule.RunPlan.can_tune`), the validation set
        is decoded with the run's beam and every α of the grid scored on it; the choice is stored
        in ``best.pt`` (``translate`` then uses it). The test set is not decoded here.

        Returns:
            The tuning's result, or ``None`` (not tuned: the config's ``length_penalty`` stands).
        """
        config = self.config
        if (self.tuner is None or config.beam_size == 1 or not config.length_penalty_grid
                or not len(self.valid_data.pairs) or not self.plan.can_tune()):
            return None
        tuning = self.tuner(self.model, self.valid_data.pairs, self.src_tokenizer, self.tgt_tokenizer,
                            config.length_penalty_grid, (config.beam_size,), device=self.device, log=self.log)
        best = self.checkpointer.path("best.pt")
        if best is not None and os.path.isfile(best):
            store_decoding(best, tuning)
        return tuning

    def finish(self):
        """The end of training (:func:`~solutions.app.summary.finish_training`): the weights left
        unevaluated and the averaged ones evaluated, the best of them loaded. Returns its report."""
        return finish_training(self)

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self):
        """Everything needed to resume exactly (:func:`~solutions.app.checkpoint.trainer_state`)."""
        return trainer_state(self)

    def load_state_dict(self, state):
        """Restore a :meth:`state_dict` (:func:`~solutions.app.checkpoint.restore_trainer`).

        Raises:
            CheckpointError: a checkpoint whose model config or vocabularies differ from
                this trainer's, or an inference-only export.
        """
        restore_trainer(self, state)

    def save_checkpoint(self, path):
        """Write :meth:`state_dict` to ``path`` (rank 0 only; atomic replace). Returns ``path``."""
        return self.checkpointer.save(self.state_dict, path)

    def save_best(self, path, model_state=None):
        """Write the inference checkpoint ``best.pt`` (rank 0 only): weights (``model_state``
        instead of the model's when given, e.g. averaged ones), config, tokenizers, history."""
        return self.checkpointer.save(lambda: best_state(self, model_state), path)

    @classmethod
    def from_checkpoint(cls, path, train_pairs, valid_pairs=(), out_dir=None, distributed=None, decoders=None,
                        tuner=None, started=None, other_data=False, **changes):
        """A trainer that continues the run saved at ``path``: same config, same vocabularies.

        Args:
            path: the checkpoint.
            train_pairs, valid_pairs: the data (the same as the saved run's for an exact resume).
            out_dir, distributed, decoders, tuner, started: as for the constructor.
            other_data: the data are not the saved run's (``--allow-other-data``): the stored
                best validation BLEU is forgotten (BLEU on another validation set is not comparable).
            changes: config fields to change (:func:`~solutions.app.checkpoint.resume_point`).
        """
        state, config, src_tokenizer, tgt_tokenizer = resume_point(path, **changes)
        trainer = cls(config, train_pairs, valid_pairs, src_tokenizer=src_tokenizer, tgt_tokenizer=tgt_tokenizer,
                      out_dir=out_dir, distributed=distributed, decoders=decoders, tuner=tuner, started=started)
        trainer.load_state_dict(state)
        if other_data:
            trainer.checkpointer.best_bleu = None
        return trainer

    @property
    def history(self):
        """The run's curves (:attr:`RunHistory.curves <solutions.app.history.RunHistory.curves>`)."""
        return self.record.curves

    @property
    def epoch_log(self):
        """One row per evaluated epoch (:attr:`RunHistory.epochs <solutions.app.history.RunHistory.epochs>`)."""
        return self.record.epochs

    @property
    def best_bleu(self):
        """The highest validation BLEU at an epoch end so far (``None`` before)."""
        return self.checkpointer.best_bleu

    @property
    def budget(self):
        """The run's :class:`~solutions.app.schedule.TimeBudget`, or ``None``."""
        return self.plan.budget

    @property
    def planned_steps(self):
        """The last step the budget allows (``None`` until planned)."""
        return self.plan.planned_steps

    def final_beam_size(self):
        """:meth:`RunPlan.final_beam_size <solutions.app.schedule.RunPlan.final_beam_size>`."""
        return self.plan.final_beam_size()

    # -- the whole run --------------------------------------------------------------------------
    def fit(self, test_pairs=(), max_steps=None, data_identity=None, command="", preset=None, skipped_lines=None):
        """Run training to its end: :meth:`train`, :meth:`finish`, the final decoding and the results files.

        After training (and the averaging of :meth:`finish`), the validation pairs are
        translated greedily and the test pairs with the run's decoding; with an ``out_dir``
        the main process writes ``history.json``, ``results.json`` and
        ``test_translations.jsonl`` there (:func:`~solutions.app.summary.end_of_run`). Only
        the main process of a distributed run decodes and writes.

        Args:
            test_pairs: the held-out ``(source, target)`` pairs, decoded once, at the end.
            max_steps: the run's total steps when given alone (the epochs are raised to
                cover them; ``None`` = the config's epochs and ``max_steps``).
            data_identity: what the run trains on (files and their SHA-256, or the synthetic
                task's seed), stored in every checkpoint as :attr:`data_identity`.
            command, preset, skipped_lines: recorded in ``results.json`` (the command line,
                the preset's name, ``{"train"|"valid"|"test"|"data": lines left out}``).

        Returns:
            A :class:`~solutions.app.summary.RunSummary` (``None`` on the other processes of
            a distributed run).
        """
        test_pairs = list(test_pairs)
        if data_identity is not None:
            self.data_identity = data_identity
        if self.config.beam_size > 1:  # the end of the run decodes the test set with the beam: keep time for it
            self.plan.final_sentences = len(test_pairs)
            if self.tuner is not None and self.config.length_penalty_grid:  # and validation, to tune its α
                self.plan.tune_sentences = len(self.valid_data.pairs)
        if max_steps is not None:
            per_epoch = max(1, len(self.sampler))
            self.config = self.plan.config = self.config.replace(epochs=max(1, math.ceil(max_steps / per_epoch)))
        load = LoadSampler()
        self.log(f"training {count_parameters(self.model):,} parameters on {len(self.train_data)} pairs "
                  f"({self.device}, {self.context.world_size} process{'es' if self.context.world_size > 1 else ''}), "
                  f"batches of {self.config.batch_size}")
        self.train()
        if not self.context.is_main:
            load.stop()
            return None
        finish = self.finish()
        tuning = self.tune_length_penalty()  # on validation; the test set is decoded afterwards, once
        return end_of_run(self, finish, test_pairs, load, command=command, preset=preset,
                          skipped_lines=skipped_lines, tuning=tuning)

    def wall_seconds(self):
        """Seconds since the run began (since ``started`` when given: reading the data counts)."""
        return self.clock() - self._clock_start
