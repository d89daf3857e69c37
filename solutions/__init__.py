"""The reference implementation of the book: every exercise's answer and the full model.

Every public object of the package's library modules is re-exported here, in
reading order, so ``from solutions import MultiHeadAttention`` works in every
chapter. Left out on purpose: ``viz`` (imports matplotlib; use
``from solutions.viz import ...``) and the entry points ``cli``, ``bench`` and
``__main__``.
"""
from . import (
    attention,
    data,
    decoder,
    decoding,
    distributed,
    embeddings,
    kv_cache,
    layers,
    masking,
    model,
    multihead,
    positional,
    rnn,
    tokens,
    trainer,
    training,
)
from .rnn import *
from .tokens import *
from .embeddings import *
from .positional import *
from .attention import *
from .multihead import *
from .masking import *
from .layers import *
from .decoder import *
from .model import *
from .training import *
from .data import *
from .kv_cache import *
from .decoding import *
from .trainer import *
from .distributed import *

__all__ = [
    *rnn.__all__,
    *tokens.__all__,
    *embeddings.__all__,
    *positional.__all__,
    *attention.__all__,
    *multihead.__all__,
    *masking.__all__,
    *layers.__all__,
    *decoder.__all__,
    *model.__all__,
    *training.__all__,
    *data.__all__,
    *kv_cache.__all__,
    *decoding.__all__,
    *trainer.__all__,
    *distributed.__all__,
]
