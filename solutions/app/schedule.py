"""The schedule and the time budget: the learning rate of every step, and how many steps fit.

Two schedules (``TrainConfig.schedule``): ``"noam"``, the paper's warm-up then
``1/sqrt(step)`` (:func:`~solutions.training.noam_lr`, section 5.3), and ``"linear"``
(:func:`warmup_linear_decay`), a warm-up then a linear decay to the run's last planned
step. With ``TrainConfig.time_budget`` a run plans itself: :class:`TimeBudget` turns
the measured seconds per step and per evaluation into the last step that fits, and
:class:`RunPlan`, the :class:`~solutions.app.trainer.Trainer`'s schedule, keeps the
measured times, reserves time for the end of the run, re-plans and says when to stop.
"""
import collections
import time

import torch

from ..training import noam_lr

__all__ = ["warmup_linear_decay", "paper_adam", "TimeBudget", "format_duration", "RunPlan"]


def warmup_linear_decay(step, total_steps, warmup_steps, peak, floor=0.02):
    """The learning rate of a planned run: linear warm-up to ``peak``, then linear decay.

    ``peak * step / warmup`` for ``step <= warmup``; afterwards it falls linearly to
    ``floor * peak`` at ``total_steps`` and stays there (a run planned too short does
    not stop learning altogether).

    Args:
        step: the optimizer step, counted from 1.
        total_steps: the last planned step.
        warmup_steps: steps of warm-up (at least 1).
        peak: the highest learning rate.
        floor: the final rate as a fraction of ``peak``.

    Returns:
        The learning rate (a float).
    """
    warmup_steps = max(1, warmup_steps)
    if step <= warmup_steps:
        return peak * step / warmup_steps
    remaining = max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return peak * (floor + (1 - floor) * remaining)


def paper_adam(parameters, device):
    """Adam as section 5.3 sets it: ``β1 = 0.9``, ``β2 = 0.98``, ``ε = 1e-9``, with ``lr = 1`` for a
    schedule to multiply (:meth:`RunPlan.scheduler`).

    PyTorch's fused kernel runs on CUDA only. On the CPU it made the Adam step itself 2.9 times
    faster, but a whole step only 1.28x at the median with quartiles 0.97-1.87 (README, "The
    levers"), and its rounding differs from the loop's: the CLI test's model, which must learn 12
    pairs by heart in 600 steps, then stopped at 8-10 of 12. Not worth a different model for a
    gain the noise hides.

    Args:
        parameters: the model's parameters.
        device: the ``torch.device`` they are on.
    """
    return torch.optim.Adam(parameters, lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=device.type == "cuda")


class TimeBudget:
    """A wall-clock budget for a whole run, and the plan of how many steps fit in it.

    Args:
        seconds: the budget.
        clock: a function returning seconds (default ``time.monotonic``; tests inject one).
        start: the clock's value when the run began (default: now), so that work done
            before the trainer exists (reading data, training the tokenizer) counts.
        used: seconds already spent by the run before (a resumed run).
    """

    def __init__(self, seconds, clock=time.monotonic, start=None, used=0.0):
        if not seconds or seconds <= 0:
            raise ValueError(f"a time budget must be a positive number of seconds, got {seconds!r}")
        self.seconds, self.clock, self.used = float(seconds), clock, float(used)
        self.start = clock() if start is None else start

    def elapsed(self):
        """Seconds of the budget spent so far (this process and, on resume, the run before)."""
        return self.used + self.clock() - self.start

    def left(self):
        """Seconds left (negative once the budget is overspent)."""
        return self.seconds - self.elapsed()

    def plan(self, step, seconds_per_step, steps_per_epoch, seconds_per_eval, reserve):
        """The last step the budget allows, counting an evaluation at every epoch end.

        Training ``n`` more steps costs ``n * seconds_per_step`` plus about
        ``n / steps_per_epoch`` evaluations; ``reserve`` seconds are kept for what
        comes after training (the final evaluation and test decoding).

        Args:
            step: the steps done so far.
            seconds_per_step: measured time of one training step.
            steps_per_epoch: batches in an epoch.
            seconds_per_eval: measured (or estimated) time of one end-of-epoch evaluation.
            reserve: seconds to keep for the end of the run.

        Returns:
            The planned total number of steps (at least ``step + 1``).
        """
        if seconds_per_step <= 0 or steps_per_epoch < 1:
            raise ValueError(f"expected seconds_per_step > 0 and steps_per_epoch >= 1, got "
                             f"{seconds_per_step} and {steps_per_epoch}")
        available = self.left() - reserve
        per_step = seconds_per_step + max(0.0, seconds_per_eval) / steps_per_epoch
        return step + max(1, int(available / per_step))


def format_duration(seconds):
    """``75`` → ``"1m15s"``, ``3725`` → ``"1h02m"``: a short, log-friendly duration."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class RunPlan:
    """The schedule and the time budget of one run: each step's learning rate, the steps that fit, when to stop.

    The :class:`~solutions.app.trainer.Trainer` reports every step's time
    (:meth:`begin`, :meth:`time_step`) and records the other times it measures in
    :attr:`seconds`, and asks :meth:`learning_rate`, :meth:`replan`, :meth:`exhausted` and
    :meth:`final_beam_size`; a checkpoint keeps :meth:`state_dict`.

    Args:
        config: the run's :class:`~solutions.app.config.TrainConfig` (its schedule, warm-up,
            epochs, ``max_steps``, ``average_last``, ``eval_sentences``, ``beam_size``); the
            trainer sets :attr:`config` again when it changes the epochs.
        steps_per_epoch: batches in an epoch (this process's share).
        budget: a :class:`TimeBudget`, or ``None`` (no budget: the epochs decide).
        log: a function of one message (default: none).

    Attributes:
        planned_steps: the last step the budget allows (``None`` until planned); the
            ``"linear"`` schedule decays to it.
        final_sentences: sentences the end of the run decodes with the beam (time is kept for them).
        tune_sentences: validation sentences the end of the run decodes with the beam to tune the length
            penalty (:func:`~solutions.app.tuning.tune_decoding`; time is kept for them too).
        seconds: measured times, ``{"step", "eval", "beam_sentence"}`` (``None`` until measured).
        beam_length_ratio: the references' length over the timed beam translations' (1 until measured):
            the reserve keeps the beam's time at the references' length, what a trained model writes.
        stop_reason: why :meth:`exhausted` said stop (``"planned steps done"``, ``"budget"``).
    """

    def __init__(self, config, steps_per_epoch, budget=None, log=None):
        self.config, self.steps_per_epoch, self.budget = config, max(1, steps_per_epoch), budget
        self.log = log or (lambda message: None)
        self.planned_steps = None
        self.final_sentences = self.tune_sentences = 0
        self.seconds = {"step": None, "eval": None, "beam_sentence": None}
        self.beam_length_ratio = 1.0
        self.stop_reason = None
        self._timed_after, self._recent = 0, collections.deque(maxlen=200)

    def begin(self, step):
        """A call of the training loop starts after step ``step``: its first three steps go untimed
        (allocation makes them slower)."""
        self._timed_after, self._recent = step + 3, collections.deque(maxlen=200)
        self.stop_reason = None

    def time_step(self, step, seconds, batches):
        """Record that step ``step`` took ``seconds``; True when the plan is due to be made again.

        ``seconds["step"]`` is the mean of the last 200 timed steps: on a GPU the first hundred
        or so (new shapes, allocator growth) are several times slower than the rest, and would
        shrink every later plan. With a budget the plan is made after 20 timed steps, then
        every quarter epoch of ``batches`` steps (the machine's load may change).
        """
        if step > self._timed_after:
            self._recent.append(seconds)
            self.seconds["step"] = sum(self._recent) / len(self._recent)
        return self.budget is not None and step >= self._timed_after + 20 and (
            self.planned_steps is None or step % max(20, batches // 4) == 0)

    def learning_rate(self, step):
        """The learning rate of step ``step`` (from 1) under ``config.schedule``."""
        config = self.config
        if config.schedule == "noam":
            return noam_lr(step, config.model.d_model, config.warmup_steps, config.lr_factor)
        total = self.planned_steps or config.max_steps or config.epochs * self.steps_per_epoch
        # Warm-up: at most a tenth of the planned run.
        return warmup_linear_decay(step, total, min(config.warmup_steps, max(1, total // 10)), config.lr_peak)

    def scheduler(self, optimizer):
        """A ``LambdaLR`` that sets ``optimizer``'s learning rate to :meth:`learning_rate` at every step
        (``LambdaLR`` counts from 0, the schedules from 1)."""
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda index: self.learning_rate(index + 1))

    def reserve(self):
        """Seconds kept for the end of the run: evaluating averaged weights, beam decoding, saving.

        Before anything is measured: a tenth of the budget. Afterwards: one evaluation
        (two with averaging), the beam's measured time per sentence at the references' length
        (times :attr:`beam_length_ratio`: early in training the translations run longer or
        shorter than the final model's, and their time with them) for :attr:`final_sentences`
        and :attr:`tune_sentences` sentences, the greedy decoding of the final ones (an evaluation
        per ``eval_sentences`` sentences: an over-estimate, the evaluation also computes the loss),
        30 % margin and 20 seconds for saving files.
        """
        evaluation, beam = self.seconds["eval"], self.seconds["beam_sentence"]
        if evaluation is None:
            return 0.1 * self.budget.seconds
        evaluations = 1 + (self.config.average_last > 1)
        greedy = evaluation * self.final_sentences / max(1, self.config.eval_sentences)
        # With a beam, the test set is decoded twice: with the beam, and greedily for the translations file.
        decoding = greedy if beam is None else \
            beam * self.beam_length_ratio * (self.final_sentences + self.tune_sentences) + greedy
        return 1.3 * (evaluations * evaluation + decoding) + 20.0

    def replan(self, step):
        """(Re-)plan the last step of the budget from the measured times; returns :attr:`planned_steps`."""
        evaluation = self.seconds["eval"]
        if evaluation is None:  # before the first evaluation: about 3 % of an epoch's training time
            evaluation = 0.03 * self.seconds["step"] * self.steps_per_epoch
        planned = self.budget.plan(step, self.seconds["step"], self.steps_per_epoch, evaluation, self.reserve())
        if self.config.max_steps is not None:  # the linear schedule decays to the step the run will stop at
            planned = min(planned, max(self.config.max_steps, step))
        first = self.planned_steps is None
        self.planned_steps = planned
        if first:
            self.log(f"time budget {format_duration(self.budget.seconds)}: {self.seconds['step']:.3f} s/step, "
                     f"{format_duration(self.budget.left())} left, planned {planned} steps "
                     f"(about {planned / self.steps_per_epoch:.1f} epochs)")
        return planned

    def exhausted(self, step, first_step):
        """True (and :attr:`stop_reason` set) when the planned step is reached or only the reserve is left.

        ``first_step`` is the step this process's run began at: at least one step is done
        per run, so the checkpoint it leaves is a trained model.
        """
        if self.planned_steps is not None and step >= self.planned_steps:
            self.stop_reason = "planned steps done"
            return True
        if step == first_step:
            return False
        if self.budget.left() < self.reserve() + (self.seconds["step"] or 0.0):
            self.stop_reason = "budget"
            return True
        return False

    def no_time_to_evaluate(self):
        """True (and :attr:`stop_reason` = ``"budget"``) when an epoch end's evaluation no longer fits."""
        if self.budget is None or self.seconds["eval"] is None or \
                self.budget.left() >= self.seconds["eval"] + self.reserve():
            return False
        self.stop_reason = "budget"
        return True

    def final_beam_size(self):
        """The beam size the end of the run can afford: ``config.beam_size``, or 1 (greedy) when a time
        budget is left too short for beam search over :attr:`final_sentences` sentences (or beam
        search was never timed, as when the budget ran out in the first epoch)."""
        beam = self.config.beam_size
        if beam == 1 or self.budget is None or not self.final_sentences:
            return beam
        per_sentence = self.seconds["beam_sentence"]
        if per_sentence is not None and self.budget.left() >= 1.1 * per_sentence * self.final_sentences:
            return beam
        self.log(f"time budget: {format_duration(self.budget.left())} left, not enough for beam search over "
                 f"{self.final_sentences} sentences; the final translations are greedy")
        return 1

    def can_tune(self):
        """Whether the budget left holds the tuning's beam search over :attr:`tune_sentences` validation
        sentences and then the test's over :attr:`final_sentences` (always, without a budget); logs when not."""
        if self.budget is None or not self.tune_sentences:
            return bool(self.tune_sentences)
        per_sentence = self.seconds["beam_sentence"]
        needed = None if per_sentence is None else 1.1 * per_sentence * (self.tune_sentences + self.final_sentences)
        if needed is not None and self.budget.left() >= needed:
            return True
        self.log(f"time budget: {format_duration(self.budget.left())} left, not enough to tune the length penalty "
                 f"on {self.tune_sentences} validation sentences; the test set is decoded with the fixed "
                 f"length penalty {self.config.length_penalty:g}")
        return False

    def state_dict(self):
        """What a checkpoint keeps of the plan: ``{"planned_steps", "budget_used"}``."""
        return {"planned_steps": self.planned_steps,
                "budget_used": self.budget.elapsed() if self.budget is not None else None}

    def load_state_dict(self, state):
        """Restore :meth:`state_dict`'s fields (missing ones, from older checkpoints, stay as they are)."""
        self.planned_steps = state.get("planned_steps")
        if self.budget is not None and state.get("budget_used"):
            self.budget.used = state["budget_used"]  # the budget is the whole run's, interruptions aside
