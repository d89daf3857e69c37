"""Tests of the chapter 10 checks: plausible wrong decoders are rejected with a hint
that names the mistake, different valid decoders pass, hidden models are fresh."""
import functools
import pickle

import pytest
import torch
import torch.nn.functional as F

import solutions
from autograder.checks import get_exercise
from autograder.checks.base import make_rng
import check_helpers
from check_helpers import assert_reference_passes
from check_helpers import accepted, one_torch_thread  # noqa: F401 (one_torch_thread: autouse fixture)

NAMES = ["greedy_decode", "beam_search"]

rejected = functools.partial(check_helpers.rejected, seed=23)


def causal(t):
    return torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None]


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes_visible_and_hidden(name, capsys):
    assert_reference_passes(name, capsys)


@pytest.mark.parametrize("name", NAMES)
def test_hidden_cases_are_fresh_each_run(name):
    ex = get_exercise(name)
    first = ex.cases(make_rng(hidden=True), hidden=True)
    second = ex.cases(make_rng(hidden=True), hidden=True)
    assert len(first) > len(ex.cases(make_rng(hidden=False), hidden=False))
    fingerprint = lambda cases: pickle.dumps([(c.args[0].state, c.args[1:]) for c in cases])  # noqa: E731
    assert fingerprint(first) != fingerprint(second)


def test_torch_threads_are_restored():
    torch.set_num_threads(2)  # the autouse fixture restores the original count afterwards
    get_exercise("beam_search").cases(make_rng(hidden=False), hidden=False)
    assert torch.get_num_threads() == 2


# --------------------------------------------------------------------------- greedy_decode


def make_greedy(pad_after_eos=True, stop="all", extra_steps=0, keep_sos=True):
    def greedy_decode(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0):
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            ys = torch.full((src.size(0), 1), sos_id, dtype=torch.long)
            done = torch.zeros(src.size(0), dtype=torch.bool)
            for _ in range(max_len + extra_steps):
                logits = model.project(model.decode(ys, memory, src_mask, causal(ys.size(1))))[:, -1]
                token = logits.argmax(-1)
                if pad_after_eos:
                    token = torch.where(done, torch.full_like(token, pad_id), token)
                ys = torch.cat([ys, token[:, None]], 1)
                done |= token == eos_id
                if (stop == "all" and done.all()) or (stop == "first" and done.any()):
                    break
        return ys if keep_sos else ys[:, 1:]

    return greedy_decode


def test_greedy_without_padding_after_eos_is_rejected():
    rejected("greedy_decode", make_greedy(pad_after_eos=False), "must hold pad_id")


def test_greedy_stopping_at_the_first_eos_is_rejected():
    rejected("greedy_decode", make_greedy(stop="first"), "first sentence ended")


def test_greedy_without_early_stop_is_rejected():
    rejected("greedy_decode", make_greedy(stop="never"), "stop early")


def test_greedy_with_max_len_off_by_one_is_rejected():
    rejected("greedy_decode", make_greedy(extra_steps=1), "one step too many")
    rejected("greedy_decode", make_greedy(extra_steps=-1), "one step too few")


def test_greedy_without_sos_is_rejected():
    rejected("greedy_decode", make_greedy(keep_sos=False), "column 0 must be <sos>")


def test_a_different_valid_greedy_decode_passes():
    def with_lists(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0):
        """One list per sentence, padded at the end; the decoder mask hides the pads too."""
        memory = model.encode(src, src_mask).detach()
        rows = [[sos_id] for _ in range(src.size(0))]
        for _ in range(max_len):
            live = [i for i, r in enumerate(rows) if eos_id not in r[1:]]
            if not live:
                break
            ys = torch.tensor(rows)
            hidden = model.decode(ys, memory, src_mask, solutions.decoder_mask(ys, pad_id))
            best = model.project(hidden[:, -1]).argmax(-1).tolist()
            for i, r in enumerate(rows):
                r.append(best[i] if i in live else pad_id)
        return torch.tensor(rows, dtype=torch.long)

    accepted("greedy_decode", with_lists)


# --------------------------------------------------------------------------- beam_search


def make_beam(score="gnmt", keep_finished=True, first_finished=False):
    def beam_search(model, src, src_mask, beam_size, max_len, sos_id=1, eos_id=2, length_penalty=0.6):
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            beams = [([sos_id], 0.0)]
            finished = []

            def final(tokens, logp):
                n = len(tokens) - 1
                if score == "raw":
                    return logp
                return logp / ((5 + n) / 6) ** length_penalty

            for _ in range(max_len):
                ys = torch.tensor([b[0] for b in beams])
                hidden = model.decode(ys, memory.expand(len(beams), -1, -1), src_mask, causal(ys.size(1)))
                logp = F.log_softmax(model.project(hidden[:, -1]), -1)
                candidates = sorted(((s + logp[i, t].item(), beams[i][0] + [t]) for i, (_, s) in enumerate(beams)
                                     for t in range(logp.size(1))), reverse=True)[:2 * beam_size]
                beams = []
                for rank, (s, toks) in enumerate(candidates):
                    if toks[-1] == eos_id:
                        if keep_finished and rank < beam_size:
                            if first_finished:
                                return toks
                            finished.append((final(toks, s), toks))
                    elif len(beams) < beam_size:
                        beams.append((toks, s))
                if len(finished) >= beam_size or not beams:
                    break
            else:
                finished += [(final(t, s), t) for t, s in beams]
            return max(finished)[1]

    return beam_search


def test_beam_without_length_penalty_is_rejected():
    rejected("beam_search", make_beam(score="raw"), "length_penalty")


def test_beam_returning_the_first_finished_hypothesis_is_rejected():
    rejected("beam_search", make_beam(first_finished=True), "first hypothesis that ended")


def test_beam_dropping_finished_hypotheses_is_rejected():
    rejected("beam_search", make_beam(keep_finished=False), "must be kept as finished")


def test_beam_that_is_greedy_is_rejected():
    def greedy(model, src, src_mask, beam_size, max_len, sos_id=1, eos_id=2, length_penalty=0.6):
        return solutions.greedy_decode(model, src, src_mask, max_len, sos_id, eos_id)[0].tolist()

    rejected("beam_search", greedy, "greedy answer")


def test_beam_returning_a_tensor_is_rejected():
    def tensor(*args, **kwargs):
        return torch.tensor(solutions.beam_search(*args, **kwargs))

    rejected("beam_search", tensor, "list of ints")


def test_a_different_valid_beam_search_passes():
    accepted("beam_search", make_beam())
