"""Tests of the chapter 10 checks: plausible wrong decoders are rejected with a hint
that names the mistake, valid decoders in other styles earn full marks, half-right
decoders earn the parts they get right, a beam search that calls a wrong greedy
decoder is graded with the reference in its place (the reference and fresh hidden
models: test_checks_registry.py)."""
import functools

import pytest
import torch
import torch.nn.functional as F

import solutions
from autograder.checks import get_exercise
from autograder.checks.base import check_report, make_rng
import check_helpers
from check_helpers import cases_drawn_once  # noqa: F401 (a fixture: each seeded draw made once per process)
from check_helpers import accepted
from check_helpers import assert_regraded, notebook_namespace

pytestmark = pytest.mark.usefixtures("one_torch_thread", "cases_drawn_once")  # tests/conftest.py: tiny tensors, one thread

NAMES = ["greedy_decode", "beam_search"]

rejected = functools.partial(check_helpers.rejected, seed=23)
partly = functools.partial(check_helpers.partly, seed=23)

STEPS, PAD_AFTER_EOS, STOP, SPECIAL_IDS = get_exercise("greedy_decode").parts
BEAM, BEAM_ONE, PENALTY, FINISHED = get_exercise("beam_search").parts


def causal(t):
    return torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None]


def test_torch_threads_are_restored():
    torch.set_num_threads(2)  # one_torch_thread (tests/conftest.py) restores the original count afterwards
    get_exercise("beam_search").cases(make_rng(hidden=False), hidden=False)
    assert torch.get_num_threads() == 2


# --------------------------------------------------------------------------- greedy_decode


def make_greedy(pad_after_eos=True, stop="all", extra_steps=0, keep_sos=True, position=-1):
    def greedy_decode(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0):
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            ys = torch.full((src.size(0), 1), sos_id, dtype=torch.long)
            done = torch.zeros(src.size(0), dtype=torch.bool)
            for _ in range(max_len + extra_steps):
                logits = model.project(model.decode(ys, memory, src_mask, causal(ys.size(1))))[:, position]
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


def test_greedy_without_early_stop_loses_only_the_stop():
    partly("greedy_decode", make_greedy(stop="never"), [STEPS, PAD_AFTER_EOS, SPECIAL_IDS], [STOP], "stop early")


def test_greedy_without_padding_after_eos_loses_only_the_padding_part():
    for hidden in (False, True):
        report = partly("greedy_decode", make_greedy(pad_after_eos=False), [STEPS, STOP, SPECIAL_IDS],
                        [PAD_AFTER_EOS], "must hold pad_id", hidden=hidden)
        assert report.score == 4


def test_greedy_reading_the_first_position_loses_only_the_steps_part_with_a_hint():
    for hidden in (False, True):
        report = partly("greedy_decode", make_greedy(position=0), [PAD_AFTER_EOS, STOP, SPECIAL_IDS], [STEPS],
                        "logits of the first position", hidden=hidden)
        assert "stop early" not in report.render("greedy_decode").split("Hint:", 1)[-1]


def test_greedy_stopping_at_the_first_eos_loses_only_the_stop_part():
    partly("greedy_decode", make_greedy(stop="first"), [STEPS, PAD_AFTER_EOS, SPECIAL_IDS], [STOP],
           "first sentence ended")


def test_greedy_with_the_tensor_loop_passes():
    accepted("greedy_decode", make_greedy())


def test_greedy_into_a_preallocated_tensor_passes():
    def preallocated(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0):
        B = src.size(0)
        ys = torch.full((B, max_len + 1), pad_id, dtype=torch.long)  # (B, max_len + 1)
        ys[:, 0] = sos_id
        alive = torch.ones(B, dtype=torch.bool)
        with torch.inference_mode():
            memory = model.encode(src, src_mask)
            t = 0
            while t < max_len and alive.any():
                t += 1
                prefix = ys[:, :t]  # (B, t)
                tgt_mask = torch.ones(t, t).tril().bool().view(1, 1, t, t)
                logits = model.project(model.decode(prefix, memory, src_mask, tgt_mask))  # (B, t, V)
                ys[:, t] = torch.where(alive, logits[:, -1].argmax(-1), torch.tensor(pad_id))
                alive &= ys[:, t] != eos_id
        return ys[:, :t + 1].clone()

    accepted("greedy_decode", preallocated)


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
                n = len(tokens) if score == "with_sos" else len(tokens) - 1
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


def test_beam_counting_sos_in_the_penalty_loses_the_penalty_part_in_every_draw():
    """The prompt fixes len (the generated tokens, <sos> not counted): the visible
    check and every hidden draw hold a case that decides it."""
    for hidden, seed in ((False, None), (True, 1), (True, 2), (True, 3)):
        report = partly("beam_search", make_beam(score="with_sos"), [BEAM, BEAM_ONE, FINISHED], [PENALTY],
                        "counts the generated tokens", hidden=hidden, seed=seed)
        assert report.score == 4


def test_beam_without_length_penalty_loses_the_penalty_part():
    report = partly("beam_search", make_beam(score="raw"), [BEAM, BEAM_ONE, FINISHED], [PENALTY], "length_penalty")
    assert report.score == 4


def shrinking_beam(model, src, src_mask, beam_size, max_len, sos_id=1, eos_id=2, length_penalty=0.6):
    """Another sound bookkeeping: the k - (finished so far) best extensions each step;
    one that ends in <eos> leaves the beam as a finished hypothesis."""
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        live = [([sos_id], 0.0)]
        done = []
        for step in range(1, max_len + 1):
            ys = torch.tensor([tokens for tokens, _ in live])
            hidden = model.decode(ys, memory.expand(len(live), -1, -1), src_mask, causal(ys.size(1)))
            logp = F.log_softmax(model.project(hidden[:, -1]).float(), dim=-1)  # (k, V)
            totals = torch.tensor([score for _, score in live])[:, None] + logp
            best = totals.flatten().topk(beam_size - len(done))
            extended = []
            for score, index in zip(best.values.tolist(), best.indices.tolist()):
                row, token = divmod(index, logp.size(1))
                tokens = live[row][0] + [token]
                if token == eos_id:
                    done.append((score / ((5 + step) / 6) ** length_penalty, tokens))
                else:
                    extended.append((tokens, score))
            live = extended
            if len(done) >= beam_size or not live:
                break
        else:
            done += [(score / ((5 + max_len) / 6) ** length_penalty, tokens) for tokens, score in live]
        return max(done, key=lambda item: item[0])[1]


def test_beam_with_a_shrinking_beam_passes():
    accepted("beam_search", shrinking_beam)


def test_beam_calling_greedy_for_beam_size_one_passes():
    def via_greedy(model, src, src_mask, beam_size, max_len, sos_id=1, eos_id=2, length_penalty=0.6):
        if beam_size == 1:
            row = solutions.greedy_decode(model, src, src_mask, max_len, sos_id, eos_id)[0].tolist()
            return row[: row.index(eos_id) + 1] if eos_id in row[1:] else row
        return make_beam()(model, src, src_mask, beam_size, max_len, sos_id, eos_id, length_penalty)

    accepted("beam_search", via_greedy)


# --------------------------------------------------------------------------- one mistake charged once

BEAM_SOURCE = """
def beam_search(model, src, src_mask, beam_size, max_len, sos_id=1, eos_id=2, length_penalty=0.6):
    if beam_size == 1:
        row = greedy_decode(model, src, src_mask, max_len, sos_id, eos_id)[0].tolist()
        return row[: row.index(eos_id) + 1] if eos_id in row[1:] else row
    return reference_beam(model, src, src_mask, beam_size, max_len, sos_id, eos_id, length_penalty)
"""


def _notebook(*sources):
    """One namespace holding ``sources`` in order, as a notebook's cells share one."""
    return notebook_namespace({"torch": torch, "F": F, "causal": causal, "reference_beam": make_beam()}, *sources)


def test_a_beam_search_on_an_unfinished_greedy_decode_gets_full_marks_and_the_note():
    ns = _notebook("""
        def greedy_decode(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0):
            raise NotImplementedError()
    """, BEAM_SOURCE)
    assert_regraded("beam_search", ns["beam_search"], "greedy_decode")


def test_a_beam_search_on_a_wrong_greedy_decode_gets_full_marks_and_the_note():
    ns = _notebook("""
        def greedy_decode(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0):
            ys = torch.full((src.size(0), 1), sos_id, dtype=torch.long)
            memory = model.encode(src, src_mask)
            for _ in range(max_len):
                logits = model.project(model.decode(ys, memory, src_mask, causal(ys.size(1))))
                ys = torch.cat([ys, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
                if (ys[:, 1:] == eos_id).any(dim=1).all():
                    break
            return ys[:, 1:]  # <sos> dropped
    """, BEAM_SOURCE)
    assert not check_report("greedy_decode", ns["greedy_decode"]).passed
    assert_regraded("beam_search", ns["beam_search"], "greedy_decode", hidden=True, seed=23)
