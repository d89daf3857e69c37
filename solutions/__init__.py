"""The reference implementation of the book: every exercise's answer and the full model.

The modules follow the chapters, and every public object of them is exported here by
name, so ``from solutions import MultiHeadAttention`` works in every chapter:

* chapters 1–10, the reference (what the exercises ask for and the model built from
  it): ``rnn`` · ``tokens`` · ``embeddings`` · ``positional`` · ``attention`` ·
  ``multihead`` · ``masking`` · ``fused`` · ``layers`` · ``decoder`` · ``model`` ·
  ``configuration`` · ``training`` · ``packing`` · ``kv_cache`` · ``decoding`` · ``bleu``
  (chapter 11);
* ``solutions.figures``: the book's diagrams and plots (never imported here);
* ``solutions.app``: the practitioner's application, which imports the reference and is
  never imported by it: the data (``synthetic``, ``corpus``, ``tokenizer``, ``batching``),
  the training (``config``, ``schedule``, ``checkpoint``, ``evaluation``, ``history``,
  ``progress``, ``summary``, ``trainer``), ``distributed``, ``bench``, ``cli``
  (``python -m solutions``). Import them by their module
  (``from solutions.app.trainer import Trainer``); ``import solutions`` stays cheap
  (torch and numpy, no sacreBLEU, tqdm or tokenizers).
"""
from .rnn import rnn_forward, hidden_state_jacobian_norms, additive_attention  # chapter 1
# chapter 2
from .tokens import (
    PAD_ID, SOS_ID, EOS_ID, UNK_ID, SPECIALS, build_vocab, encode, learn_bpe, bpe_tokenize, one_hot,
    cosine_similarity,
)
from .embeddings import TokenEmbedding  # chapter 2
from .positional import sinusoidal_positional_encoding, PositionalEncoding, relative_position_matrix  # chapter 3
from .attention import softmax, scaled_dot_product_attention, self_attention  # chapter 4
from .multihead import split_heads, merge_heads, MultiHeadAttention  # chapter 5
from .masking import (  # chapter 6
    padding_mask, causal_mask, decoder_mask, masked_softmax, check_attention_mask, zero_fully_masked_rows,
)
from .layers import layer_norm, PositionwiseFeedForward, ResidualSublayer, EncoderLayer  # chapter 7
from .decoder import DecoderLayer  # chapter 8
from .model import Transformer, count_parameters  # chapter 8
from .configuration import (  # chapter 8
    TransformerConfig, ConfigError, PAPER_CONFIGS, PAPER_VOCAB_SIZE, PAPER_PARAMETERS, paper_parameter_count,
)
from .training import make_decoder_io, noam_lr, label_smoothed_cross_entropy, label_smoothing_floor  # chapter 9
from .kv_cache import IncrementalDecoder  # chapter 10
from .decoding import greedy_decode, beam_search  # chapter 10
from .translation import translate  # chapter 10 (not an exercise)
from .bleu import sentence_statistics, bootstrap_bleu  # chapter 11

__all__ = [
    "rnn_forward", "hidden_state_jacobian_norms", "additive_attention", "PAD_ID", "SOS_ID", "EOS_ID", "UNK_ID",
    "SPECIALS", "build_vocab", "encode", "learn_bpe", "bpe_tokenize", "one_hot", "cosine_similarity",
    "TokenEmbedding", "sinusoidal_positional_encoding", "PositionalEncoding", "relative_position_matrix",
    "softmax", "scaled_dot_product_attention", "self_attention", "split_heads", "merge_heads",
    "MultiHeadAttention", "padding_mask", "causal_mask", "decoder_mask", "masked_softmax",
    "check_attention_mask", "zero_fully_masked_rows", "layer_norm", "PositionwiseFeedForward",
    "ResidualSublayer", "EncoderLayer", "DecoderLayer", "Transformer", "TransformerConfig", "ConfigError",
    "count_parameters", "PAPER_CONFIGS", "PAPER_VOCAB_SIZE", "PAPER_PARAMETERS", "paper_parameter_count",
    "make_decoder_io", "noam_lr", "label_smoothed_cross_entropy", "label_smoothing_floor", "IncrementalDecoder",
    "greedy_decode", "beam_search", "translate", "sentence_statistics", "bootstrap_bleu",
]
