"""The schedule and the time budget: the learning rate of every step, and how many steps fit.

Two schedules (``TrainConfig.schedule``): ``"noam"``, the paper's warm-up then
``1/sqrt(step)`` (:func:`~solutions.training.noam_lr`, section 5.3), and ``"linear"``
(:func:`warmup_linear_decay`), a warm-up then a linear decay to the run's last planned
step. With ``TrainConfig.time_budget`` a run plans itself: :class:`TimeBudget` turns
the measured seconds per step and per evaluation into the last step that fits, and
:class:`BudgetMixin` is the :class:`~solutions.app.trainer.Trainer`'s part that
measures, reserves time for the end of the run, re-plans, says when to stop and logs
the progress line with its ETA.
"""
import time

from ..training import noam_lr
from ..translation import translate

__all__ = ["warmup_linear_decay", "TimeBudget", "format_duration", "BudgetMixin"]


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


class BudgetMixin:
    """The :class:`~solutions.app.trainer.Trainer`'s schedule, time budget and progress line.

    Reads the trainer's ``config``, ``budget`` (a :class:`TimeBudget` or ``None``),
    ``sampler`` (steps per epoch), ``step`` and its measured times ``_timing``
    (``{"step", "eval", "beam_sentence"}`` seconds); sets ``planned_steps`` and
    :attr:`~solutions.app.trainer.Trainer.stop_reason`. The progress line off a terminal
    (step of the planned steps, loss, tokens per second, ETA, budget left) reads the
    loop's ``_progress`` counters.
    """

    def _learning_rate(self, step):
        """The learning rate of step ``step`` (from 1) under ``config.schedule``."""
        config = self.config
        if config.schedule == "noam":
            return noam_lr(step, config.model.d_model, config.warmup_steps, config.lr_factor)
        total = self.planned_steps or config.max_steps or config.epochs * max(1, len(self.sampler))
        # Warm-up: at most a tenth of the planned run.
        return warmup_linear_decay(step, total, min(config.warmup_steps, max(1, total // 10)), config.lr_peak)

    def _measure_beam(self, sentences=12):
        """Time the final decoding's beam search on a few validation sentences (seconds per sentence).

        Measured again at every epoch end: the translations of an undertrained model run to the
        length limit, so the first measurement overstates what the final decoding will cost.
        """
        chosen = [s for s, _ in self.valid_data.pairs[:sentences]]
        if not chosen:
            return
        start = self.clock()
        translate(self.model, chosen, self.src_tokenizer, self.tgt_tokenizer, beam_size=self.config.beam_size,
                  length_penalty=self.config.length_penalty, device=self.device, **self.translate_options)
        self._timing["beam_sentence"] = (self.clock() - start) / len(chosen)

    def _reserve(self):
        """Seconds kept for the end of the run: evaluating averaged weights, beam decoding, saving.

        Before anything is measured: a tenth of the budget. Afterwards: one evaluation
        (two with averaging), the measured beam time of :attr:`final_sentences` sentences
        and their greedy decoding (an evaluation per ``eval_sentences`` sentences: an
        over-estimate, the evaluation also computes the loss), 30 % margin and 20 seconds
        for saving files.
        """
        evaluation, beam = self._timing["eval"], self._timing["beam_sentence"]
        if evaluation is None:
            return 0.1 * self.budget.seconds
        evaluations = 1 + (self.config.average_last > 1)
        greedy = evaluation * self.final_sentences / max(1, self.config.eval_sentences)
        # With a beam, the test set is decoded twice: with the beam, and greedily for the translations file.
        decoding = beam * self.final_sentences + greedy if beam is not None else greedy
        return 1.3 * (evaluations * evaluation + decoding) + 20.0

    def _plan(self):
        """(Re-)plan the last step of the budget from the measured times."""
        evaluation = self._timing["eval"]
        if evaluation is None:  # before the first evaluation: about 3 % of an epoch's training time
            evaluation = 0.03 * self._timing["step"] * len(self.sampler)
        planned = self.budget.plan(self.step, self._timing["step"], len(self.sampler), evaluation, self._reserve())
        if self.config.max_steps is not None:  # the linear schedule decays to the step the run will stop at
            planned = min(planned, max(self.config.max_steps, self.step))
        first = self.planned_steps is None
        self.planned_steps = planned
        self._progress["planned"] = planned
        if first:
            self._log(f"time budget {format_duration(self.budget.seconds)}: {self._timing['step']:.3f} s/step, "
                      f"{format_duration(self.budget.left())} left, planned {planned} steps "
                      f"(about {planned / max(1, len(self.sampler)):.1f} epochs)")

    def _budget_exhausted(self):
        """True (and :attr:`stop_reason` set) when the planned step is reached or only the reserve is left."""
        if self.planned_steps is not None and self.step >= self.planned_steps:
            self.stop_reason = "planned steps done"
            return True
        if self.step == self._progress["first_step"]:
            return False  # at least one step per run: the checkpoint it leaves is a trained model
        step_time = self._timing["step"] or 0.0
        if self.budget.left() < self._reserve() + step_time:
            self.stop_reason = "budget"
            return True
        return False

    def final_beam_size(self):
        """The beam size the end of the run can afford: ``config.beam_size``, or 1 (greedy) when a time
        budget is left too short for beam search over :attr:`final_sentences` sentences (or beam
        search was never timed, as when the budget ran out in the first epoch)."""
        beam = self.config.beam_size
        if beam == 1 or self.budget is None or not self.final_sentences:
            return beam
        per_sentence = self._timing["beam_sentence"]
        if per_sentence is not None and self.budget.left() >= 1.1 * per_sentence * self.final_sentences:
            return beam
        self._log(f"time budget: {format_duration(self.budget.left())} left, not enough for beam search over "
                  f"{self.final_sentences} sentences; the final translations are greedy")
        return 1

    def _log_progress(self, loss, lr):
        """Log the progress line of :meth:`train` when ``progress_seconds`` or ``progress_steps`` have passed."""
        state, now = self._progress, time.perf_counter()
        seconds, steps = self.config.progress_seconds, self.config.progress_steps
        due_by_time = seconds is not None and now - state["last_time"] >= seconds
        due_by_steps = steps is not None and self.step - state["last_step"] >= steps
        if not (due_by_time or due_by_steps):
            return
        tokens_per_s = (self.tokens_seen - state["last_tokens"]) / max(state["busy"], 1e-9)
        elapsed = now - state["run_start"]
        done = self.step - state["first_step"]
        remaining = max(0, state["planned"] - self.step)
        eta = format_duration(elapsed / done * remaining) if done else "?"
        left = f" left {format_duration(self.budget.left())}" if self.budget is not None else ""
        self._log(f"step {self.step}/{state['planned']} epoch {self.epoch + 1}/{state['epochs']} loss {loss:.3f} "
                  f"lr {lr:.2e} {tokens_per_s:.0f} tok/s elapsed {format_duration(elapsed)} ETA {eta}{left}")
        state.update(last_time=now, last_step=self.step, last_tokens=self.tokens_seen, busy=0.0)
