"""Checks of chapter 8, the full Transformer: ``DecoderLayer``, ``Transformer`` and
``count_parameters``.

The contract is ``shared/EXERCISES.md`` section 8; the references are in
``solutions/layers.py`` and ``solutions/model.py`` ("Attention Is All You Need",
section 3, figure 1, Table 3).

Random states and the functional building blocks (attention with the case's
weights, LayerNorm, FFN) are shared with the chapter 7 checks. The diagnoses
recompute the forward pass with one plausible mistake at a time (the target mask
in cross-attention, memory and x swapped, no causal mask, norms permuted, no
√d_model, positions on one side only, untied weights, ...) and name the one the
result equals.

Grading runs in a sandbox whose ``solutions`` lacks this chapter's modules
(``decoder``, ``model``): the ``Obj`` models of ``count_parameters``' hidden cases
are therefore built from ``torch.nn`` and the earlier chapters' modules only. The tied-weights case
needs ``solutions.Transformer`` and therefore stays in the visible check.

Each exercise's points are split over named parts (``parts``); the decoder layer's
masks are probed one at a time (only ``tgt_mask``, only ``src_mask``) so that a
mask mistake costs its own part. ``share_embeddings`` with unequal vocabularies is
the one error the contract names here. ``Transformer`` may build on the student's
``DecoderLayer`` (``uses``).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import wire
from .base import PROCESS_STATE, Case, CheckFailure, Exercise, Obj, Result, Tensor, register
from .base import as_array as _array
from .ch07_add_and_norm import (
    attention_state,
    ffn_state,
    layer_close,
    match_layer_variants,
    norm_state,
    random_padding,
    reference_ffn,
    reference_layer_norm,
    reference_mha,
)

CHAPTER = "08_transformer"


def _causal(length):
    return np.tril(np.ones((length, length), dtype=bool))[None, None]  # (1, 1, T, T)


# --------------------------------------------------------------------------- DecoderLayer


def _decoder_state(rng, d_model, d_ff):
    return {
        **attention_state(rng, "self_attn.", d_model),
        **attention_state(rng, "cross_attn.", d_model),
        **ffn_state(rng, "feed_forward.", d_model, d_ff),
        **norm_state(rng, "norm1.", d_model),
        **norm_state(rng, "norm2.", d_model),
        **norm_state(rng, "norm3.", d_model),
    }


def decoder_layer_variant(case, *, flip_norm_first=False, residual=True, cross_mask="src", self_mask="tgt",
                          swap_memory=False, norms=("norm1.", "norm2.", "norm3."), keys_from_x=False):
    """A trusted decoder layer computed from the case's state, with switches for the mistakes."""
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    init, state = case.init, case.state
    d_model, num_heads = init["d_model"], init["num_heads"]
    norm_first = bool(init.get("norm_first", False)) != flip_norm_first
    x, memory = (torch.from_numpy(_array(a).astype(np.float32)) for a in case.args[:2])
    masks = {"src": case.kwargs.get("src_mask"), "tgt": case.kwargs.get("tgt_mask"), "none": None}
    masks = {k: None if v is None else torch.from_numpy(_array(v)) for k, v in masks.items()}
    self_attn = reference_mha(state, "self_attn.", d_model, num_heads)
    cross_attn = reference_mha(state, "cross_attn.", d_model, num_heads)
    n1, n2, n3 = norms
    keep = 1.0 if residual else 0.0

    def cross(q):
        if swap_memory:
            return cross_attn(memory, q, q, masks[cross_mask])
        if keys_from_x:
            return cross_attn(q, q, q, masks[cross_mask])
        return cross_attn(q, memory, memory, masks[cross_mask])

    with torch.no_grad():
        if norm_first:
            h = reference_layer_norm(state, n1, x)
            x = keep * x + self_attn(h, h, h, masks[self_mask])
            x = keep * x + cross(reference_layer_norm(state, n2, x))
            x = keep * x + reference_ffn(state, "feed_forward.", reference_layer_norm(state, n3, x))
        else:
            x = reference_layer_norm(state, n1, keep * x + self_attn(x, x, x, masks[self_mask]))
            x = reference_layer_norm(state, n2, keep * x + cross(x))
            x = reference_layer_norm(state, n3, keep * x + reference_ffn(state, "feed_forward.", x))
    return x


def _decoder_case(rng, batch, t_tgt, t_src, d_model, num_heads, d_ff, *, norm_first, label, part, masks="both",
                  dropout=0.0, backward=False, tgt_mask="causal"):
    x = rng.normal(size=(batch, t_tgt, d_model)).astype(np.float32)
    memory = rng.normal(size=(batch, t_src, d_model)).astype(np.float32)
    kwargs = {}
    if masks in ("both", "src"):
        kwargs["src_mask"] = Tensor(random_padding(rng, batch, t_src))
    if masks in ("both", "tgt"):
        causal = _causal(t_tgt)
        if tgt_mask == "decoder":
            causal = causal & random_padding(rng, batch, t_tgt)  # (B, 1, T, T)
            causal[:, :, :, 0] = True
        kwargs["tgt_mask"] = Tensor(causal)
    weight = Tensor(rng.normal(size=x.shape).astype(np.float32)) if backward else None
    return Case(init={"d_model": d_model, "num_heads": num_heads, "d_ff": d_ff, "dropout": dropout,
                      "norm_first": norm_first},
                state=_decoder_state(rng, d_model, d_ff),
                args=(Tensor(x, requires_grad=backward), Tensor(memory, requires_grad=backward)), kwargs=kwargs,
                backward=weight, probes=("state_dict_keys",), label=label, part=part, rtol=1e-4, atol=1e-4)


# Mistakes in the order of a decoder layer's steps (switches of decoder_layer_variant), the
# rule of its post-norm part.
_DECODER_ORDER_MISTAKES = (dict(flip_norm_first=True), dict(residual=False),
                           dict(norms=("norm1.", "norm3.", "norm2.")), dict(norms=("norm2.", "norm1.", "norm3.")))


@register
class DecoderLayerCheck(Exercise):
    """``DecoderLayer(d_model, num_heads, d_ff, dropout=0.0, norm_first=False)``."""

    name = "DecoderLayer"
    chapter = CHAPTER
    kind = "class"
    what = ("masked self-attention, cross-attention over memory with src_mask, FFN; post- and pre-norm, "
            "T_tgt ≠ T_src, exact state_dict keys, gradients to x and memory")
    parts = {
        "post-norm (the paper): self-attention, cross-attention, FFN": 2,
        "pre-norm (norm_first=True)": 1,
        "the causal tgt_mask in the self-attention": 1,
        "the src_mask in the cross-attention": 1,
    }

    def cases(self, rng, hidden):
        post, pre, tgt, src = self.parts
        cases = [
            _decoder_case(rng, 1, 3, 4, 8, 2, 16, norm_first=False, masks=None, part=post,
                          label="post-norm, T_tgt=3, T_src=4, d_model=8, h=2, no masks"),
            _decoder_case(rng, 2, 4, 3, 8, 4, 32, norm_first=True, masks=None, part=pre,
                          label="pre-norm (norm_first=True), T_tgt=4, T_src=3, no masks"),
            _decoder_case(rng, 2, 4, 4, 8, 2, 16, norm_first=False, masks="tgt", part=tgt,
                          label="post-norm, a causal tgt_mask (1, 1, 4, 4) only, T_src=4"),
            _decoder_case(rng, 2, 4, 5, 8, 2, 16, norm_first=False, masks="src", part=src,
                          label="post-norm, a padding src_mask (2, 1, 1, 5) only"),
            _decoder_case(rng, 2, 3, 4, 8, 2, 16, norm_first=False, masks=None, backward=True, part=post,
                          label="gradients flow back to x and to memory"),
        ]
        if not hidden:
            return cases
        for i in range(4):
            h = int(rng.choice([1, 2, 4]))
            d_model, d_ff = h * int(rng.integers(2, 5)), int(rng.integers(4, 33))
            b, t_tgt, t_src = int(rng.integers(1, 4)), int(rng.integers(2, 7)), int(rng.integers(2, 7))
            nf = bool(i % 2)
            cases.append(_decoder_case(rng, b, t_tgt, t_src, d_model, h, d_ff, norm_first=nf,
                                       masks=None, part=pre if nf else post,
                                       label=f"random B={b}, T_tgt={t_tgt}, T_src={t_src}, d_model={d_model}, "
                                             f"h={h}, norm_first={nf}, no masks"))
        cases.append(_decoder_case(rng, 2, 3, 4, 8, 2, 16, norm_first=False, masks=None, dropout=0.1, part=post,
                                   label="dropout=0.1 in eval mode (off)"))
        for masks, part in (("tgt", tgt), ("src", src)):
            cases.append(_decoder_case(rng, 2, 5, 5, 8, 2, 16, norm_first=False, masks=masks, part=part,
                                       label=f"T_tgt = T_src = 5 (the masks have compatible shapes), "
                                             f"only the {masks}_mask"))
        cases.append(_decoder_case(rng, 2, 4, 4, 8, 2, 16, norm_first=False, masks="tgt", tgt_mask="decoder", part=tgt,
                                   label="a (B, 1, T, T) decoder mask (padding ∧ causal) as tgt_mask, T_src=4"))
        cases.append(_decoder_case(rng, 3, 4, 6, 8, 2, 16, norm_first=False, masks="src", part=src,
                                   label="a padding src_mask (3, 1, 1, 6), T_tgt=4"))
        cases.append(_decoder_case(rng, 2, 5, 5, 8, 2, 16, norm_first=True, masks=None, dropout=0.1, part=pre,
                                   label="pre-norm, T_tgt = T_src = 5, dropout=0.1 in eval mode, no masks"))
        return cases

    def judge(self, case, got, want):
        """Each part on its own: the parts about layer order (post-, pre-norm) run
        without masks; the ``tgt_mask`` part's cases have ``T_tgt = T_src`` and are
        judged on the self-attention alone, so an answer that also hands
        ``tgt_mask`` to the cross-attention (the ``src_mask`` part's mistake, whose
        own cases catch it) keeps this part."""
        try:
            return super().judge(case, got, want)
        except CheckFailure as failure:
            if not self._tgt_mask_also_in_cross(case, got, want):
                raise failure from None
            return ["the tgt_mask part is judged on the self-attention alone: your cross-attention also "
                    "applies tgt_mask (see the src_mask part)"]

    def _tgt_mask_also_in_cross(self, case, got, want) -> bool:
        """Whether ``got`` is the right layer with ``tgt_mask`` also applied in the
        cross-attention, on a case of the ``tgt_mask`` part (and only there)."""
        if self.part_of(case) != list(self.parts)[2] or got.raised is not None or "src_mask" in case.kwargs:
            return False
        with PROCESS_STATE:
            try:
                value = decoder_layer_variant(case, cross_mask="tgt").numpy()
            except Exception:  # noqa: BLE001 - masks whose shapes cannot meet (T_tgt ≠ T_src)
                return False
        if layer_close(value, _array(want.value)):
            return False
        other = Tensor(value)
        other.dtype = getattr(want.value, "dtype", str(value.dtype))
        try:
            super().judge(case, got, Result(value=other, attrs=want.attrs, probes=want.probes, grads=want.grads,
                                            args_after=want.args_after))
        except CheckFailure:
            return False
        return True

    def tolerated(self, case, want):
        """The two mask parts' cases (post-norm) accept the layer's order broken (pre-norm's
        formula, no residual, the norms in another order): the post-norm part states the
        order, these parts where each mask goes."""
        w = _array(want.value)
        if self.part_of(case) not in list(self.parts)[2:] or w is None or case.expect_error:
            return []
        results = []
        for flags in _DECODER_ORDER_MISTAKES:
            value = Tensor(decoder_layer_variant(case, **flags).numpy().astype(w.dtype))
            value.dtype = getattr(want.value, "dtype", str(w.dtype))
            results.append(dataclasses.replace(want, value=value))
        return results

    def raised_hint(self, case, got):
        raised = got.raised
        if raised is None or case.expect_error:
            return None
        if raised.get("phase") == "load_state_dict":
            return ("the parameters must be exactly self_attn.*, cross_attn.* (MultiHeadAttention), "
                    "feed_forward.linear{1,2}.* and norm{1,2,3}.{weight,bias} (a buffer of your own is fine).")
        t_tgt, t_src = _array(case.args[0]).shape[1], _array(case.args[1]).shape[1]
        if t_tgt != t_src and raised.get("phase") == "call":
            return ("it failed with T_tgt ≠ T_src: the cross-attention's queries come from x and its keys and "
                    "values from memory, self.cross_attn(x, memory, memory, src_mask); tgt_mask belongs to "
                    "the self-attention.")
        return None

    def diagnose(self, case, got, want):
        g, w = _array(got.value), _array(want.value)
        if g is None:
            return "forward must return a tensor of shape (B, T_tgt, d_model)."
        has_tgt, has_src = "tgt_mask" in case.kwargs, "src_mask" in case.kwargs
        same_len = _array(case.args[0]).shape[1] == _array(case.args[1]).shape[1]
        if (case.init or {}).get("norm_first"):  # the post-norm formula where pre-norm was asked for
            flipped = ("with norm_first=True your layer computed the post-norm formula: pre-norm normalises each "
                       "sub-layer's input and adds the raw x back, x = x + self_attn(norm1(x)); read "
                       "self.norm_first in forward.")
        else:
            flipped = "pre- and post-norm are swapped: norm_first=False (the paper) normalises after each residual sum."
        variants = [
            (flipped, dict(flip_norm_first=True)),
            ("the residual connections are missing: each sub-layer's input is added back.", dict(residual=False)),
            ("the norms are in the wrong order: norm1 after the self-attention, norm2 after the cross-attention, "
             "norm3 after the feed-forward network.", dict(norms=("norm1.", "norm3.", "norm2."))),
            ("the norms are in the wrong order: norm1 after the self-attention, norm2 after the cross-attention, "
             "norm3 after the feed-forward network.", dict(norms=("norm2.", "norm1.", "norm3."))),
            ("the cross-attention attends over x: its keys and values are the encoder output, "
             "self.cross_attn(x, memory, memory, src_mask).", dict(keys_from_x=True)),
        ]
        if has_tgt:
            variants.append(("the causal tgt_mask was ignored: the self-attention must not see later target tokens, "
                             "self.self_attn(x, x, x, tgt_mask).", dict(self_mask="none")))
        if has_src:
            variants.append(("the cross-attention did not use src_mask: it must not attend to source padding, "
                             "self.cross_attn(x, memory, memory, src_mask) (tgt_mask belongs to the "
                             "self-attention).", dict(cross_mask="none")))
        if same_len:
            variants.append(("memory and x are swapped in the cross-attention: the queries come from the "
                             "decoder, self.cross_attn(x, memory, memory, src_mask).", dict(swap_memory=True)))
            if has_tgt or has_src:
                variants += [
                    ("the cross-attention uses the target mask: it takes src_mask (source padding), the "
                     "self-attention takes tgt_mask.", dict(cross_mask="tgt")),
                    ("the masks are swapped: tgt_mask goes to the self-attention, src_mask to the "
                     "cross-attention.", dict(cross_mask="tgt", self_mask="src")),
                ]
        hint = match_layer_variants(g, w, case, decoder_layer_variant, variants)
        if hint:
            return hint
        if got.grads and want.grads and layer_close(g, w):
            if "1" in want.grads and "1" not in got.grads:
                return "no gradient reached memory: do not detach the encoder output."
            return "the output is right but a gradient is not: do not detach inside forward."
        return None


# --------------------------------------------------------------------------- Transformer


def _transformer_state(rng, init):
    """The state_dict of a reference Transformer built with a seed from ``rng``, as numpy
    arrays; LayerNorm γ and β are perturbed so that every norm matters."""
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    # the references when a case runs (trusted side only; they import torch)
    import solutions

    torch.manual_seed(int(rng.integers(0, 2**31)))
    model = solutions.Transformer(**init)
    state = {}
    for name, tensor in model.state_dict().items():
        value = tensor.detach().numpy().copy()
        if ".norm" in name or name.startswith(("encoder_norm", "decoder_norm")):
            value = value + (0.3 * rng.normal(size=value.shape)).astype(np.float32)
        state[name] = value
    return state


def _transformer_init(rng, *, share=False, norm_first=False, layers=(1, 1), dropout=0.1):
    num_heads = int(rng.choice([1, 2, 4]))
    src_vocab = int(rng.integers(20, 41))
    return {"src_vocab_size": src_vocab, "tgt_vocab_size": src_vocab if share else int(rng.integers(20, 41)),
            "d_model": 4 * num_heads * int(rng.integers(1, 3)), "num_heads": num_heads,
            "num_encoder_layers": layers[0], "num_decoder_layers": layers[1], "d_ff": int(rng.integers(16, 33)),
            "dropout": dropout, "max_len": 32, "share_embeddings": share, "norm_first": norm_first}


def _ids(rng, batch, length, vocab, lengths=True):
    ids = rng.integers(4, vocab, size=(batch, length)).astype(np.int64)
    if lengths:
        mask = random_padding(rng, batch, length)[:, 0, 0, :]
        ids[~mask] = 0
    return ids


def _transformer_case(rng, init, *, method="forward", label, part, batch=2, t_src=5, t_tgt=4, state=None,
                      masks=True):
    """A case of ``Transformer``'s ``method``; ``masks=False``: ``forward`` without masks (a
    part whose rule is not how forward routes them: sharing the embeddings)."""
    state = _transformer_state(rng, init) if state is None else state
    src = _ids(rng, batch, t_src, init["src_vocab_size"])
    tgt = _ids(rng, batch, t_tgt, init["tgt_vocab_size"])
    src_mask = (src != 0)[:, None, None, :]  # (B, 1, 1, T_src)
    tgt_mask = _causal(t_tgt) & (tgt != 0)[:, None, None, :]
    tgt_mask[..., 0] = True
    if method == "forward":
        args, kwargs = (Tensor(src), Tensor(tgt)), {"src_mask": Tensor(src_mask), "tgt_mask": Tensor(tgt_mask)}
        if not masks:
            kwargs = {}
    elif method == "encode":
        args, kwargs = (Tensor(src), Tensor(src_mask)), {}
    elif method == "decode":
        memory = rng.normal(size=(batch, t_src, init["d_model"])).astype(np.float32)
        args, kwargs = (Tensor(tgt), Tensor(memory), Tensor(src_mask), Tensor(tgt_mask)), {}
    else:  # project
        args, kwargs = (Tensor(rng.normal(size=(batch, t_tgt, init["d_model"])).astype(np.float32)),), {}
    return Case(init=init, state=state, method=method, args=args, kwargs=kwargs,
                probes=("state_dict_keys", "parameter_names"), label=label, part=part, rtol=1e-4, atol=1e-4)


def _unequal_vocab_case(rng, part):
    """``share_embeddings=True`` with two vocabulary sizes: the constructor must raise."""
    init = _transformer_init(rng, share=True)
    init["tgt_vocab_size"] = init["src_vocab_size"] + int(rng.integers(1, 10))
    src = _ids(rng, 2, 5, init["src_vocab_size"])
    tgt = _ids(rng, 2, 4, init["src_vocab_size"])
    return Case(init=init, args=(Tensor(src), Tensor(tgt)), expect_error=(ValueError,), part=part,
                label=f"share_embeddings=True with src_vocab_size={init['src_vocab_size']} ≠ "
                      f"tgt_vocab_size={init['tgt_vocab_size']}")


def transformer_variant(case, *, scale=True, src_positions=True, tgt_positions=True, cross_mask=True,
                        tgt_mask=True, final_norms=True, encoder_norm=True, decoder_norm=True):
    """A trusted Transformer pass with switches for the plausible mistakes
    (``final_norms=False``: neither stack's final norm; ``encoder_norm``,
    ``decoder_norm``: one stack's)."""
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    # the references when a case runs (trusted side only; they import torch)
    import solutions

    model = solutions.Transformer(**case.init)
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in case.state.items()})
    model.eval()
    d = case.init["d_model"]
    args = [torch.from_numpy(_array(a)) for a in case.args]
    kwargs = {k: torch.from_numpy(_array(v)) for k, v in case.kwargs.items()}

    def embed(module, ids, positions):
        x = module.embedding(ids) * (math.sqrt(d) if scale else 1.0)
        return model.positional(x) if positions else x

    def encode(src, src_mask):
        x = embed(model.src_embed, src, src_positions)
        for layer in model.encoder_layers:
            x = layer(x, src_mask)
        return model.encoder_norm(x) if model.norm_first and final_norms and encoder_norm else x

    def decode(tgt, memory, src_mask, t_mask):
        x = embed(model.tgt_embed, tgt, tgt_positions)
        for layer in model.decoder_layers:
            x = layer(x, memory, src_mask if cross_mask else None, t_mask if tgt_mask else None)
        return model.decoder_norm(x) if model.norm_first and final_norms and decoder_norm else x

    with torch.no_grad():
        if case.method == "encode":
            return encode(*args)
        if case.method == "decode":
            return decode(*args)
        if case.method == "project":
            return model.project(*args)
        src, tgt = args
        src_mask, t_mask = kwargs.get("src_mask"), kwargs.get("tgt_mask")
        return model.project(decode(tgt, encode(src, src_mask), src_mask, t_mask))


# The rules of encode and decode (switches of transformer_variant), each broken alone: the
# cases of forward and of the shared embeddings accept them (TransformerCheck.tolerated).
_ENCODE_DECODE_MISTAKES = (dict(src_positions=False), dict(tgt_positions=False), dict(encoder_norm=False),
                           dict(decoder_norm=False))


@register
class TransformerCheck(Exercise):
    """``Transformer(src_vocab_size, tgt_vocab_size, d_model, ...)``: encode, decode, project, forward."""

    name = "Transformer"
    chapter = CHAPTER
    kind = "class"
    what = ("forward/encode/decode/project with masks, post- and pre-norm, 1-2 layers, tied embeddings "
            "(one shared matrix), exact state_dict keys")
    parts = {
        "encode(src, src_mask)": 1,
        "decode(tgt, memory, src_mask, tgt_mask) and project": 1,
        "forward = project(decode(tgt, encode(src)))": 1,
        "share_embeddings=True ties one matrix": 1,
        "unequal vocabularies with share_embeddings raise ValueError": 1,
    }
    uses = ("DecoderLayer",)

    def cases(self, rng, hidden):
        encode, decode, forward, share, error = self.parts
        base = _transformer_init(rng)
        state = _transformer_state(rng, base)
        cases = [
            _transformer_case(rng, base, state=state, method="encode", part=encode,
                              label="encode(src, src_mask) → memory"),
            _transformer_case(rng, base, state=state, method="decode", part=decode,
                              label="decode(tgt, memory, src_mask, tgt_mask) → hidden"),
            _transformer_case(rng, base, state=state, part=forward,
                              label="forward: 2 sentences, T_src=5, T_tgt=4, with masks"),
            _transformer_case(rng, _transformer_init(rng, share=True), part=share, masks=False,
                              label="share_embeddings=True: one matrix"),
            _transformer_case(rng, base, state=state, method="project", part=decode,
                              label="project(hidden) → logits"),
            _unequal_vocab_case(rng, error),
        ]
        if not hidden:
            return cases
        for i in range(2):
            nf = bool(i)
            init = _transformer_init(rng, norm_first=nf, layers=(int(rng.integers(1, 3)), int(rng.integers(1, 3))))
            b, ts, tt = int(rng.integers(1, 4)), int(rng.integers(2, 8)), int(rng.integers(2, 8))
            cases.append(_transformer_case(rng, init, batch=b, t_src=ts, t_tgt=tt, part=forward,
                                           label=f"random config {init['num_encoder_layers']}+"
                                                 f"{init['num_decoder_layers']} layers, d_model={init['d_model']}, "
                                                 f"h={init['num_heads']}, norm_first={nf}, B={b}, "
                                                 f"T_src={ts}, T_tgt={tt}"))
        init = _transformer_init(rng, norm_first=True)
        state = _transformer_state(rng, init)
        cases.append(_transformer_case(rng, init, state=state, method="encode", part=encode,
                                       label="pre-norm encode: the encoder stack ends with encoder_norm"))
        cases.append(_transformer_case(rng, init, state=state, method="decode", part=decode,
                                       label="pre-norm decode: the decoder stack ends with decoder_norm"))
        shared = _transformer_init(rng, share=True, norm_first=True)
        cases.append(_transformer_case(rng, shared, part=share, masks=False,
                                       label="share_embeddings=True with norm_first=True"))
        cases.append(_unequal_vocab_case(rng, error))
        return cases

    def raised_hint(self, case, got):
        raised = got.raised
        if case.expect_error:
            return ("one matrix cannot serve two vocabularies: in __init__, when share_embeddings is True and "
                    "src_vocab_size != tgt_vocab_size, raise ValueError saying both sizes.")
        if raised is None:
            return None
        if raised.get("phase") == "load_state_dict":
            return ("the graders load the reference state_dict: src_embed, tgt_embed (TokenEmbedding), positional "
                    "(PositionalEncoding), encoder_layers, decoder_layers (nn.ModuleList), generator "
                    "(nn.Linear(d_model, tgt_vocab_size)) and, for norm_first=True, encoder_norm and decoder_norm.")
        return None

    def judge(self, case: Case, got: Result, want: Result) -> list[str]:
        # Shared parameters appear once in named_parameters(): compare how many there are,
        # not their names (which of the tied modules "owns" the matrix is free).
        got_names = got.probes.get("parameter_names")
        want_names = want.probes.get("parameter_names")
        if want_names is not None and got.raised is None and got_names is not None:
            if len(got_names) > len(want_names):
                raise CheckFailure(
                    f"the model has {len(got_names)} distinct parameter tensors, expected {len(want_names)} "
                    f"({case.label})\n  Hint: share_embeddings=True must tie the weights: the target "
                    "embedding and the generator use the source embedding's Parameter itself "
                    "(self.generator.weight = self.src_embed.embedding.weight), not a copy of its values.")
            if len(got_names) < len(want_names):
                raise CheckFailure(
                    f"the model has {len(got_names)} distinct parameter tensors, expected {len(want_names)} "
                    f"({case.label})\n  Hint: tie the embeddings only when share_embeddings=True.")
        strip = lambda r: Result(value=r.value, attrs=r.attrs,  # noqa: E731
                                 probes={k: v for k, v in r.probes.items() if k != "parameter_names"},
                                 grads=r.grads, args_after=r.args_after, raised=r.raised)
        return super().judge(case, strip(got), strip(want))

    def tolerated(self, case, want):
        """The cases of forward and of the shared embeddings accept encode's or decode's
        own rule broken (the positional encoding on one side, one stack's final norm):
        the encode and decode parts state those; forward's rule is how it composes them
        and routes the masks, sharing's the one matrix."""
        w = _array(want.value)
        if self.part_of(case) not in list(self.parts)[2:4] or w is None or case.expect_error:
            return []
        results = []
        for flags in _ENCODE_DECODE_MISTAKES:
            value = transformer_variant(case, **flags).numpy()
            if not layer_close(value, w):
                marker = Tensor(value.astype(w.dtype))
                marker.dtype = getattr(want.value, "dtype", str(w.dtype))
                results.append(dataclasses.replace(want, value=marker))
        return results

    def diagnose(self, case, got, want):
        g, w = _array(got.value), _array(want.value)
        if g is None:
            return f"{case.method} must return a tensor."
        variants = [
            ("the embeddings are not scaled: multiply them by √d_model (TokenEmbedding does).", dict(scale=False)),
            ("the positional encoding is missing on the target side: decode adds it to the target embeddings "
             "too.", dict(tgt_positions=False)),
            ("the positional encoding is missing on the source side: encode adds it to the source embeddings.",
             dict(src_positions=False)),
            ("the src_mask does not reach the decoder's cross-attention: pass it to every decoder layer.",
             dict(cross_mask=False)),
            ("the tgt_mask does not reach the decoder layers.", dict(tgt_mask=False)),
            # one stack's norm first: on an encode or decode case the two-stack variant is the same
            ("with norm_first=True the encoder stack ends with a final LayerNorm: encode returns "
             "self.encoder_norm(x).", dict(encoder_norm=False)),
            ("with norm_first=True the decoder stack ends with a final LayerNorm: decode returns "
             "self.decoder_norm(x).", dict(decoder_norm=False)),
            ("with norm_first=True each stack ends with a final LayerNorm (encoder_norm, decoder_norm).",
             dict(final_norms=False)),
        ]
        return match_layer_variants(g, w, case, transformer_variant, variants)


# --------------------------------------------------------------------------- count_parameters


def _linear(rng, bias=True):
    return Obj("torch.nn.Linear", {"in_features": int(rng.integers(1, 40)), "out_features": int(rng.integers(1, 40)),
                                   "bias": bias})


@register
class CountParameters(Exercise):
    """``count_parameters(model) -> int``: trainable parameters, shared tensors once."""

    name = "count_parameters"
    chapter = CHAPTER
    kind = "function"
    what = "elements of the distinct trainable parameters: tied weights once, frozen ones and buffers not at all"
    parts = {
        "the elements of every parameter, as an int": 2,
        "each trainable tensor once: no frozen ones, buffers, tied copies": 1,
    }

    def cases(self, rng, hidden):
        count, excluded = self.parts
        cases = [
            Case(args=(Obj("torch.nn.Linear", {"in_features": 3, "out_features": 2}),), part=count,
                 label="nn.Linear(3, 2): 3·2 weights + 2 biases"),
            Case(args=(Obj("torch.nn.Embedding", {"num_embeddings": 10, "embedding_dim": 4, "_freeze": True}),),
                 part=excluded, label="a frozen nn.Embedding (requires_grad=False): 0 trainable parameters"),
            Case(args=(Obj("solutions.PositionalEncoding", {"d_model": 8, "max_len": 50}),), part=excluded,
                 label="PositionalEncoding: a buffer pe of 400 numbers, no parameters"),
        ]
        # Weight tying without solutions.Transformer (withheld from this chapter's
        # sandbox): an embedding and an output projection sharing one matrix.
        vocab, width = (10, 4) if not hidden else (int(rng.integers(5, 30)), int(rng.integers(2, 9)))
        tied = Obj("torch.nn.ModuleList", {"modules": [
            Obj("torch.nn.Embedding", {"num_embeddings": vocab, "embedding_dim": width}),
            Obj("torch.nn.Linear", {"in_features": width, "out_features": vocab, "bias": False})]},
            tie=[("1.weight", "0.weight")])
        cases.append(Case(args=(tied,), part=excluded,
                          label=f"an embedding and an output layer tied to one ({vocab}, {width}) matrix: "
                                "the shared matrix counts once"))
        if not hidden:
            return cases
        for _ in range(2):
            cases.append(Case(args=(_linear(rng, bias=bool(rng.integers(0, 2))),), part=count,
                              label="a random nn.Linear"))
        d_model = 4 * int(rng.integers(1, 5))
        cases.append(Case(args=(Obj("solutions.MultiHeadAttention", {"d_model": d_model, "num_heads": 2}),),
                          part=count, label=f"MultiHeadAttention(d_model={d_model}, 2 heads): 4 (d² + d)"))
        cases.append(Case(args=(Obj("torch.nn.Transformer", {
            "d_model": 16, "nhead": 2, "num_encoder_layers": 1, "num_decoder_layers": 1, "dim_feedforward": 32,
            "batch_first": True}),), part=count, label="torch.nn.Transformer(d_model=16, 1 + 1 layers, d_ff=32)"))
        cases.append(Case(args=(Obj("torch.nn.BatchNorm1d", {"num_features": int(rng.integers(2, 9))}),),
                          part=excluded, label="BatchNorm1d: γ and β count, its running statistics (buffers) do not"))
        cases.append(Case(args=(Obj("torch.nn.ModuleList", {"modules": [
            _linear(rng), Obj("torch.nn.Embedding", {"num_embeddings": 7, "embedding_dim": 3, "_freeze": True}),
            Obj("torch.nn.LayerNorm", {"normalized_shape": 5}), Obj("torch.nn.BatchNorm1d", {"num_features": 4})]}),),
            part=excluded,
            label="a ModuleList: Linear, frozen Embedding, LayerNorm, BatchNorm1d (its running stats are buffers)"))
        return cases

    def tolerated(self, case, want):
        """The cases of "each trainable tensor once" accept the right count as a float:
        "as an int" is the rule of the first part, which states it."""
        _, excluded = self.parts
        if self.part_of(case) != excluded or case.expect_error or type(want.value) is not int:
            return []
        return [dataclasses.replace(want, value=float(want.value))]

    def diagnose(self, case, got, want):
        if not isinstance(got.value, int) or isinstance(got.value, bool):
            if isinstance(got.value, float) and got.value == want.value:
                return "return an int (sum of p.numel()), not a float."
            return "return a Python int: sum(p.numel() for p in ...), or .item() of a tensor."
        arrays = {}
        model = wire.decode(wire.encode(case.args[0], arrays), arrays)
        all_params = sum(p.numel() for p in model.parameters())
        with_duplicates = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad)
        with_buffers = sum(p.numel() for p in model.parameters() if p.requires_grad) + sum(
            b.numel() for b in model.buffers())
        state = sum(t.numel() for t in model.state_dict().values())
        tensors = len([p for p in model.parameters() if p.requires_grad])
        variants = [
            ("shared tensors are counted twice: a tied matrix is one Parameter; model.parameters() lists it "
             "once (state_dict() and named_parameters(remove_duplicate=False) list it per module).",
             with_duplicates),
            ("the state_dict holds buffers, frozen parameters and every tied name: count the tensors of "
             "model.parameters() with p.requires_grad instead.", state),
            ("frozen parameters (requires_grad=False) are not trainable: count only p.requires_grad.", all_params),
            ("buffers (e.g. pe, BatchNorm's running statistics) are not parameters: count model.parameters() "
             "only.", with_buffers),
            ("count the elements (p.numel()), not the tensors.", tensors),
        ]
        for hint, value in variants:
            if got.value == value and value != want.value:
                return hint
        return None
