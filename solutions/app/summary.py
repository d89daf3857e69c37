"""The end of a training run: the final decoding, the results files and the typed run summary.

:meth:`~solutions.app.trainer.Trainer.fit` trains, ends the training (:func:`finish_training`: the
weights left unevaluated, the average of the last epochs, the best of them loaded), tunes the
beam's length penalty on validation (:meth:`~solutions.app.trainer.Trainer.tune_length_penalty`),
decodes the validation and test sets and writes ``history.json``, ``results.json`` (schema 1, the README's "Train on your
own corpus") and ``test_translations.jsonl`` (every test sentence's greedy and beam
translation, :func:`write_translations`; results.json names it with its SHA-256) with
:func:`end_of_run`, then returns a :class:`RunSummary`, which the CLI prints as one JSON line.

Paper: section 6.1 (beam search and BLEU on the test set after training).
"""
import dataclasses
import hashlib
import json
import math
import os
import platform
import threading

import torch
from sacrebleu.metrics import BLEU

from ..model import count_parameters
from ..translation import DECODE_BATCH_SIZE, translate
from .evaluation import CorpusBLEU

__all__ = ["RunSummary", "RESULTS_SCHEMA", "TUTORIAL_METRIC", "LoadSampler", "score_translations",
           "results_document", "finish_training", "end_of_run", "write_translations", "TRANSLATIONS_FILE",
           "cpu_name"]

RESULTS_SCHEMA = 1
TRANSLATIONS_FILE = "test_translations.jsonl"

TUTORIAL_METRIC = ("sacreBLEU with lowercase=True and tokenize='13a' (mteval-v13a tokenisation of hypotheses and "
                   "references, which, like spaCy's English tokenizer, splits punctuation off words; it keeps "
                   "\"'s\" and \"n't\" attached, where spaCy splits them)")


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """What a finished run reports (the JSON line ``train`` prints, in this field order).

    Attributes:
        checkpoint: the last checkpoint (``OUT/checkpoint.pt``).
        steps, epochs: optimizer steps and epochs done.
        best: the best-validation-BLEU checkpoint (``OUT/best.pt``), or None.
        best_valid_bleu: its validation BLEU (greedy), or None.
        test: test loss, accuracy, BLEU and exact match (empty without a test set).
        bleu_signature: sacreBLEU's signature of the scores.
        stopped: why training stopped (``"epochs"``, ``"max_steps"``, ``"budget"``, ...).
        results: the ``results.json`` written, or None (no output folder).
        wall_minutes: the run's wall time, data reading and final decoding included.
        translations: the test translations file (``OUT/test_translations.jsonl``), or None.
    """

    checkpoint: str
    steps: int
    epochs: int
    best: str = None
    best_valid_bleu: float = None
    test: dict = dataclasses.field(default_factory=dict)
    bleu_signature: str = None
    stopped: str = None
    results: str = None
    wall_minutes: float = None
    translations: str = None

    def as_dict(self):
        """The fields as a dict, in order (what ``train`` prints as JSON)."""
        return dataclasses.asdict(self)


class LoadSampler:
    """The 1-minute load average (``/proc/loadavg``) every ``seconds`` in a daemon thread, for results.json."""

    def __init__(self, seconds=30.0):
        self.samples, self._stop = [], threading.Event()
        self._read()
        self._thread = threading.Thread(target=self._run, args=(seconds,), daemon=True)
        self._thread.start()

    def _read(self):
        try:
            with open("/proc/loadavg", encoding="ascii") as handle:
                self.samples.append(float(handle.read().split()[0]))
        except (OSError, ValueError, IndexError):
            pass  # not Linux: no load figures

    def _run(self, seconds):
        while not self._stop.wait(seconds):
            self._read()

    def stop(self):
        """Stop sampling; ``{"loadavg_1min_mean", "loadavg_1min_max", "samples"}`` (empty without /proc)."""
        self._stop.set()
        self._read()
        if not self.samples:
            return {}
        return {"loadavg_1min_mean": round(sum(self.samples) / len(self.samples), 2),
                "loadavg_1min_max": max(self.samples), "samples": len(self.samples)}


def cpu_name():
    """The processor's model name (``/proc/cpuinfo``), or :func:`platform.processor`."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def score_translations(model, src_tokenizer, tgt_tokenizer, pairs, beam_size, length_penalty, device, options=None):
    """Decode ``pairs``' sources with ``beam_size``; BLEU (strict and the tutorial's), exact match, hypotheses.

    ``options``: more keyword arguments of :func:`~solutions.translation.translate` (its decoders).
    """
    hypotheses = translate(model, [s for s, _ in pairs], src_tokenizer, tgt_tokenizer,
                           beam_size=beam_size, length_penalty=length_penalty, device=device, **(options or {}))
    references = [t for _, t in pairs]
    strict = CorpusBLEU()
    bleu = strict(hypotheses, references)
    tutorial = BLEU(lowercase=True, tokenize="13a", force=True)
    return {"bleu": round(bleu, 2), "signature": strict.signature, "beam_size": beam_size,
            "length_penalty": length_penalty if beam_size > 1 else None, **strict.lengths(),
            "bleu_tutorial_metric": round(tutorial.corpus_score(hypotheses, [references]).score, 2),
            "tutorial_signature": str(tutorial.get_signature()), "tutorial_metric": TUTORIAL_METRIC,
            "exact_match": sum(h.split() == r.split() for h, r in zip(hypotheses, references)) / len(pairs),
            "hypotheses": hypotheses}


def results_document(trainer, final, finish, test_pairs, wall_seconds, load, command="", preset=None,
                     skipped_lines=None, translations=None, tuning=None):
    """The run's results.json (schema 1): settings, data, per-epoch curve, final scores, machine.

    ``final`` holds :func:`score_translations`' results under ``"valid"`` (greedy),
    ``"test"`` (the run's decoding) and ``"test_greedy"``; ``translations`` is what
    :func:`write_translations` returned (or None: no test set); ``tuning`` is
    :func:`tune_length_penalty`'s result (or None: the length penalty was not tuned).
    """
    config = trainer.config
    identity = trainer.data_identity or {}
    everything = dataclasses.asdict(config)
    model = everything.pop("model")
    tokenizer = {"tokenizer": config.tokenizer, "bpe_vocab_size": config.bpe_vocab_size,
                 "share_embeddings": config.model.share_embeddings, "max_tokens": config.max_tokens}
    data = {}
    for role, entries in (identity.get("files") or {}).items():
        role_name = {"train": "train", "valid": "valid", "test": "test", "data": "data"}[role]
        size = {"train": len(trainer.train_data), "valid": len(trainer.valid_data),
                "test": len(test_pairs)}.get(role)
        data[role_name] = {"file": os.path.basename(entries[0]["path"]), "sha256": entries[0]["sha256"],
                           "files": [os.path.basename(e["path"]) for e in entries], "pairs": size,
                           "skipped_lines": (skipped_lines or {}).get(role, 0)}
    if "synthetic" in identity:
        data["synthetic"] = identity["synthetic"]

    def strip(scores):
        return {k: v for k, v in scores.items() if k != "hypotheses"}

    results = {
        "schema": RESULTS_SCHEMA,
        "command": command,
        "preset": preset,
        "settings": {"model": model,
                     "training": {k: v for k, v in everything.items() if k not in tokenizer},
                     "tokenizer": tokenizer},
        "parameters": count_parameters(trainer.model),
        "data": data,
        "steps": trainer.step, "planned_steps": trainer.planned_steps, "stopped": trainer.stop_reason,
        "epochs": trainer.epoch_log,
        "checkpoint_averaging": {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                 for k, v in finish.items()},
        "best_valid_bleu_greedy": trainer.best_bleu,
        "valid": strip(final["valid"]) if "valid" in final else None,
        "test": strip(final["test"]) if "test" in final else None,
        "test_greedy": strip(final["test_greedy"]) if "test_greedy" in final else None,
        "translations": translations,
        "decoding": {"beam_size": final.get("test", final.get("valid", {})).get("beam_size", config.beam_size),
                     "length_penalty": tuning["length_penalty"] if tuning is not None else config.length_penalty,
                     "length_penalty_tuned": tuning is not None, "batch_size": DECODE_BATCH_SIZE,
                     "max_len": "source length + 50 tokens"},
        "length_penalty_tuning": tuning,
        "wall_minutes": round(wall_seconds / 60, 2),
        "time_budget_minutes": round(config.time_budget / 60, 2) if config.time_budget else None,
        "machine": {"cpu": cpu_name(), "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                    else os.cpu_count(), "threads": torch.get_num_threads(),
                    "torch": torch.__version__, "python": platform.python_version(), "load": load,
                    # what the forward pass ran in: settings.training.bf16 is what was asked for
                    "autocast": "bfloat16" if trainer.use_bf16 else "float32"},
    }
    if "test" in final:
        hypotheses = final["test"]["hypotheses"]
        results["examples"] = [{"source": s, "reference": t, "hypothesis": h}
                               for (s, t), h in zip(test_pairs[:8], hypotheses[:8])]
    return results


def finish_training(trainer):
    """The end of training: evaluate what :meth:`~solutions.app.trainer.Trainer.train` left unevaluated,
    and the averaged weights.

    When training stopped inside an epoch (the budget or ``max_steps``), the final weights
    are evaluated on the validation set; with ``average_last`` N > 1, the mean of the
    weights at the last N epoch ends (and the final weights, when they are newer) is
    evaluated too. Whichever has the best validation BLEU becomes ``best.pt``, and its
    weights are loaded into ``trainer.model`` (so that a test evaluation afterwards uses them).

    Args:
        trainer: the :class:`~solutions.app.trainer.Trainer` (its ``evaluate``, ``record_epoch``,
            ``keep_best``, ``evaluator`` and ``checkpointer``).

    Returns:
        ``{"final_bleu", "averaged_bleu", "averaged": int, "chosen": "epoch" | "final" |
        "averaged"}`` (BLEU values NaN when not evaluated).
    """
    model, valid, evaluator = trainer.model, trainer.valid_data, trainer.evaluator
    averaging = trainer.config.average_last > 1
    report = {"final_bleu": math.nan, "averaged_bleu": math.nan, "averaged": 0, "chosen": "epoch"}
    best_weights = None
    if trainer.record.last_evaluated_step() != trainer.step and len(valid):
        metrics = trainer.evaluate()
        report["final_bleu"] = metrics["bleu"]
        trainer.record_epoch(metrics)
        trainer.log(f"final weights (step {trainer.step}): valid BLEU {report['final_bleu']:.2f}")
        if trainer.keep_best(report["final_bleu"]):
            report["chosen"] = "final"
        if averaging:
            evaluator.snapshot(model)
    averaged = evaluator.averaged(model) if averaging else None
    if averaged is not None and len(valid):
        current = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict({k: v.to(trainer.device) for k, v in averaged.items()})
        bleu = trainer.evaluate(valid.pairs)["bleu"]  # not recorded in the history
        report["averaged_bleu"], report["averaged"] = bleu, len(evaluator.snapshots)
        trainer.log(f"average of the last {report['averaged']} checkpoints: valid BLEU {bleu:.2f}")
        if trainer.keep_best(bleu, model_state=averaged):
            best_weights, report["chosen"] = averaged, "averaged"
        model.load_state_dict(current)
    if report["chosen"] == "epoch":
        best_weights = trainer.checkpointer.best_weights()
    if best_weights is not None:
        model.load_state_dict({k: v.to(trainer.device) for k, v in best_weights.items()})
    return report


def end_of_run(trainer, finish, test_pairs, load, command="", preset=None, skipped_lines=None, tuning=None):
    """The end of a run after :meth:`~solutions.app.trainer.Trainer.finish`: the final decoding and the results files.

    The validation pairs are translated greedily and the test pairs with the run's decoding
    (its beam and the length penalty ``tuning`` chose)
    (:meth:`~solutions.app.trainer.Trainer.final_beam_size`), and greedily too (decoded once
    when the run's decoding is greedy); the test pairs' loss and accuracy are measured.
    With an ``out_dir`` the trainer's folder gets ``history.json``, ``results.json`` and
    ``test_translations.jsonl`` (:func:`write_translations`).

    Args:
        trainer: the :class:`~solutions.app.trainer.Trainer` whose run ends (main process).
        finish: what :meth:`~solutions.app.trainer.Trainer.finish` returned.
        test_pairs: the held-out ``(source, target)`` pairs (a list; may be empty).
        load: the run's :class:`LoadSampler` (stopped here).
        command, preset, skipped_lines: recorded in ``results.json``.
        tuning: the length penalty chosen on validation
            (:meth:`~solutions.app.trainer.Trainer.tune_length_penalty`), with which the test set is
            decoded, or ``None``: the config's ``length_penalty``.

    Returns:
        The :class:`RunSummary`.
    """
    final = {}
    length_penalty = tuning["length_penalty"] if tuning is not None else trainer.config.length_penalty
    # Validation with greedy decoding (as chosen during the run: quick); the test with the run's decoding.
    # The test set greedily too (the translations file keeps both): decoded once when the run's decoding is greedy.
    for name, pairs, beam_size in (("valid", trainer.valid_data.pairs, 1),
                                   ("test", test_pairs, trainer.final_beam_size()), ("test_greedy", test_pairs, 1)):
        if name == "test_greedy" and final.get("test", {}).get("beam_size") == 1:
            final[name] = final["test"]
        elif pairs:
            final[name] = score_translations(trainer.model, trainer.src_tokenizer, trainer.tgt_tokenizer, pairs,
                                             beam_size, length_penalty, trainer.device, trainer.translate_options)
    test = {}
    if test_pairs:
        test = trainer.evaluate(test_pairs, max_sentences=0)  # loss and accuracy; BLEU with the final decoding
        test.update(bleu=final["test"]["bleu"], exact_match=final["test"]["exact_match"])
    signature = trainer.evaluator.bleu.signature or final.get("test", {}).get("signature")
    results_path = wall_minutes = best = translations_path = None
    checkpoint = os.path.join(trainer.out_dir, "checkpoint.pt") if trainer.out_dir is not None else None
    if trainer.out_dir is not None:
        best = os.path.join(trainer.out_dir, "best.pt")
        best = best if os.path.isfile(best) else None
        write_json(os.path.join(trainer.out_dir, "history.json"),
                   {"history": trainer.history, "test": test, "data": trainer.data_identity,
                    "bleu_signature": signature}, indent=1)
        translations = None
        if test_pairs:
            translations_path = os.path.join(trainer.out_dir, TRANSLATIONS_FILE)
            translations = write_translations(translations_path, test_pairs, final["test_greedy"]["hypotheses"],
                                              final["test"]["hypotheses"], final["test"]["beam_size"],
                                              length_penalty)
        results = results_document(trainer, final, finish, test_pairs, trainer.wall_seconds(), load.stop(),
                                   command=command, preset=preset, skipped_lines=skipped_lines,
                                   translations=translations, tuning=tuning)
        results_path = os.path.join(trainer.out_dir, "results.json")
        write_json(results_path, results, indent=1, ensure_ascii=False)
        wall_minutes = results["wall_minutes"]
    else:
        load.stop()
    return RunSummary(checkpoint=checkpoint, steps=trainer.step, epochs=trainer.epoch, best=best,
                      best_valid_bleu=trainer.best_bleu, test=test, bleu_signature=signature,
                      stopped=trainer.stop_reason, results=results_path, wall_minutes=wall_minutes,
                      translations=translations_path)


def write_translations(path, pairs, greedy, beam, beam_size, length_penalty):
    """Write every test sentence's translations as JSON lines; describe the file for results.json.

    One line per pair, in the test set's order::

        {"index": 0, "source": "...", "reference": "...", "greedy": "...", "beam": "..."}

    (``greedy``: greedy decoding with the key/value cache; ``beam``: the run's final
    decoding, beam search of ``beam_size`` with ``length_penalty``, or greedy again
    when ``beam_size`` is 1). UTF-8, one JSON object per line, so any text (tabs
    included) survives.

    Args:
        path: the file to write (replaced atomically).
        pairs: the test ``(source, reference)`` pairs.
        greedy, beam: one detokenised translation per pair.
        beam_size, length_penalty: the decoding of ``beam``.

    Returns:
        ``{"file", "sha256", "sentences", "format", "greedy", "beam"}`` (the file's base name,
        its SHA-256, and the two decodings' settings).
    """
    if not len(pairs) == len(greedy) == len(beam):
        raise ValueError(f"expected one greedy and one beam translation per pair, got {len(pairs)} pairs, "
                         f"{len(greedy)} greedy and {len(beam)} beam translations")
    lines = [json.dumps({"index": i, "source": s, "reference": t, "greedy": g, "beam": b}, ensure_ascii=False)
             for i, ((s, t), g, b) in enumerate(zip(pairs, greedy, beam))]
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    with open(path + ".tmp", "wb") as handle:
        handle.write(data)
    os.replace(path + ".tmp", path)
    return {"file": os.path.basename(path), "sha256": hashlib.sha256(data).hexdigest(), "sentences": len(pairs),
            "format": "JSON lines: index, source, reference, greedy, beam",
            "greedy": {"beam_size": 1}, "beam": {"beam_size": beam_size, "length_penalty": length_penalty}}


def write_json(path, document, **options):
    """Write ``document`` to ``path`` as JSON (``options``: of :func:`json.dump`)."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, **options)
