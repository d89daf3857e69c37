"""The record of a training run: its curves, and one row per evaluated epoch.

:class:`RunHistory` is what a :class:`~solutions.app.trainer.Trainer` writes down while it
trains: the training loss and learning rate every ``log_every`` steps, the validation
metrics of every evaluation (chapter 9 plots both), and a row per evaluated epoch with the
mean training loss of its steps (``results.json``'s ``epochs``). Checkpoints store both
containers, ``history.json`` the curves.
"""
__all__ = ["RunHistory"]


class RunHistory:
    """The curves and the epoch rows of one run.

    Args:
        log_every: a training step's loss and learning rate become a point of the curve
            every ``log_every`` steps (and at step 1).

    Attributes:
        curves: ``{"train": {"step", "loss", "lr", "time"}, "valid": {"step", "epoch", "loss",
            "accuracy", "exact_match", "bleu", "time"}}``, lists (the trainer's ``history``).
        epochs: one row per evaluated epoch, ``{"epoch", "step", "minutes", "train_loss",
            "valid_loss", "valid_bleu"}`` (minutes of wall time since the run began; the mean
            training loss of the steps since the previous row; the trainer's ``epoch_log``).
    """

    def __init__(self, log_every=1):
        self.log_every = log_every
        self.curves = {
            "train": {"step": [], "loss": [], "lr": [], "time": []},
            "valid": {"step": [], "epoch": [], "loss": [], "accuracy": [], "exact_match": [], "bleu": [], "time": []},
        }
        self.epochs = []
        self._loss_sum, self._loss_steps = 0.0, 0  # the training steps since the last epoch row

    def add_step(self, step, loss, lr, seconds):
        """Record training step ``step``: its mean loss per token, learning rate and training seconds so far."""
        self._loss_sum += loss
        self._loss_steps += 1
        if step % self.log_every == 0 or step == 1:
            curve = self.curves["train"]
            for name, value in (("step", step), ("loss", loss), ("lr", lr), ("time", seconds)):
                curve[name].append(value)

    def add_evaluation(self, step, epoch, seconds, metrics):
        """Record the validation ``metrics`` (``loss``, ``accuracy``, ``exact_match``, ``bleu``) at ``step``."""
        curve = self.curves["valid"]
        for name, value in (("step", step), ("epoch", epoch), ("time", seconds), *metrics.items()):
            curve[name].append(value)

    def last_evaluated_step(self):
        """The step of the last validation (``None`` before the first)."""
        steps = self.curves["valid"]["step"]
        return steps[-1] if steps else None

    def end_epoch(self, epoch, step, wall_seconds, metrics):
        """Append and return the row of an evaluated epoch; the mean training loss starts again."""
        row = {"epoch": epoch, "step": step, "minutes": round(wall_seconds / 60, 2),
               "train_loss": round(self._loss_sum / self._loss_steps, 4) if self._loss_steps else None,
               "valid_loss": round(metrics["loss"], 4), "valid_bleu": round(metrics["bleu"], 2)}
        self.epochs.append(row)
        self._loss_sum, self._loss_steps = 0.0, 0
        return row

    def load(self, curves, epochs=None):
        """Continue a checkpoint's record: its ``history`` and ``epoch_log`` (missing in older ones)."""
        self.curves = curves
        self.epochs = list(epochs or [])
