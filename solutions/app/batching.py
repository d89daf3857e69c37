"""Batches: sentence pairs encoded once, padded into tensors, grouped by length.

:class:`TranslationDataset` encodes the pairs with the run's tokenizers (and drops the
pairs too long for the model), :func:`collate_batch` pads a list of examples into a
:class:`Batch` (the decoder's input shifted right, chapter 9's
:func:`~solutions.training.make_decoder_io`), and :class:`BucketBatchSampler` groups
examples of similar length, seeded per epoch and sharded over the processes of a
distributed run; :func:`training_data` makes a training run's datasets and sampler.

Paper: section 5.1 ("Sentence pairs were batched together by approximate sequence length").
"""
import random
from dataclasses import dataclass

import torch

from ..tokens import EOS_ID, PAD_ID, SOS_ID
from ..training import make_decoder_io

__all__ = ["TranslationDataset", "Batch", "collate_batch", "BucketBatchSampler", "training_data"]


class TranslationDataset(torch.utils.data.Dataset):
    """Sentence pairs encoded once into id lists (without ``<sos>``/``<eos>``).

    Args:
        pairs: a list of ``(source, target)`` strings.
        src_tokenizer, tgt_tokenizer: objects with ``encode(str) -> list[int]``.
        max_len: pairs with a side longer than this many tokens are dropped
            (``None`` keeps all).

    ``dataset[i]`` is ``(src_ids, tgt_ids)``; ``dataset.pairs[i]`` the strings.

    Paper: section 5.1.
    """

    def __init__(self, pairs, src_tokenizer, tgt_tokenizer, max_len=None):
        self.pairs, self.examples = [], []
        for src, tgt in pairs:
            src_ids, tgt_ids = src_tokenizer.encode(src), tgt_tokenizer.encode(tgt)
            if not src_ids or not tgt_ids:
                continue
            if max_len is not None and (len(src_ids) > max_len or len(tgt_ids) > max_len):
                continue
            self.pairs.append((src, tgt))
            self.examples.append((src_ids, tgt_ids))

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, index):
        return self.examples[index]

    def lengths(self):
        """``max(len(src), len(tgt) + 1)`` of every example: the key for length buckets."""
        return [max(len(s), len(t) + 1) for s, t in self.examples]


@dataclass
class Batch:
    """A padded batch. ``src (B, S)``, ``tgt_in (B, T)`` = ``[<sos>, y...]``,
    ``labels (B, T)`` = ``[y..., <eos>]``; all right-padded with ``<pad>`` = 0."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    labels: torch.Tensor

    def to(self, device):
        return Batch(self.src.to(device), self.tgt_in.to(device), self.labels.to(device))

    def __len__(self):
        return self.src.size(0)


def collate_batch(examples, pad_id=PAD_ID, sos_id=SOS_ID, eos_id=EOS_ID):
    """Pad a list of ``(src_ids, tgt_ids)`` into a :class:`Batch`.

    Args:
        examples: a non-empty list of ``(src_ids, tgt_ids)`` (lists of ints, no specials).
        pad_id, sos_id, eos_id: the special ids (0, 1, 2).

    Shape:
        src: ``(B, S)`` with ``S`` the longest source;
        tgt_in, labels: ``(B, L + 1)`` with ``L`` the longest target (:func:`make_decoder_io`).

    Returns:
        The :class:`Batch`.

    Paper: section 3.1 (the output embeddings are "shifted right") and section 5.1 (batching).
    """
    if not examples:
        raise ValueError("collate_batch needs at least one example")
    sources = [list(src) for src, _ in examples]
    longest = max(len(s) for s in sources)
    src = torch.full((len(sources), longest), pad_id, dtype=torch.long)  # (B, S)
    for row, ids in enumerate(sources):
        src[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    tgt_in, labels = make_decoder_io([list(t) for _, t in examples], sos_id, eos_id, pad_id)
    return Batch(src, tgt_in, labels)


class BucketBatchSampler:
    """Batches of similar length: sort within buckets, shuffle the batches, seeded per epoch.

    The examples are shuffled, cut into buckets of ``bucket_size`` batches,
    sorted by length inside each bucket and cut into batches; the list of batches
    is shuffled again. The order depends only on ``(seed, epoch)``, so every
    process of a distributed run computes the same *global* batches; with
    ``num_replicas > 1`` each process keeps its share ``batch[rank::num_replicas]``
    of every global batch (the ``DistributedSampler`` idea applied to batches),
    and batches smaller than ``num_replicas`` are dropped so no process is idle.

    Args:
        lengths: the length of every example (e.g. ``TranslationDataset.lengths()``).
        batch_size: examples per global batch.
        shuffle: False keeps the dataset order (for evaluation).
        seed: base seed; call :meth:`set_epoch` before each epoch.
        bucket_size: batches per bucket (larger = less padding, less randomness).
        num_replicas, rank: the distributed sharding (1 and 0 for one process).
        drop_last: drop a final global batch smaller than ``batch_size``.

    ``iter(sampler)`` yields lists of dataset indices; ``len(sampler)`` counts them.

    Paper: section 5.1 ("batched together by approximate sequence length").
    """

    def __init__(self, lengths, batch_size, shuffle=True, seed=0, bucket_size=50,
                 num_replicas=1, rank=0, drop_last=False):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be a positive int, got {num_replicas!r}")
        if not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank!r}")
        if batch_size < num_replicas:
            raise ValueError(f"batch_size ({batch_size}) must be at least num_replicas ({num_replicas})")
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.bucket_size = bucket_size
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch):
        """Choose the epoch whose order :meth:`__iter__` produces."""
        self.epoch = epoch

    def global_batches(self):
        """The global batches of the current epoch (identical on every process)."""
        indices = list(range(len(self.lengths)))
        if self.shuffle:
            rng = random.Random(self.seed * 1_000_003 + self.epoch)
            rng.shuffle(indices)
            chunk = self.batch_size * self.bucket_size
            batches = []
            for start in range(0, len(indices), chunk):
                bucket = sorted(indices[start:start + chunk], key=lambda i: self.lengths[i])
                batches += [bucket[i:i + self.batch_size] for i in range(0, len(bucket), self.batch_size)]
            rng.shuffle(batches)
        else:
            batches = [indices[i:i + self.batch_size] for i in range(0, len(indices), self.batch_size)]
        if self.drop_last:
            batches = [b for b in batches if len(b) == self.batch_size]
        return [b for b in batches if len(b) >= self.num_replicas]

    def __iter__(self):
        for batch in self.global_batches():
            yield batch[self.rank::self.num_replicas]

    def __len__(self):
        return len(self.global_batches())


def training_data(config, train_pairs, valid_pairs, src_tokenizer, tgt_tokenizer, num_replicas=1, rank=0):
    """A training run's datasets and the sampler of its training batches.

    Pairs with a side longer than ``min(config.max_tokens, config.model.max_len - 1)`` tokens
    are dropped (one position goes to ``<sos>`` / ``<eos>``).

    Args:
        config: the run's :class:`~solutions.app.config.TrainConfig` (``max_tokens``,
            ``model.max_len``, ``batch_size``, ``bucket_size``, ``seed``).
        train_pairs, valid_pairs: lists of ``(source, target)`` strings.
        src_tokenizer, tgt_tokenizer: the run's tokenizers.
        num_replicas, rank: this process's share of a distributed run.

    Returns:
        ``(train_data, valid_data, sampler)``: two :class:`TranslationDataset` and the
        shuffled :class:`BucketBatchSampler` of ``train_data``.

    Raises:
        ValueError: no training pair fits.
    """
    limit = min(config.max_tokens, config.model.max_len - 1)
    train_data = TranslationDataset(train_pairs, src_tokenizer, tgt_tokenizer, max_len=limit)
    valid_data = TranslationDataset(valid_pairs, src_tokenizer, tgt_tokenizer, max_len=limit)
    if len(train_data) == 0:
        raise ValueError(f"no training pair fits max_tokens = {limit}")
    sampler = BucketBatchSampler(train_data.lengths(), config.batch_size, shuffle=True, seed=config.seed,
                                 bucket_size=config.bucket_size, num_replicas=num_replicas, rank=rank)
    return train_data, valid_data, sampler
