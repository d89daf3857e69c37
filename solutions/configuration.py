"""The model's configuration: :class:`TransformerConfig`, and the paper's Table 3 (chapter 8).

A model's sizes, and the attention class its layers run, as one checked value, apart
from the model it describes (as Hugging Face keeps ``configuration_*.py`` beside
``modeling_*.py``): the trainer, its checkpoints, the command line and the benchmarks
pass a :class:`TransformerConfig` around instead of loose arguments, and
``config.build(src_vocab_size, tgt_vocab_size)`` makes the
:class:`~solutions.model.Transformer`. :data:`PAPER_CONFIGS` are Table 3's two models as
such configs; :func:`paper_parameter_count` counts their parameters in closed form.

Paper: section 3 and Table 3.
"""
import dataclasses
from dataclasses import dataclass

from .fused import use_fast_dropout, use_fused_attention
from .model import Transformer

__all__ = ["ConfigError", "TransformerConfig", "ATTENTION", "PAPER_CONFIGS", "PAPER_VOCAB_SIZE", "PAPER_PARAMETERS",
           "paper_parameter_count"]

#: The attention classes a built model can run: ``TransformerConfig.attention``.
ATTENTION = ("fused", "readable")


class ConfigError(ValueError):
    """A :class:`TransformerConfig` (or a training config) the model cannot take.

    Attributes:
        fields: the fields at fault, in the order the message names them
            (``("d_model", "num_heads")`` when one does not divide the other).
    """

    def __init__(self, message, fields):
        super().__init__(message)
        self.fields = tuple(fields)


@dataclass(frozen=True)
class TransformerConfig:
    """The sizes of a :class:`~solutions.model.Transformer`, checked once, here: what the trainer, its
    checkpoints and the command line pass around instead of loose arguments.

    The fields are :class:`~solutions.model.Transformer`'s keyword arguments, with its defaults (the
    paper's base model, Table 3), and ``attention``, the one switch of the fast path;
    ``config.build(src_vocab_size, tgt_vocab_size)`` makes the model. Frozen:
    ``config.replace(d_model=256)`` makes a changed copy.

    Args:
        d_model: model width; even (the positional encoding pairs sines and cosines)
            and a multiple of ``num_heads``.
        num_heads: attention heads; each gets ``d_model / num_heads`` dimensions.
        num_encoder_layers, num_decoder_layers: the stacks' depths N (at least 1).
        d_ff: feed-forward inner width.
        dropout: ``P_drop``, in ``[0, 1)``.
        max_len: longest sequence the positional table covers.
        share_embeddings: one matrix for both embeddings and the output projection
            (section 3.4; needs one shared vocabulary).
        norm_first: False = post-norm (the paper), True = pre-norm.
        attention: which attention class the built model runs, read once, by
            :meth:`build`: ``"fused"`` (the default; what the trainer, checkpoints and
            benchmarks run) = :class:`~solutions.fused.FusedMultiHeadAttention`, packed
            projections and ``F.scaled_dot_product_attention``, no ``attn_weights`` unless
            ``model.set_fused(False)`` asks for them; ``"readable"`` = chapter 5's
            :class:`~solutions.multihead.MultiHeadAttention` on its readable path, as the
            notebooks build it. Same parameters, ``state_dict`` and outputs either way, so a
            checkpoint of one loads into the other.

    Raises:
        ConfigError: (a ``ValueError``) naming the field and the value it got.

    Paper: section 3, Table 3.
    """

    d_model: int = 512  # Table 3, base
    num_heads: int = 8  # h: 512 / 8 = 64 dimensions a head (section 3.2.2)
    num_encoder_layers: int = 6  # N
    num_decoder_layers: int = 6  # N
    d_ff: int = 2048  # Table 3, base
    dropout: float = 0.1  # P_drop (section 5.4)
    max_len: int = 5000  # positions of the sinusoidal table: longer than any sentence
    share_embeddings: bool = False  # the paper ties them (section 3.4) with a shared vocabulary
    norm_first: bool = False  # post-norm, as in the paper
    attention: str = "fused"  # not the paper's: how the model computes attention, not what

    def __post_init__(self):
        for name in ("d_model", "num_heads", "num_encoder_layers", "num_decoder_layers", "d_ff", "max_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}", (name,))
        for name in ("share_embeddings", "norm_first"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}", (name,))
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) \
                or not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}", ("dropout",))
        if self.attention not in ATTENTION:
            raise ConfigError(f"attention must be one of {ATTENTION}, got {self.attention!r}", ("attention",))
        if self.d_model % 2:
            raise ConfigError(f"d_model must be even (the positional encoding pairs sines and cosines), "
                              f"got {self.d_model}", ("d_model",))
        if self.d_model % self.num_heads:
            raise ConfigError(f"d_model {self.d_model} is not divisible by num_heads {self.num_heads} "
                              "(each head gets d_model / num_heads dimensions)", ("d_model", "num_heads"))

    def replace(self, **changes):
        """A copy with some fields changed (checked again); an unknown name raises ``ValueError``."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown TransformerConfig fields: {sorted(unknown)}")
        return dataclasses.replace(self, **changes)

    def build(self, src_vocab_size, tgt_vocab_size):
        """A new :class:`~solutions.model.Transformer` of these sizes, on the CPU, running :attr:`attention`.

        Args:
            src_vocab_size, tgt_vocab_size: the vocabularies' sizes.

        Returns:
            ``Transformer(src_vocab_size, tgt_vocab_size, **sizes)``; with ``attention="fused"``
            its attention modules are :class:`~solutions.fused.FusedMultiHeadAttention`
            (:func:`~solutions.fused.use_fused_attention`) and its dropout modules
            :class:`~solutions.fused.FastDropout` (:func:`~solutions.fused.use_fast_dropout`).
        """
        sizes = {name: value for name, value in dataclasses.asdict(self).items() if name != "attention"}
        model = Transformer(src_vocab_size, tgt_vocab_size, **sizes)
        return use_fast_dropout(use_fused_attention(model)) if self.attention == "fused" else model


#: Table 3 of the paper as configs. Both models use N = 6 layers and a shared source-target BPE
#: vocabulary of about 37000 tokens for English-German (section 5.1), with the two
#: embeddings and the pre-softmax projection tied (section 3.4): build one with
#: ``PAPER_CONFIGS["base"].replace(share_embeddings=True).build(37000, 37000)``.
PAPER_CONFIGS = {
    "base": TransformerConfig(d_model=512, num_heads=8, num_encoder_layers=6, num_decoder_layers=6, d_ff=2048,
                              dropout=0.1),
    "big": TransformerConfig(d_model=1024, num_heads=16, num_encoder_layers=6, num_decoder_layers=6, d_ff=4096,
                             dropout=0.3),
}
PAPER_VOCAB_SIZE = 37000
PAPER_PARAMETERS = {"base": 65_000_000, "big": 213_000_000}  # as printed: "65 × 10^6", "213 × 10^6"


def paper_parameter_count(name, vocab_size=PAPER_VOCAB_SIZE, share_embeddings=True):
    """Our parameter count for the paper's ``base`` or ``big`` configuration.

    Computed in closed form (no model is built), with ``d = d_model``, ``V`` the
    vocabulary, ``N`` the layers:

    - multi-head attention: ``4 (d² + d)`` (W^Q, W^K, W^V, W^O and their biases);
    - feed-forward: ``2 d d_ff + d_ff + d``; LayerNorm: ``2 d``;
    - encoder layer = attention + FFN + 2 LayerNorms; decoder layer = 2 attentions
      + FFN + 3 LayerNorms;
    - embeddings: ``V d`` once when tied (else ``2 V d`` for the two embeddings
      plus ``V d`` for the projection), plus the projection's bias ``V``.

    With ``V = 37000`` and tied embeddings this gives 63,119,496 for base
    (paper: 65M) and 214,282,376 for big (paper: 213M). The embedding matrix
    alone is 18.9M (base) and 37.9M (big), so the vocabulary size dominates the
    difference: "about 37000" is rounded, and every 1000 tokens moves the base
    count by 0.5M (1.0M for big). Biases (0.10M / 0.17M, the projection's
    37000 included) and LayerNorms (0.03M / 0.06M) are too small to matter at
    this precision. Untied embeddings
    would add 2 V d (37.9M base): the paper's totals only fit tied embeddings.
    ``count_parameters(PAPER_CONFIGS[name].replace(share_embeddings=True).build(V, V))``
    gives the same number (checked in the tests).

    Args:
        name: ``"base"`` or ``"big"``.
        vocab_size: the shared vocabulary size ``V`` (default 37000).
        share_embeddings: tie source and target embeddings and the projection.

    Returns:
        ``int``, the number of trainable parameters.

    Paper: Table 3.
    """
    if name not in PAPER_CONFIGS:
        raise ValueError(f"name must be one of {sorted(PAPER_CONFIGS)}, got {name!r}")
    config = PAPER_CONFIGS[name]
    d, d_ff = config.d_model, config.d_ff
    attention = 4 * (d * d + d)
    feed_forward = 2 * d * d_ff + d_ff + d
    norm = 2 * d
    encoder_layer = attention + feed_forward + 2 * norm
    decoder_layer = 2 * attention + feed_forward + 3 * norm
    embeddings = vocab_size * d if share_embeddings else 3 * vocab_size * d
    return (
        config.num_encoder_layers * encoder_layer
        + config.num_decoder_layers * decoder_layer
        + embeddings
        + vocab_size  # the projection's bias
    )
