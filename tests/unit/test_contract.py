"""The exercise contract (EXERCISES.md, chapters 1-8) as the package exposes it.

Every graded object must be importable from ``solutions`` with the contract's
parameter names and defaults, and its source must be copyable into a notebook
solution cell: docstring first, and no module-level name other than ``math``,
``np``, ``torch``, ``nn``, ``F``, builtins and other contract objects.
"""
import ast
import builtins
import dis
import inspect
import math
import textwrap
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solutions

EMPTY = inspect.Parameter.empty

# name -> {callable: [(parameter, default or EMPTY), ...]}; "" is the function or class itself
CONTRACT = {
    # 1 · Why not RNNs?
    "rnn_forward": {"": [("x", EMPTY), ("h0", EMPTY), ("W_xh", EMPTY), ("W_hh", EMPTY), ("b_h", EMPTY)]},
    "hidden_state_jacobian_norms": {"": [("H", EMPTY), ("W_hh", EMPTY)]},
    # 2 · Tokens and embeddings
    "build_vocab": {
        "": [("sentences", EMPTY), ("min_freq", 1), ("specials", ("<pad>", "<sos>", "<eos>", "<unk>"))]
    },
    "encode": {"": [("sentence", EMPTY), ("vocab", EMPTY)]},
    "learn_bpe": {"": [("corpus", EMPTY), ("num_merges", EMPTY)]},
    "bpe_tokenize": {"": [("word", EMPTY), ("merges", EMPTY)]},
    "one_hot": {"": [("ids", EMPTY), ("vocab_size", EMPTY)]},
    "cosine_similarity": {"": [("a", EMPTY), ("b", EMPTY)]},
    "TokenEmbedding": {"": [("vocab_size", EMPTY), ("d_model", EMPTY)], "forward": [("ids", EMPTY)]},
    # 3 · Positional encoding
    "sinusoidal_positional_encoding": {"": [("max_len", EMPTY), ("d_model", EMPTY)]},
    "PositionalEncoding": {
        "": [("d_model", EMPTY), ("max_len", 5000), ("dropout", 0.1)],
        "forward": [("x", EMPTY)],
    },
    "relative_position_matrix": {"": [("k", EMPTY), ("d_model", EMPTY)]},
    # 4 · Self-attention
    "softmax": {"": [("x", EMPTY), ("axis", -1)]},
    "scaled_dot_product_attention": {"": [("q", EMPTY), ("k", EMPTY), ("v", EMPTY)]},
    "self_attention": {"": [("x", EMPTY), ("W_q", EMPTY), ("W_k", EMPTY), ("W_v", EMPTY)]},
    # 5 · Multi-head attention
    "split_heads": {"": [("x", EMPTY), ("num_heads", EMPTY)]},
    "merge_heads": {"": [("x", EMPTY)]},
    "MultiHeadAttention": {
        "": [("d_model", EMPTY), ("num_heads", EMPTY), ("dropout", 0.0)],
        "forward": [("query", EMPTY), ("key", EMPTY), ("value", EMPTY), ("mask", None)],
    },
    # 6 · Masking
    "padding_mask": {"": [("ids", EMPTY), ("pad_id", 0)]},
    "causal_mask": {"": [("size", EMPTY)]},
    "decoder_mask": {"": [("tgt_ids", EMPTY), ("pad_id", 0)]},
    "masked_softmax": {"": [("scores", EMPTY), ("mask", EMPTY)]},
    # 7 · Add & Norm and the feed-forward layer
    "layer_norm": {"": [("x", EMPTY), ("gamma", EMPTY), ("beta", EMPTY), ("eps", 1e-5)]},
    "PositionwiseFeedForward": {
        "": [("d_model", EMPTY), ("d_ff", EMPTY), ("dropout", 0.0)],
        "forward": [("x", EMPTY)],
    },
    "ResidualSublayer": {
        "": [("d_model", EMPTY), ("dropout", 0.0), ("norm_first", False)],
        "forward": [("x", EMPTY), ("sublayer", EMPTY)],
    },
    "EncoderLayer": {
        "": [("d_model", EMPTY), ("num_heads", EMPTY), ("d_ff", EMPTY), ("dropout", 0.0), ("norm_first", False)],
        "forward": [("x", EMPTY), ("src_mask", None)],
    },
    # 8 · The full Transformer
    "DecoderLayer": {
        "": [("d_model", EMPTY), ("num_heads", EMPTY), ("d_ff", EMPTY), ("dropout", 0.0), ("norm_first", False)],
        "forward": [("x", EMPTY), ("memory", EMPTY), ("src_mask", None), ("tgt_mask", None)],
    },
    "Transformer": {
        "": [
            ("src_vocab_size", EMPTY),
            ("tgt_vocab_size", EMPTY),
            ("d_model", 512),
            ("num_heads", 8),
            ("num_encoder_layers", 6),
            ("num_decoder_layers", 6),
            ("d_ff", 2048),
            ("dropout", 0.1),
            ("max_len", 5000),
            ("share_embeddings", False),
            ("norm_first", False),
        ],
        "forward": [("src", EMPTY), ("tgt", EMPTY), ("src_mask", None), ("tgt_mask", None)],
        # no defaults fixed by the contract for these: names only
        "encode": [("src", None), ("src_mask", None)],
        "decode": [("tgt", None), ("memory", None), ("src_mask", None), ("tgt_mask", None)],
        "project": [("hidden", None)],
    },
    "count_parameters": {"": [("model", EMPTY)]},
}
NAMES_ONLY = {("Transformer", "encode"), ("Transformer", "decode"), ("Transformer", "project")}
ALLOWED_GLOBALS = {"math": math, "np": np, "torch": torch, "nn": nn, "F": F}


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_contract_object_is_exported_with_its_signature(name):
    assert name in solutions.__all__
    obj = getattr(solutions, name)
    for member, expected in CONTRACT[name].items():
        target = obj if not member else getattr(obj, member)
        parameters = list(inspect.signature(target).parameters.values())
        if inspect.isclass(obj) or member:
            parameters = [p for p in parameters if p.name != "self"]
        assert [p.name for p in parameters] == [n for n, _ in expected], f"{name}.{member}"
        if (name, member) not in NAMES_ONLY:
            assert [p.default for p in parameters] == [d for _, d in expected], f"{name}.{member}"


def global_names(code):
    """Module-level names a code object (and the functions nested in it) reads."""
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names


def functions_of(obj):
    if inspect.isfunction(obj):
        return [obj]
    return [v for v in vars(obj).values() if inspect.isfunction(v)]


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_contract_source_can_become_a_solution_cell(name):
    obj = getattr(solutions, name)
    source = inspect.getsource(obj)
    assert source.startswith("def " if inspect.isfunction(obj) else "class ")
    assert inspect.getdoc(obj), f"{name} needs a docstring"
    first = ast.parse(textwrap.dedent(source)).body[0].body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant), f"{name}: docstring first"
    module_globals = vars(inspect.getmodule(obj))
    for function in functions_of(obj):
        for used in global_names(function.__code__):
            if used in ALLOWED_GLOBALS:
                assert module_globals[used] is ALLOWED_GLOBALS[used], f"{name} uses {used} bound to something else"
            else:
                assert used in CONTRACT or hasattr(builtins, used), f"{name} uses the module-level name {used!r}"
    if inspect.isclass(obj):
        methods = [m for m in vars(obj) if inspect.isfunction(vars(obj)[m])]
        assert methods[:2] == ["__init__", "forward"], f"{name}: __init__ then forward"


def test_every_public_object_of_my_modules_is_re_exported():
    for module in (
        solutions.rnn,
        solutions.tokens,
        solutions.embeddings,
        solutions.positional,
        solutions.attention,
        solutions.multihead,
        solutions.masking,
        solutions.layers,
        solutions.model,
    ):
        for name in module.__all__:
            assert getattr(solutions, name) is getattr(module, name)
            assert name in solutions.__all__
    assert len(solutions.__all__) == len(set(solutions.__all__))
