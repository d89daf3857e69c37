"""The practitioner's application: the book's Transformer trained, used and measured from the command line.

It imports the reference (``solutions``, chapters 1–10) and is never imported by it:

* the data: ``synthetic`` (the book's synthetic translation task), ``corpus`` (TSV and
  parallel-file corpora, bad lines, fingerprints, splits), ``tokenizer`` (words, or
  Hugging Face BPE), ``batching`` (datasets, padding, batches by length);
* the training: ``config`` (``TrainConfig``, the presets, the book's run), ``schedule``
  (learning-rate schedules, the time budget), ``checkpoint`` (checkpoint files, exports,
  exact resume), ``evaluation`` (BLEU, validation, the end of training), ``summary``
  (the final decoding, the results files, ``RunSummary``) and ``trainer`` (``Trainer``:
  the loop and the whole run), ``device`` (the run's device, native bfloat16);
* ``inference``, ``export``: fast decoders, and the CTranslate2 export;
* ``distributed``: ``torchrun`` and ``torch.distributed`` (several GPUs);
* ``bench``: the speed benchmarks (``python -m solutions bench``);
* ``cli``: the command line, ``python -m solutions train | translate | evaluate | export | bench``
  (installed as the command ``transformer``).

Import them by module (``from solutions.app.trainer import Trainer``); this ``__init__``
imports nothing, so ``import solutions`` stays cheap.
"""
