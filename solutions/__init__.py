"""The reference implementation of the book: every exercise's answer and the full model.

Every public object of every module is re-exported here, in reading order, so
``from solutions import MultiHeadAttention`` works in every chapter.
"""
from . import attention, masking, multihead
from .attention import *
from .multihead import *
from .masking import *

__all__ = [
    *attention.__all__,
    *multihead.__all__,
    *masking.__all__,
]
