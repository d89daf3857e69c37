"""The value a regrade's reference may send back is the one its call's arguments give
(``autograder.answer_shapes``): predicted from the call alone, it admits what the
references in ``solutions`` really return and nothing of another container, shape or dtype.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import solutions
from autograder import answer_shapes
from autograder.wire import WireError, encode


def _call(*args, **kwargs) -> tuple[dict, dict]:
    arrays: dict = {}
    return {"args": encode(list(args), arrays), "kwargs": encode(dict(kwargs), arrays)}, arrays


def _admitted(name: str, call: tuple[dict, dict], value) -> None:
    data, arrays = call
    expected = answer_shapes.predict(name, data, arrays)
    answer_arrays: dict = {}
    answer_shapes.check_value(expected, encode(value, answer_arrays), answer_arrays)


def test_the_signatures_are_the_references():
    for name, parameters in answer_shapes.SIGNATURES.items():
        assert tuple(inspect.signature(getattr(solutions, name)).parameters) == parameters, name


def _model():
    torch.manual_seed(0)
    return solutions.Transformer(14, 11, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                 d_ff=16, dropout=0.0, max_len=64).eval()


CALLS = {
    "sinusoidal_positional_encoding": [((7, 6), {}), ((), {"max_len": 3, "d_model": 4})],
    "softmax": [((np.random.default_rng(0).normal(size=(2, 5)),), {"axis": 0}), (([1, 2, 3],), {}),
                ((torch.randn(3, 4),), {})],
    "scaled_dot_product_attention": [((np.ones((2, 3, 4)), np.ones((5, 4)), np.ones((5, 6))), {}),
                                     ((np.ones((3, 4)), np.ones((1, 2, 5, 4)), np.ones((5, 2))), {})],
    "split_heads": [((torch.randn(2, 3, 8), 4), {}), ((), {"x": torch.randn(1, 2, 6).double(), "num_heads": 3})],
    "merge_heads": [((torch.randn(2, 4, 3, 2),), {})],
    "padding_mask": [((torch.tensor([[5, 0, 3]]),), {"pad_id": 3})],
    "causal_mask": [((5,), {})],
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_references_value_is_admitted(name):
    for args, kwargs in CALLS[name]:
        _admitted(name, _call(*args, **kwargs), getattr(solutions, name)(*args, **kwargs))


def test_greedy_decodes_value_is_admitted_whatever_step_it_stops_at():
    model = _model()
    src = torch.tensor([[5, 6, 7], [8, 0, 0]])
    for max_len in (1, 4, 9):
        call = _call({"model": 0}, src, solutions.padding_mask(src), max_len)
        _admitted("greedy_decode", call, solutions.greedy_decode(model, src, solutions.padding_mask(src), max_len))
    with pytest.raises(WireError, match="shape"):
        _admitted("greedy_decode", _call(0, src, None, 2), torch.ones(2, 4, dtype=torch.long))  # 4 > 2 + 1
    with pytest.raises(WireError, match="dtype"):
        _admitted("greedy_decode", _call(0, src, None, 2), torch.ones(2, 3, dtype=torch.int32))


def test_a_modules_value_keeps_its_inputs_rows_and_a_linears_width():
    arrays: dict = {}
    x = torch.randn(2, 3, 8)
    data = {"op": "call", "args": encode([x], arrays), "kwargs": {"__dict__": []},
            "state": encode({"weight": torch.randn(16, 8), "bias": torch.randn(16)}, arrays)}
    expected = answer_shapes.predict("PositionwiseFeedForward", data, arrays)  # the part linear1
    assert expected.shape == (2, 3, 16)
    ok: dict = {}
    answer_shapes.check_value(expected, encode(torch.randn(2, 3, 16), ok), ok)
    for wrong in (torch.randn(2, 3, 8), torch.randn(3, 16), np.ones((2, 3, 16), np.float32),
                  torch.ones(2, 3, 16, dtype=torch.long), (torch.randn(2, 3, 16),)):
        bad: dict = {}
        with pytest.raises(WireError):
            answer_shapes.check_value(expected, encode(wrong, bad), bad)


def test_anything_else_is_refused():
    wrong = {
        "softmax": (_call(np.ones((2, 3))), np.ones((3, 2))),
        "scaled_dot_product_attention": (_call(np.ones((2, 4)), np.ones((3, 4)), np.ones((3, 5))),
                                         (np.ones((2, 5)),)),  # one of the two
        "split_heads": (_call(torch.randn(2, 3, 8), 4), np.ones((2, 4, 3, 2), np.float32)),  # an array, not a tensor
        "causal_mask": (_call(3), torch.ones(1, 1, 3, 3)),  # floats, not a mask
        "padding_mask": (_call(torch.tensor([[1, 2]])), torch.ones(1, 1, 1, 2, dtype=torch.bool).numpy()),
    }
    for name, (call, value) in wrong.items():
        with pytest.raises(WireError):
            _admitted(name, call, value)
    # Arguments the contract gives no value (the reference refuses them): no value passes.
    for name, call in {"sinusoidal_positional_encoding": _call(4, 5), "split_heads": _call(torch.randn(2, 3, 8), 3),
                       "causal_mask": _call(True), "softmax": _call("text"), "merge_heads": _call(torch.ones(2, 3)),
                       "no_such_reference": _call(np.ones(3))}.items():
        with pytest.raises(WireError, match="the reference must refuse"):
            _admitted(name, call, np.ones(3))
