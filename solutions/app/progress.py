"""What a training run shows of its progress: a bar on a terminal, a line in a log.

On a terminal a tqdm bar shows each epoch's progress; off a terminal (a log file, a batch
job) :class:`ProgressLine` writes a line with the speed and the ETA every few seconds or
steps; ``TrainConfig.quiet`` turns both off, and only the main process of a distributed run
shows either. :class:`TrainingProgress` chooses between them for the
:class:`~solutions.app.trainer.Trainer`.
"""
import sys
import time

from tqdm.auto import tqdm

from .schedule import format_duration

__all__ = ["ProgressLine", "TrainingProgress"]


class TrainingProgress:
    """The progress of one call of the training loop: a tqdm bar per epoch on a terminal, else a :class:`ProgressLine`.

    Args:
        log: a function of one message.
        config: the run's :class:`~solutions.app.config.TrainConfig` (``quiet``,
            ``progress_seconds``, ``progress_steps``).
        show: whether this process shows progress at all (the main process).
        step, tokens, planned, epochs: as for :class:`ProgressLine`.

    Attributes:
        line: the :class:`ProgressLine` (it also counts the seconds spent in training steps).
    """

    def __init__(self, log, config, show, step, tokens, planned, epochs):
        show = show and not config.quiet
        self.bar_shown = show and sys.stderr.isatty()
        self.line_shown = show and not self.bar_shown
        self.line = ProgressLine(log, config.progress_seconds, config.progress_steps, step, tokens, planned, epochs)
        self.bar = None

    def start_epoch(self, epoch, batches, done):
        """An epoch of ``batches`` batches begins, ``done`` of them already trained (a resumed run)."""
        self.bar = tqdm(total=batches, initial=done, desc=f"epoch {epoch + 1}/{self.line.epochs}",
                        disable=not self.bar_shown, leave=False, dynamic_ncols=True)

    def update(self, step, epoch, loss, lr, tokens, budget=None):
        """After step ``step``: the bar moves on, or the line is logged when it is due."""
        self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}")
        self.bar.update(1)
        if self.line_shown:
            self.line.update(step, epoch, loss, lr, tokens, budget)

    def end_epoch(self):
        """The epoch's bar goes."""
        self.bar.close()


class ProgressLine:
    """The progress line off a terminal, every ``seconds`` seconds or ``steps`` steps::

        step 120/900 epoch 1/3 loss 3.214 lr 4.10e-04 5230 tok/s elapsed 1m02s ETA 6m45s

    Tokens per second: source and target tokens without padding, over the time spent in
    the training steps (:meth:`busy`) since the previous line; the ETA extrapolates the run
    so far, evaluations included; with a budget, ``left`` is the budget left.

    Args:
        log: a function of one message.
        seconds, steps: ``config.progress_seconds`` and ``config.progress_steps`` (``None`` = never by that measure).
        step, tokens: the step and the tokens seen when the run (this call of ``train``) began.
        planned: the last step expected (the trainer updates :attr:`planned` when it re-plans).
        epochs: the run's epochs.
    """

    def __init__(self, log, seconds, steps, step, tokens, planned, epochs):
        self.log, self.every_seconds, self.every_steps = log, seconds, steps
        self.planned, self.epochs, self.first_step = planned, epochs, step
        self.start = self.last_time = time.perf_counter()
        self.last_step, self.last_tokens, self.busy_seconds = step, tokens, 0.0

    def busy(self, seconds):
        """Count ``seconds`` spent in a training step."""
        self.busy_seconds += seconds

    def update(self, step, epoch, loss, lr, tokens, budget=None):
        """Log the line when ``seconds`` or ``steps`` have passed since the last one."""
        now = time.perf_counter()
        due_by_time = self.every_seconds is not None and now - self.last_time >= self.every_seconds
        due_by_steps = self.every_steps is not None and step - self.last_step >= self.every_steps
        if not (due_by_time or due_by_steps):
            return
        tokens_per_s = (tokens - self.last_tokens) / max(self.busy_seconds, 1e-9)
        elapsed = now - self.start
        done = step - self.first_step
        remaining = max(0, self.planned - step)
        eta = format_duration(elapsed / done * remaining) if done else "?"
        left = f" left {format_duration(budget.left())}" if budget is not None else ""
        self.log(f"step {step}/{self.planned} epoch {epoch + 1}/{self.epochs} loss {loss:.3f} "
                 f"lr {lr:.2e} {tokens_per_s:.0f} tok/s elapsed {format_duration(elapsed)} ETA {eta}{left}")
        self.last_time, self.last_step, self.last_tokens, self.busy_seconds = now, step, tokens, 0.0
