"""The reference implementation of the book: every exercise's answer and the full model.

Every public object of every module is re-exported here, in reading order, so
``from solutions import MultiHeadAttention`` works in every chapter.
"""
from . import attention, embeddings, layers, masking, model, multihead, positional, rnn, tokens
from .rnn import *
from .tokens import *
from .embeddings import *
from .positional import *
from .attention import *
from .multihead import *
from .masking import *
from .layers import *
from .model import *

__all__ = [
    *rnn.__all__,
    *tokens.__all__,
    *embeddings.__all__,
    *positional.__all__,
    *attention.__all__,
    *multihead.__all__,
    *masking.__all__,
    *layers.__all__,
    *model.__all__,
]
