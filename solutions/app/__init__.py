"""The practitioner's application: the book's Transformer trained, used and measured from the command line.

It imports the reference (``solutions``, chapters 1–10) and is never imported by it:

* ``data``: the synthetic translation task, TSV and parallel-file corpora, tokenizers
  (words, or Hugging Face BPE), batching by length;
* ``trainer``: ``TrainConfig``, the presets, ``Trainer``, checkpoints;
* ``distributed``: ``torchrun`` and ``torch.distributed`` (several GPUs);
* ``bench``: the speed benchmarks (``python -m solutions bench``);
* ``cli``: the command line, ``python -m solutions train | translate | evaluate | export | bench``
  (installed as the command ``transformer``).

Import them by module (``from solutions.app.trainer import Trainer``); this ``__init__``
imports nothing, so ``import solutions`` stays cheap.
"""
