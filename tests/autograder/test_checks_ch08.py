"""Tests of the chapter 8 checks: plausible wrong answers are rejected with a hint
that names the mistake, valid answers in other styles earn full marks, half-right
answers earn the parts they get right, a Transformer built on a wrong DecoderLayer
is graded with the reference in its place (that the reference passes and hidden inputs are
fresh: test_checks_registry.py)."""
import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import check_helpers
from check_helpers import cases_drawn_once  # noqa: F401 (a fixture: each seeded draw made once per process)
from check_helpers import accepted
from check_helpers import assert_regraded, notebook_namespace
import solutions
from autograder.checks import get_exercise
from autograder.checks.base import check_report, make_rng
from autograder.sync import solution_cell_source

pytestmark = pytest.mark.usefixtures("one_torch_thread", "cases_drawn_once")  # tests/conftest.py: tiny tensors, one thread

NAMES = ["DecoderLayer", "Transformer", "count_parameters"]

rejected = functools.partial(check_helpers.rejected, seed=17)
partly = functools.partial(check_helpers.partly, seed=17)

DEC_POST, DEC_PRE, DEC_TGT, DEC_SRC = get_exercise("DecoderLayer").parts
ENCODE, DECODE, FORWARD, SHARE, VOCAB_ERROR = get_exercise("Transformer").parts
COUNT, EXCLUDED = get_exercise("count_parameters").parts


def test_count_parameters_hidden_models_build_without_this_chapters_modules():
    """The grading sandbox of chapter 8 has no solutions.layers / solutions.model."""
    for case in get_exercise("count_parameters").cases(make_rng(hidden=True), hidden=True):
        factory = case.args[0].factory
        assert factory.startswith("torch.nn.") or factory in ("solutions.MultiHeadAttention",
                                                              "solutions.PositionalEncoding")


# --------------------------------------------------------------------------- DecoderLayer


class DecoderSublayers(nn.Module):
    """What every DecoderLayer answer here holds: the contract's modules (the reference's
    self-attention, cross-attention and feed-forward, norm1, norm2, norm3), a dropout and
    the norm_first flag. Each answer writes its own forward."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = solutions.MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = solutions.MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = solutions.PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first


def make_decoder(cross_mask="src", self_mask="tgt", swap_memory=False, norms=(1, 2, 3), residual=True):
    """A DecoderLayer answer, the reference's design with the named rule broken: the
    mask each attention gets (``"src"``, ``"tgt"`` or None), memory and x swapped in
    the cross-attention, the norms in another order, no residual connections. With
    the defaults it is right (test_part_isolation.py uses it too)."""
    class DecoderLayer(DecoderSublayers):
        def forward(self, x, memory, src_mask=None, tgt_mask=None):
            masks = {"src": src_mask, "tgt": tgt_mask, None: None}
            n1, n2, n3 = (getattr(self, f"norm{i}") for i in norms)
            keep = 1.0 if residual else 0.0

            def cross(q):
                if swap_memory:
                    return self.cross_attn(memory, q, q, masks[cross_mask])
                return self.cross_attn(q, memory, memory, masks[cross_mask])

            if self.norm_first:
                h = n1(x)
                x = keep * x + self.dropout(self.self_attn(h, h, h, masks[self_mask]))
                x = keep * x + self.dropout(cross(n2(x)))
                return keep * x + self.dropout(self.feed_forward(n3(x)))
            x = n1(keep * x + self.dropout(self.self_attn(x, x, x, masks[self_mask])))
            x = n2(keep * x + self.dropout(cross(x)))
            return n3(keep * x + self.dropout(self.feed_forward(x)))

    return DecoderLayer


def test_decoder_with_the_target_mask_in_cross_attention_is_rejected():
    rejected("DecoderLayer", make_decoder(cross_mask="tgt"), "tgt_mask belongs to the self-attention")


def test_decoder_with_memory_and_x_swapped_is_rejected():
    rejected("DecoderLayer", make_decoder(swap_memory=True), "T_tgt ≠ T_src")


def test_decoder_without_causal_mask_is_rejected():
    rejected("DecoderLayer", make_decoder(self_mask=None), "causal tgt_mask was ignored")


def test_decoder_without_src_mask_is_rejected():
    rejected("DecoderLayer", make_decoder(cross_mask=None), "did not use src_mask")


def test_decoder_with_norms_in_the_wrong_order_is_rejected():
    rejected("DecoderLayer", make_decoder(norms=(1, 3, 2)), "norms are in the wrong order")


def test_decoder_without_residuals_is_rejected():
    rejected("DecoderLayer", make_decoder(residual=False), "residual connections are missing")


def test_decoder_ignoring_the_src_mask_keeps_the_other_parts():
    partly("DecoderLayer", make_decoder(cross_mask=None), [DEC_POST, DEC_PRE, DEC_TGT], [DEC_SRC],
           "did not use src_mask")


def test_decoder_with_functional_dropout_and_separate_paths_passes():
    class TwoPaths(DecoderSublayers):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__(d_model, num_heads, d_ff, dropout, norm_first)
            self.p = dropout

        def _drop(self, t):
            return F.dropout(t, self.p, self.training)

        def forward(self, x, memory, src_mask=None, tgt_mask=None):
            if not self.norm_first:  # the paper: Add & Norm after each sub-layer
                x = self.norm1(x + self._drop(self.self_attn(x, x, x, tgt_mask)))
                x = self.norm2(x + self._drop(self.cross_attn(x, memory, memory, src_mask)))
                return self.norm3(x + self._drop(self.feed_forward(x)))
            h = self.norm1(x)
            x = x + self._drop(self.self_attn(h, h, h, tgt_mask))
            h = self.norm2(x)
            x = x + self._drop(self.cross_attn(h, memory, memory, src_mask))
            return x + self._drop(self.feed_forward(self.norm3(x)))

    accepted("DecoderLayer", TwoPaths)


def test_decoder_with_a_list_of_sublayers_passes():
    class Listed(DecoderSublayers):
        def forward(self, x, memory, src_mask=None, tgt_mask=None):
            steps = [
                (self.norm1, lambda h: self.self_attn(query=h, key=h, value=h, mask=tgt_mask)),
                (self.norm2, lambda h: self.cross_attn(query=h, key=memory, value=memory, mask=src_mask)),
                (self.norm3, self.feed_forward),
            ]
            for norm, sublayer in steps:
                x = x + self.dropout(sublayer(norm(x))) if self.norm_first else norm(x + self.dropout(sublayer(x)))
            return x

    accepted("DecoderLayer", Listed)


def test_a_different_valid_decoder_layer_passes():
    class Explicit(DecoderSublayers):
        def _add_norm(self, x, norm, fn):
            return x + self.dropout(fn(norm(x))) if self.norm_first else norm(x + self.dropout(fn(x)))

        def forward(self, x, memory, src_mask=None, tgt_mask=None):
            x = self._add_norm(x, self.norm1, lambda h: self.self_attn(h, h, h, mask=tgt_mask))
            x = self._add_norm(x, self.norm2, lambda h: self.cross_attn(h, memory, memory, mask=src_mask))
            return self._add_norm(x, self.norm3, self.feed_forward)

    accepted("DecoderLayer", Explicit)


# --------------------------------------------------------------------------- Transformer


class TokenEmbeddingUnscaled(nn.Module):
    """A TokenEmbedding without the √d_model scale (test_part_isolation.py uses it too)."""

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)

    def forward(self, ids):
        return self.embedding(ids)


def make_transformer(embedding=solutions.TokenEmbedding, tgt_positions=True, tie=True, validate=True):
    class Transformer(nn.Module):
        def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_encoder_layers=6,
                     num_decoder_layers=6, d_ff=2048, dropout=0.1, max_len=5000, share_embeddings=False,
                     norm_first=False):
            super().__init__()
            if validate and share_embeddings and src_vocab_size != tgt_vocab_size:
                raise ValueError(f"share_embeddings needs one vocabulary, got {src_vocab_size} and {tgt_vocab_size}")
            self.src_embed = embedding(src_vocab_size, d_model)
            self.tgt_embed = embedding(tgt_vocab_size, d_model)
            self.positional = solutions.PositionalEncoding(d_model, max_len, dropout)
            self.encoder_layers = nn.ModuleList(
                [solutions.EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_encoder_layers)])
            self.decoder_layers = nn.ModuleList(
                [solutions.DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_decoder_layers)])
            self.norm_first = norm_first
            if norm_first:
                self.encoder_norm, self.decoder_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.generator = nn.Linear(d_model, tgt_vocab_size)
            if share_embeddings and tie:
                self.tgt_embed.embedding.weight = self.src_embed.embedding.weight
                self.generator.weight = self.src_embed.embedding.weight

        def encode(self, src, src_mask=None):
            x = self.positional(self.src_embed(src))
            for layer in self.encoder_layers:
                x = layer(x, src_mask)
            return self.encoder_norm(x) if self.norm_first else x

        def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
            x = self.tgt_embed(tgt)
            x = self.positional(x) if tgt_positions else x
            for layer in self.decoder_layers:
                x = layer(x, memory, src_mask, tgt_mask)
            return self.decoder_norm(x) if self.norm_first else x

        def project(self, hidden):
            return self.generator(hidden)

        def forward(self, src, tgt, src_mask=None, tgt_mask=None):
            return self.project(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))

    return Transformer


def test_transformer_without_sqrt_d_model_is_rejected():
    rejected("Transformer", make_transformer(embedding=TokenEmbeddingUnscaled), "not scaled", "√d_model")


def test_transformer_with_positions_on_the_source_only_is_rejected():
    rejected("Transformer", make_transformer(tgt_positions=False), "missing on the target side")


def test_transformer_with_untied_weights_is_rejected():
    rejected("Transformer", make_transformer(tie=False), "must tie the weights")


def test_transformer_without_the_named_error_loses_only_that_part():
    partly("Transformer", make_transformer(validate=False), [ENCODE, DECODE, FORWARD, SHARE], [VOCAB_ERROR],
           "should raise ValueError", "src_vocab_size != tgt_vocab_size")


def test_transformer_with_untied_weights_loses_only_the_sharing():
    partly("Transformer", make_transformer(tie=False), [ENCODE, DECODE, FORWARD, VOCAB_ERROR], [SHARE],
           "must tie the weights")


def test_transformer_with_explicit_modules_passes():
    accepted("Transformer", make_transformer())


def test_transformer_with_functional_projection_and_reduce_passes():
    class Reduced(make_transformer()):
        """Ties the generator first, runs the stacks with functools.reduce, projects with F.linear."""

        def encode(self, src, src_mask=None):
            x = functools.reduce(lambda h, layer: layer(h, src_mask), self.encoder_layers,
                                 self.positional(self.src_embed(src)))
            return self.encoder_norm(x) if self.norm_first else x

        def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
            x = functools.reduce(lambda h, layer: layer(h, memory, src_mask, tgt_mask), self.decoder_layers,
                                 self.positional(self.tgt_embed(tgt)))
            return self.decoder_norm(x) if self.norm_first else x

        def project(self, hidden):
            return F.linear(hidden, self.generator.weight, self.generator.bias)

    accepted("Transformer", Reduced)


def test_transformer_with_other_attribute_names_is_rejected():
    class Renamed(make_transformer()):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.output = self.generator
            del self.generator

        def project(self, hidden):
            return self.output(hidden)

    rejected("Transformer", Renamed, "generator")


def test_a_different_valid_transformer_passes():
    class Subclassed(solutions.Transformer):
        """The same modules, its own forward pass written out."""

        def forward(self, src, tgt, src_mask=None, tgt_mask=None):
            memory = self.positional(self.src_embed.embedding(src) * math.sqrt(self.src_embed.d_model))
            for layer in self.encoder_layers:
                memory = layer(memory, src_mask)
            if self.norm_first:
                memory = self.encoder_norm(memory)
            return self.generator(self.decode(tgt, memory, src_mask, tgt_mask))

    accepted("Transformer", Subclassed)


# --------------------------------------------------------------------------- count_parameters


def test_count_parameters_counting_shared_tensors_twice_is_rejected_visibly():
    def per_name(model):
        return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad)

    rejected("count_parameters", per_name, "counted twice", hidden=False)


def test_count_parameters_from_the_state_dict_is_rejected():
    rejected("count_parameters", lambda model: sum(t.numel() for t in model.state_dict().values()), "buffers")


def test_count_parameters_counting_frozen_parameters_is_rejected():
    rejected("count_parameters", lambda model: sum(p.numel() for p in model.parameters()), "requires_grad")


def test_count_parameters_counting_tensors_is_rejected():
    rejected("count_parameters", lambda model: len([p for p in model.parameters() if p.requires_grad]), "numel")


def test_count_parameters_returning_a_tensor_is_rejected():
    def as_tensor(model):
        return torch.stack([torch.tensor(p.numel()) for p in model.parameters() if p.requires_grad]).sum() \
            if any(p.requires_grad for p in model.parameters()) else torch.tensor(0)

    rejected("count_parameters", as_tensor, "Python int")


def test_count_parameters_counting_frozen_parameters_keeps_the_count():
    partly("count_parameters", lambda model: sum(p.numel() for p in model.parameters()), [COUNT], [EXCLUDED],
           "requires_grad")


def test_count_parameters_by_named_parameters_passes():
    def by_name(model):
        total = 0
        for _, parameter in model.named_parameters():  # remove_duplicate=True: a tied tensor once
            if parameter.requires_grad:
                total += parameter.numel()
        return total

    accepted("count_parameters", by_name)


def test_count_parameters_through_parameters_to_vector_passes():
    def as_one_vector(model):
        trainable = [p for p in model.parameters() if p.requires_grad]
        if not trainable:
            return 0
        return int(torch.nn.utils.parameters_to_vector(trainable).numel())

    accepted("count_parameters", as_one_vector)


def test_a_different_valid_count_parameters_passes():
    def by_data_pointer(model):
        seen, total = set(), 0
        for module in model.modules():
            for p in module.parameters(recurse=False):
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    total += math.prod(p.shape)
        return total

    accepted("count_parameters", by_data_pointer)


# --------------------------------------------------------------------------- one mistake charged once

TRANSFORMER_SOURCE = solution_cell_source(solutions.Transformer)


def _notebook(*sources):
    """One namespace holding ``sources`` in order, as a notebook's cells share one."""
    return notebook_namespace({"nn": nn, "torch": torch, "F": F, "MultiHeadAttention": solutions.MultiHeadAttention,
                               "PositionwiseFeedForward": solutions.PositionwiseFeedForward,
                               "EncoderLayer": solutions.EncoderLayer, "TokenEmbedding": solutions.TokenEmbedding,
                               "PositionalEncoding": solutions.PositionalEncoding}, *sources)


def test_a_transformer_on_a_wrong_decoder_layer_gets_full_marks_and_the_note():
    # The reference's cell, its cross-attention over x instead of memory.
    wrong = solution_cell_source(solutions.DecoderLayer).replace("memory, memory, src_mask", "x, x, src_mask")
    ns = _notebook(wrong, TRANSFORMER_SOURCE)
    assert not check_report("DecoderLayer", ns["DecoderLayer"]).passed
    assert_regraded("Transformer", ns["Transformer"], "DecoderLayer", hidden=True)


def test_a_transformer_on_an_unfinished_decoder_layer_gets_full_marks_and_the_note():
    unfinished = """
        class DecoderLayer(nn.Module):
            def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
                super().__init__()
                raise NotImplementedError()
    """
    ns = _notebook(unfinished, TRANSFORMER_SOURCE)
    assert_regraded("Transformer", ns["Transformer"], "DecoderLayer")


def test_counting_a_tied_matrix_twice_loses_the_distinct_part_in_the_sandbox_path_too():
    """The tied model is built from torch modules alone (Obj(..., tie=...)), so the
    hidden check — which runs in the chapter's sandbox, without solutions.Transformer —
    catches a shared matrix counted twice."""
    def twice(model):
        return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad)

    partly("count_parameters", twice,
           earned=["the elements of every parameter, as an int"],
           missed=["each trainable tensor once: no frozen ones, buffers, tied copies"])
    rejected("count_parameters", twice, "tied", "shared", "once", any_word=True)
