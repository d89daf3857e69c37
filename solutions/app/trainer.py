"""The training loop: :class:`Trainer`, from a config and sentence pairs to a trained model and its results.

:class:`Trainer` trains a :class:`~solutions.model.Transformer` on sentence pairs the way
section 5 of the paper describes (Adam with a warm-up schedule, label smoothing, batches
of similar length), at any scale from the book's ``tiny`` preset on a laptop CPU to the
paper's ``base`` model on several GPUs (``torchrun``, ``DistributedDataParallel``; only
rank 0 logs and saves). Its parts are objects of their own: the schedule and the time
budget (:class:`~solutions.app.schedule.RunPlan`), evaluation
(:class:`~solutions.app.evaluation.Evaluator`) and the run's files
(:class:`~solutions.app.checkpoint.Checkpointer`). ``bf16=True`` runs the forward pass
under ``torch.autocast(dtype=torch.bfloat16)`` on CUDA and on a CPU with native bfloat16
(:func:`~solutions.app.device.cpu_has_bf16`: about 1.5 times the steps per second of
float32 on 2 cores of an AMD EPYC with AVX512-BF16; weights, optimizer and loss stay
float32), and warns and is ignored elsewhere; ``compile=True`` uses ``torch.compile`` on
CUDA only. :meth:`Trainer.fit` runs a whole run, from the first step to the results files,
and returns a :class:`~solutions.app.summary.RunSummary`.

Paper: section 5 (Training) and Table 3 (the base configuration).
"""
import collections
import logging
import math
import random
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from ..masking import decoder_mask, padding_mask
from ..model import count_parameters
from ..tokens import PAD_ID
from .batching import BucketBatchSampler, TranslationDataset, collate_batch
from .checkpoint import Checkpointer, best_state, restore_trainer, resume_point, trainer_state
from .config import TrainConfig
from .device import cpu_has_bf16, resolve_device
from .distributed import all_reduce_sum, setup_distributed
from .evaluation import Evaluator
from .schedule import ProgressLine, RunPlan, TimeBudget
from .summary import LoadSampler, end_of_run, finish_training
from .tokenizer import build_tokenizer

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
        history: ``{"train": {"step", "loss", "lr", "time"}, "valid": {"step", "epoch",
            "loss", "accuracy", "exact_match", "bleu", "time"}}`` (lists, for plots).
        epoch_log: one row per evaluated epoch (epoch, step, wall minutes, train and valid loss, BLEU).
        translate_options: the keyword arguments of every ``translate`` call (``decoders``).
        plan: the :class:`~solutions.app.schedule.RunPlan` (schedule, budget, measured times).
        evaluator: the :class:`~solutions.app.evaluation.Evaluator` (metrics, BLEU, snapshots).
        checkpointer: the :class:`~solutions.app.checkpoint.Checkpointer` (files, best BLEU).
        stop_reason: why the last :meth:`train` stopped (``"epochs"``, ``"max_steps"``,
            ``"budget"``, ``"planned steps done"``).

    Its parts are objects of their own, each with its state and a small interface this
    class calls: the schedule and the time budget (:attr:`plan`), evaluation
    (:attr:`evaluator`) and the run's files (:attr:`checkpointer`); this class holds the
    set-up, one step, the loop, the end of training (:meth:`finish`), its state for a
    checkpoint and the whole run (:meth:`fit`).

    Paper: section 5.
    """

    def __init__(self, config, train_pairs, valid_pairs=(), src_tokenizer=None, tgt_tokenizer=None,
                 out_dir=None, distributed=None, decoders=None, clock=None, started=None):
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        if not train_pairs:
            raise ValueError("train_pairs is empty: nothing to train on")
        self.config = config
        self.device = resolve_device(config.device)
        self.context = distributed or setup_distributed(self.device.type)
        if self.context.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", self.context.local_rank)
        self.use_bf16 = bool(config.bf16) and (self.device.type == "cuda" or cpu_has_bf16())
        if config.bf16 and not self.use_bf16:
            warnings.warn("bf16=True needs CUDA or a CPU with native bfloat16 (AVX512-BF16 or AMX); this one "
                          "would emulate it, slower than float32: ignored", stacklevel=2)
        use_compile = self._cuda_only_switch("compile", config.compile)
        self.out_dir = out_dir
        clock = clock or time.monotonic
        # The budget starts before the tokenizers are trained: they are part of the run.
        budget = TimeBudget(config.time_budget, clock, started) if config.time_budget else None
        self.translate_options = decoders(self.device) if decoders is not None else {}  # of every translate() call
        self.stop_reason = None
        self.clock, self._clock_start = clock, clock() if started is None else started
        self.epoch_log = []  # one row per evaluated epoch: epoch, step, minutes (wall), train and valid loss, BLEU
        self._epoch_loss = [0.0, 0]
        if config.threads is not None:  # checked by TrainConfig, like every field
            torch.set_num_threads(config.threads)
        self._seed(config.seed)

        if config.model.share_embeddings and src_tokenizer is None and tgt_tokenizer is None:
            # One vocabulary for both languages (section 5.1), so that the embeddings can be tied.
            src_tokenizer = tgt_tokenizer = build_tokenizer(
                [text for pair in train_pairs for text in pair], config.tokenizer, config.bpe_vocab_size)
        if src_tokenizer is None:
            src_tokenizer = build_tokenizer((s for s, _ in train_pairs), config.tokenizer, config.bpe_vocab_size)
        if tgt_tokenizer is None:
            tgt_tokenizer = build_tokenizer((t for _, t in train_pairs), config.tokenizer, config.bpe_vocab_size)
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        # max_len - 1: one position goes to <sos> / <eos>.
        limit = min(config.max_tokens, config.model.max_len - 1)
        self.train_data = TranslationDataset(train_pairs, src_tokenizer, tgt_tokenizer, max_len=limit)
        self.valid_data = TranslationDataset(valid_pairs, src_tokenizer, tgt_tokenizer, max_len=limit)
        if len(self.train_data) == 0:
            raise ValueError(f"no training pair fits max_tokens = {limit}")
        self.sampler = BucketBatchSampler(
            self.train_data.lengths(), config.batch_size, shuffle=True, seed=config.seed,
            bucket_size=config.bucket_size, num_replicas=self.context.world_size, rank=self.context.rank,
        )
        self.plan = RunPlan(config, len(self.sampler), budget, log=self.log)
        self.evaluator = Evaluator(config, src_tokenizer, tgt_tokenizer, self.device, self._forward_loss,
                                   self.translate_options, log=self.log, clock=clock)
        self.checkpointer = Checkpointer(out_dir, is_main=self.context.is_main)

        # config.model.attention chooses the attention class (default "fused": SDPA with packed projections)
        self.model = config.model.build(len(src_tokenizer), len(tgt_tokenizer)).to(self.device)
        self.train_model = self.model
        if self.context.enabled:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.model, device_ids=device_ids)
        if use_compile:
            self.train_model = torch.compile(self.train_model)
        # fused only on CUDA. On the CPU the fused kernel made the Adam step itself 2.9 times faster, but a
        # whole step only 1.28x at the median with quartiles 0.97-1.87 (README, "The levers"), and its
        # rounding differs from the loop's: the CLI test's model, which must learn 12 pairs by heart in 600
        # steps, then stopped at 8-10 of 12. Not worth a different model for a gain the noise hides.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9,
                                          fused=self.device.type == "cuda")
        # LambdaLR counts from 0; the schedules count steps from 1.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer,
                                                           lambda index: self.plan.learning_rate(index + 1))
        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.elapsed = 0.0
        self.data_identity = None
        self.tokens_seen = 0  # source + target tokens of the training steps of this process's run
        self.history = {
            "train": {"step": [], "loss": [], "lr": [], "time": []},
            "valid": {"step": [], "epoch": [], "loss": [], "accuracy": [], "exact_match": [], "bleu": [], "time": []},
        }


    def _cuda_only_switch(self, name, value):
        if value and self.device.type != "cuda":
            warnings.warn(f"{name}=True applies on CUDA only; ignored on {self.device.type}", stacklevel=3)
            return False
        return bool(value)

    @staticmethod
    def _seed(seed):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    def log(self, message):
        """Log ``message`` (the main process only; nothing when ``config.quiet``)."""
        if self.context.is_main and not self.config.quiet:
            logger.info(message)


    def _forward_loss(self, model, batch, smoothing):
        """Summed loss, number of target tokens and number of correct arg-max predictions."""
        src_mask = padding_mask(batch.src, PAD_ID)  # (B, 1, 1, S)
        tgt_mask = decoder_mask(batch.tgt_in, PAD_ID)  # (B, 1, T, T)
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            logits = model(batch.src, batch.tgt_in, src_mask, tgt_mask)  # (B, T, V)
        vocab_size = logits.size(-1)
        loss_sum = F.cross_entropy(
            logits.float().reshape(-1, vocab_size), batch.labels.reshape(-1),  # (B*T, V), (B*T,)
            ignore_index=PAD_ID, label_smoothing=smoothing, reduction="sum",
        )
        keep = batch.labels != PAD_ID  # (B, T)
        correct = ((logits.argmax(dim=-1) == batch.labels) & keep).sum()
        return loss_sum, keep.sum(), correct

    def train_step(self, batch):
        """One optimizer step on a (local share of a) batch; returns the global mean loss per token."""
        self.train_model.train()
        batch = batch.to(self.device)
        loss_sum, tokens, _ = self._forward_loss(self.train_model, batch, self.config.label_smoothing)
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

    # -- the loop -------------------------------------------------------------------------------
    def train(self, epochs=None, max_steps=None, callback=None):
        """Train until ``epochs`` epochs (total, counted from 0) or ``max_steps`` steps are done.

        On a terminal a tqdm bar shows the epoch's progress. Off a terminal (a log
        file, a batch job) a line goes to the log instead, every
        ``config.progress_seconds`` seconds or ``config.progress_steps`` steps::

            step 120/900 epoch 1/3 loss 3.214 lr 4.10e-04 5230 tok/s elapsed 1m02s ETA 6m45s

        (tokens per second: source and target tokens without padding, over the time
        spent in the training steps since the previous line; the ETA extrapolates the
        run so far, evaluations included; with a time budget, ``left`` is the budget
        left). ``quiet`` turns both off.

        With ``config.time_budget`` the run plans itself: after a few steps it measures
        the seconds per step and plans the last step the budget allows
        (:meth:`TimeBudget.plan`), keeping time for an evaluation at every epoch end
        and for the end of the run (an evaluation of the averaged weights and the
        beam decoding of :attr:`final_sentences` sentences); the "linear" schedule
        decays to that step. Every quarter epoch and at every epoch end the plan is
        made again with the measured step and evaluation times. The loop stops at the planned step or
        when the budget left is only the reserve; :attr:`stop_reason` says why.

        Args:
            epochs: defaults to ``config.epochs``.
            max_steps: defaults to ``config.max_steps`` (``None`` = no limit).
            callback: called as ``callback(trainer)`` after every step (e.g. to record a curve).

        Returns:
            :attr:`history`.
        """
        epochs = self.config.epochs if epochs is None else epochs
        max_steps = self.config.max_steps if max_steps is None else max_steps
        show_bar = self.context.is_main and not self.config.quiet and sys.stderr.isatty()
        log_progress = self.context.is_main and not self.config.quiet and not show_bar
        planned = self.step + max(0, (epochs - self.epoch) * len(self.sampler) - self.batch_in_epoch)
        if max_steps is not None:
            planned = min(planned, max(max_steps, self.step))
        self._progress = ProgressLine(self.log, self.config.progress_seconds, self.config.progress_steps,
                                      self.step, self.tokens_seen, planned, epochs)
        budget = self.plan.budget
        measure_from = self.step + 3  # the first steps are slower (allocation); time the ones after
        recent = collections.deque(maxlen=200)  # seconds of the last timed steps
        self.stop_reason = self.plan.stop_reason = None
        while self.epoch < epochs and (max_steps is None or self.step < max_steps):
            self.sampler.set_epoch(self.epoch)
            batches = list(self.sampler)
            bar = tqdm(total=len(batches), initial=self.batch_in_epoch, desc=f"epoch {self.epoch + 1}/{epochs}",
                       disable=not show_bar, leave=False, dynamic_ncols=True)
            start = time.perf_counter()
            for indices in batches[self.batch_in_epoch:]:
                if max_steps is not None and self.step >= max_steps:
                    break
                if budget is not None and self.plan.exhausted(self.step, self._progress.first_step):
                    break
                step_start, clock_start = time.perf_counter(), self.clock()
                batch = collate_batch([self.train_data[i] for i in indices])
                loss = self.train_step(batch)
                self._epoch_loss[0] += loss
                self._epoch_loss[1] += 1
                self._progress.busy(time.perf_counter() - step_start)
                seconds = self.clock() - clock_start
                if self.step > measure_from:
                    # The mean of the last steps: on a GPU the first hundred or so (new shapes, allocator
                    # growth) are several times slower than the rest, and would shrink every later plan.
                    recent.append(seconds)
                    self.plan.seconds["step"] = sum(recent) / len(recent)
                self.batch_in_epoch += 1
                if budget is not None and self.step >= measure_from + 20 and (
                        self.plan.planned_steps is None or self.step % max(20, len(batches) // 4) == 0):
                    self._replan()  # first after 20 timed steps, then every quarter epoch (the load may change)
                lr = self.scheduler.get_last_lr()[0]
                if self.step % self.config.log_every == 0 or self.step == 1:
                    history = self.history["train"]
                    history["step"].append(self.step)
                    history["loss"].append(loss)
                    history["lr"].append(lr)
                    history["time"].append(self.elapsed + time.perf_counter() - start)
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}")
                bar.update(1)
                if log_progress:
                    self._progress.update(self.step, self.epoch, loss, lr, self.tokens_seen, budget)
                if callback is not None:
                    self.elapsed += time.perf_counter() - start
                    start = time.perf_counter()
                    callback(self)
            bar.close()
            self.elapsed += time.perf_counter() - start
            if self.batch_in_epoch < len(batches):
                break  # stopped inside the epoch (max_steps or the budget)
            self.epoch += 1
            self.batch_in_epoch = 0
            if self.plan.no_time_to_evaluate():
                break  # no time for this epoch's evaluation: finish() evaluates
            self._end_of_epoch(epochs)
            if budget is not None and self.plan.exhausted(self.step, self._progress.first_step):
                break
        self.stop_reason = self.plan.stop_reason
        if self.stop_reason is None and max_steps is not None and self.step >= max_steps:
            self.stop_reason = "max_steps"
        if self.stop_reason is None:
            self.stop_reason = "epochs"
        if self.out_dir is not None:
            self.save_checkpoint(self.checkpointer.path("checkpoint.pt"))
        return self.history

    def _replan(self):
        self._progress.planned = self.plan.replan(self.step)

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
                # every epoch: an untrained model's translations run to the length limit
                beam = self.evaluator.time_beam(self.model, [s for s, _ in self.valid_data.pairs[:12]])
                self.plan.seconds["beam_sentence"] = beam if beam is not None else self.plan.seconds["beam_sentence"]
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
            history = self.history["valid"]
            for name, value in (("step", self.step), ("epoch", self.epoch), ("time", self.elapsed), *metrics.items()):
                history[name].append(value)
        return metrics

    def record_epoch(self, metrics):
        """Append a row to :attr:`epoch_log` (wall minutes since the run began, mean training loss)."""
        total, count = self._epoch_loss
        wall = self.plan.budget.elapsed() if self.plan.budget is not None else self.clock() - self._clock_start
        self.epoch_log.append({"epoch": self.epoch, "step": self.step, "minutes": round(wall / 60, 2),
                               "train_loss": round(total / count, 4) if count else None,
                               "valid_loss": round(metrics["loss"], 4), "valid_bleu": round(metrics["bleu"], 2)})
        self._epoch_loss = [0.0, 0]

    def keep_best(self, bleu, model_state=None):
        """A new best validation BLEU is kept, with ``best.pt`` written (of ``model_state``, default the model's)."""
        if not self.checkpointer.improves(bleu):
            return False
        if self.out_dir is not None:  # saved after best_bleu is updated, so that best.pt records its own score
            self.save_best(self.checkpointer.path("best.pt"), model_state=model_state)
        return True

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
                        started=None, other_data=False, **changes):
        """A trainer that continues the run saved at ``path``: same config, same vocabularies.

        Args:
            path: the checkpoint.
            train_pairs, valid_pairs: the data (the same as the saved run's for an exact resume).
            out_dir, distributed, decoders, started: as for the constructor.
            other_data: the data are not the saved run's (``--allow-other-data``): the stored
                best validation BLEU is forgotten (BLEU on another validation set is not comparable).
            changes: config fields to change (:func:`~solutions.app.checkpoint.resume_point`).
        """
        state, config, src_tokenizer, tgt_tokenizer = resume_point(path, **changes)
        trainer = cls(config, train_pairs, valid_pairs, src_tokenizer=src_tokenizer, tgt_tokenizer=tgt_tokenizer,
                      out_dir=out_dir, distributed=distributed, decoders=decoders, started=started)
        trainer.load_state_dict(state)
        if other_data:
            trainer.checkpointer.best_bleu = None
        return trainer

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
        translated greedily and the test pairs with the run's decoding
        (:meth:`final_beam_size`); with an ``out_dir`` the main process writes
        ``history.json``, ``results.json`` and ``test_translations.jsonl`` (each test
        sentence's source, reference, greedy and final translation) there (the README's
        "Train on your own corpus"; :func:`~solutions.app.summary.end_of_run`). Only the
        main process of a distributed run decodes and writes.

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
        return end_of_run(self, self.finish(), test_pairs, load, command=command, preset=preset,
                          skipped_lines=skipped_lines)

    def wall_seconds(self):
        """Seconds since the run began (since ``started`` when given: reading the data counts)."""
        return self.clock() - self._clock_start
