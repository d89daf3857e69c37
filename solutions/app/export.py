"""Export a trained checkpoint to CTranslate2, the inference engine translation models are deployed on.

``transformer export CKPT --format ctranslate2 --output DIR`` writes a CTranslate2 model
directory: ``model.bin`` (the weights, converted by CTranslate2's own Python converter API:
a :class:`ctranslate2.specs.TransformerSpec` filled from our ``state_dict`` and saved by a
:class:`ctranslate2.converters.Converter`), ``config.json`` and the vocabularies (CTranslate2
reads token strings), plus ``tokenizer.json`` — our source and target tokenizers (their
``state()``), so the directory alone translates text: :class:`CTranslate2Translator` reads
it and turns sentences into tokens, tokens into translations, exactly as
:func:`~solutions.translation.translate` does with the PyTorch model.

The mapping is one to one, no approximation: CTranslate2's Transformer is the paper's
(embeddings scaled by ``√d_model``, sinusoidal positions added, post-norm or pre-norm layers
with a final LayerNorm when pre-norm, ReLU feed-forward). Our positional table is passed as
it is (its sine/cosine columns interleave; CTranslate2's own table would put the sines first),
self-attention's ``W^Q, W^K, W^V`` become one packed projection and cross-attention's
``W^K, W^V`` another, as CTranslate2 stores them, and LayerNorm's epsilon is ours (1e-5).
Greedy translations agree with ours token for token (``tests/unit/test_export.py``), up to
float rounding on near-ties.

``ctranslate2`` is an optional dependency (``pip install 'transformer-book[ctranslate2]'`` or
``pip install ctranslate2``); it is imported only here, when an export or a translation
asks for it.

Paper: section 3 (the architecture the spec describes), 6.1 (greedy and beam decoding).
"""
import json
import os

import numpy as np

from ..tokens import EOS_ID, SOS_ID, SPECIALS, UNK_ID
from .checkpoint import load_checkpoint, model_from_checkpoint
from .tokenizer import BPETokenizer, tokenizer_from_state

__all__ = ["CTRANSLATE2_TOKENIZER_FILE", "ctranslate2_available", "export_ctranslate2", "CTranslate2Translator"]

#: Our tokenizers, stored beside the CTranslate2 model: ``{"format", "src_tokenizer", "tgt_tokenizer", "max_len"}``.
CTRANSLATE2_TOKENIZER_FILE = "tokenizer.json"
_TOKENIZER_FORMAT = "transformer-book-ctranslate2-tokenizers/1"


def _import_ctranslate2():
    """``ctranslate2``, or an ``ImportError`` that says how to install it (an optional dependency)."""
    try:
        import ctranslate2  # heavy optional dependency: imported only when an export or a translation needs it
    except ImportError as error:
        raise ImportError("the CTranslate2 export needs the ctranslate2 package: pip install ctranslate2 "
                          "(or pip install 'transformer-book[ctranslate2]')") from error
    return ctranslate2


def ctranslate2_available():
    """True when ``ctranslate2`` can be imported."""
    try:
        _import_ctranslate2()
    except ImportError:
        return False
    return True


def vocabulary_tokens(tokenizer):
    """The token string of every id, in id order (what CTranslate2's vocabulary files hold).

    Raises:
        ValueError: when two ids share a string (CTranslate2 maps strings back to ids).
    """
    if isinstance(tokenizer, BPETokenizer):
        by_id = {index: token for token, index in tokenizer.tokenizer.get_vocab(with_added_tokens=True).items()}
    else:
        by_id = dict(tokenizer.itos)
    tokens = [by_id.get(index) for index in range(len(tokenizer))]
    missing = [index for index, token in enumerate(tokens) if token is None]
    if missing or len(set(tokens)) != len(tokens):
        raise ValueError(f"the vocabulary cannot be written as token strings: ids without a string {missing[:5]}, "
                         f"{len(tokens) - len(set(tokens))} duplicated strings")
    if tuple(tokens[:len(SPECIALS)]) != SPECIALS:
        raise ValueError(f"the vocabulary must start with {SPECIALS}, got {tuple(tokens[:len(SPECIALS)])}")
    return tokens


def _spec_from_model(ctranslate2, model, config, src_tokens, tgt_tokens):
    """A :class:`ctranslate2.specs.TransformerSpec` holding ``model``'s weights."""
    specs = ctranslate2.specs
    sizes = config.model
    spec = specs.TransformerSpec.from_config(
        (sizes.num_encoder_layers, sizes.num_decoder_layers), sizes.num_heads, pre_norm=sizes.norm_first,
        activation=specs.Activation.RELU,
    )
    weights = {name: tensor.detach().float().cpu().numpy() for name, tensor in model.state_dict().items()}
    positions = model.positional.pe.detach().float().cpu().numpy()  # (max_len, d_model); a buffer outside state_dict

    def linear(target, *names):  # one linear map, or several packed by rows (fused Q K V / K V)
        target.weight = np.concatenate([weights[f"{name}.weight"] for name in names])
        target.bias = np.concatenate([weights[f"{name}.bias"] for name in names])

    def norm(target, name):
        target.gamma, target.beta = weights[f"{name}.weight"], weights[f"{name}.bias"]

    def feed_forward(target, scope, norm_name):
        norm(target.layer_norm, norm_name)
        linear(target.linear_0, f"{scope}.feed_forward.linear1")
        linear(target.linear_1, f"{scope}.feed_forward.linear2")

    spec.encoder.embeddings[0].weight = weights["src_embed.embedding.weight"]  # the encoder may have several
    spec.decoder.embeddings.weight = weights["tgt_embed.embedding.weight"]
    for stack in (spec.encoder, spec.decoder):
        stack.scale_embeddings = True  # × √d_model, as TokenEmbedding does
        stack.position_encodings.encodings = positions
    if sizes.norm_first:
        norm(spec.encoder.layer_norm, "encoder_norm")
        norm(spec.decoder.layer_norm, "decoder_norm")
    for index, layer in enumerate(spec.encoder.layer):
        scope = f"encoder_layers.{index}"
        linear(layer.self_attention.linear[0], *(f"{scope}.self_attn.w_{x}" for x in "qkv"))
        linear(layer.self_attention.linear[1], f"{scope}.self_attn.w_o")
        norm(layer.self_attention.layer_norm, f"{scope}.norm1")
        feed_forward(layer.ffn, scope, f"{scope}.norm2")
    for index, layer in enumerate(spec.decoder.layer):
        scope = f"decoder_layers.{index}"
        linear(layer.self_attention.linear[0], *(f"{scope}.self_attn.w_{x}" for x in "qkv"))
        linear(layer.self_attention.linear[1], f"{scope}.self_attn.w_o")
        norm(layer.self_attention.layer_norm, f"{scope}.norm1")
        linear(layer.attention.linear[0], f"{scope}.cross_attn.w_q")
        linear(layer.attention.linear[1], f"{scope}.cross_attn.w_k", f"{scope}.cross_attn.w_v")
        linear(layer.attention.linear[2], f"{scope}.cross_attn.w_o")
        norm(layer.attention.layer_norm, f"{scope}.norm2")
        feed_forward(layer.ffn, scope, f"{scope}.norm3")
    linear(spec.decoder.projection, "generator")
    spec.config.bos_token = SPECIALS[SOS_ID]
    spec.config.eos_token = SPECIALS[EOS_ID]
    spec.config.unk_token = SPECIALS[UNK_ID]
    spec.config.decoder_start_token = SPECIALS[SOS_ID]  # the decoder starts from <sos>, as ours
    spec.config.layer_norm_epsilon = 1e-5  # torch.nn.LayerNorm's default, which every norm of ours uses
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    return spec


def export_ctranslate2(source, output_dir, quantization=None, force=False):
    """Write a CTranslate2 model directory (weights, vocabularies, our tokenizers) from a checkpoint.

    Args:
        source: a checkpoint or export path (``train``'s ``best.pt``, ``export``'s file), or its state dict.
        output_dir: the directory to write (CTranslate2's layout plus :data:`CTRANSLATE2_TOKENIZER_FILE`).
        quantization: CTranslate2's weight type (``None`` = float32 as trained; ``"int8"``,
            ``"int8_float32"``, ``"bfloat16"``, ...: faster and smaller, and then the translations
            may differ from ours).
        force: replace an existing ``output_dir``.

    Returns:
        ``output_dir``.

    Raises:
        ImportError: ``ctranslate2`` is not installed.
        CheckpointError: ``source`` is not a usable checkpoint.
        FileExistsError: ``output_dir`` exists and ``force`` is False.
    """
    ctranslate2 = _import_ctranslate2()
    state = load_checkpoint(source) if not isinstance(source, dict) else source
    model, src_tokenizer, tgt_tokenizer, config = model_from_checkpoint(state)
    if os.path.exists(output_dir) and not force:
        raise FileExistsError(f"{output_dir} exists: choose another directory, or replace it (--force)")
    src_tokens, tgt_tokens = vocabulary_tokens(src_tokenizer), vocabulary_tokens(tgt_tokenizer)

    class _Converter(ctranslate2.converters.Converter):
        """CTranslate2's converter interface: ``_load`` returns the filled spec."""

        def _load(self):
            return _spec_from_model(ctranslate2, model, config, src_tokens, tgt_tokens)

    _Converter().convert(os.fspath(output_dir), quantization=quantization, force=True)
    stored = {"format": _TOKENIZER_FORMAT, "src_tokenizer": src_tokenizer.state(),
              "tgt_tokenizer": tgt_tokenizer.state(), "max_len": config.model.max_len}
    with open(os.path.join(output_dir, CTRANSLATE2_TOKENIZER_FILE), "w", encoding="utf-8") as handle:
        json.dump(stored, handle, ensure_ascii=False)
    return output_dir


class CTranslate2Translator:
    """Translate text with an exported CTranslate2 model directory, as :func:`~solutions.translation.translate` does.

    Args:
        model_dir: a directory written by :func:`export_ctranslate2`.
        device: ``"cpu"`` or ``"cuda"``.
        threads: CTranslate2's ``intra_threads`` (threads per translation; 0 = its default).
        compute_type: CTranslate2's compute type (``"default"``: the stored weights' type).

    ``translator(sentences, beam_size=1, length_penalty=0.6, batch_size=64, max_len=None)``
    returns the target strings (``max_len``: most new tokens, as for ``translate``). Greedy decoding follows ours: batches sorted by source length, at most
    ``source length + 50`` new tokens per batch (capped by the positional table), ``<unk>``
    allowed. Beam search normalises scores by CTranslate2's own rule (``length_penalty`` is
    the exponent of the length it divides by), not by our ``((5 + |Y|) / 6) ** alpha``, so
    beam translations may differ from ours where candidates are close.
    """

    def __init__(self, model_dir, device="cpu", threads=0, compute_type="default"):
        ctranslate2 = _import_ctranslate2()
        path = os.path.join(model_dir, CTRANSLATE2_TOKENIZER_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{model_dir} has no {CTRANSLATE2_TOKENIZER_FILE}: not written by "
                                    "'transformer export --format ctranslate2'")
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
        if stored.get("format") != _TOKENIZER_FORMAT:
            raise ValueError(f"{path}: unknown format {stored.get('format')!r}, expected {_TOKENIZER_FORMAT!r}")
        self.src_tokenizer = tokenizer_from_state(stored["src_tokenizer"])
        self.tgt_tokenizer = tokenizer_from_state(stored["tgt_tokenizer"])
        self.max_len = int(stored["max_len"])
        self.src_tokens = vocabulary_tokens(self.src_tokenizer)
        self.tgt_ids = {token: index for index, token in enumerate(vocabulary_tokens(self.tgt_tokenizer))}
        self.translator = ctranslate2.Translator(os.fspath(model_dir), device=device, intra_threads=threads,
                                                 compute_type=compute_type)

    def __call__(self, sentences, beam_size=1, length_penalty=0.6, batch_size=64, max_len=None):
        if isinstance(sentences, str):
            raise TypeError("sentences must be a list of strings, not one string")
        encoded = [self.src_tokenizer.encode(s) or [UNK_ID] for s in sentences]
        order = sorted(range(len(sentences)), key=lambda i: len(encoded[i]))  # batches of similar length, as ours
        outputs = [None] * len(sentences)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            longest = max(len(encoded[i]) for i in chunk)
            results = self.translator.translate_batch(
                [[self.src_tokens[t] for t in encoded[i]] for i in chunk], beam_size=beam_size,
                max_decoding_length=min(longest + 50 if max_len is None else max_len, self.max_len - 1),
                length_penalty=length_penalty,
                max_batch_size=batch_size, disable_unk=False,
            )
            for i, result in zip(chunk, results):
                outputs[i] = self.tgt_tokenizer.decode([self.tgt_ids[t] for t in result.hypotheses[0]])
        return outputs
