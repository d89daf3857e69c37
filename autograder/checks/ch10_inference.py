"""Checks of chapter 10, inference: ``greedy_decode`` and ``beam_search``.

The contract is ``shared/EXERCISES.md`` section 10; the references are in
``solutions/decoding.py`` ("Attention Is All You Need", sections 3.2.3 and 6.1;
the length penalty is Wu et al., 2016, equation 14).

The model of every case is a small random ``solutions.Transformer`` passed as an
``Obj`` (built from its ``state_dict`` inside the runner; ``solutions.model`` is
importable when this chapter is graded). ``cases()`` biases the generator's
``<eos>`` logit so that sentences end at different steps, and for beam search it
picks models on which the search matters (beam ≠ greedy, penalty ≠ no penalty)
and on which another sound beam-search bookkeeping finds the same hypothesis, so
a correct answer never depends on details the contract leaves open. The
diagnoses rerun a trusted decoder with one plausible mistake at a time (no padding
after ``<eos>``, stopping at the first ``<eos>``, ``max_len ± 1`` steps, no
length penalty, finished hypotheses dropped, ...) and name the one that matches.

Each exercise's points are split over named parts (``parts``). Greedy cases are
drawn so that each part's cases isolate one rule (no sentence ends / some end /
all end early / other ids); the beam-search cases of the other parts use models
on which the length penalty does not change the winner. ``beam_search`` may call
the student's ``greedy_decode`` for ``beam_size=1`` (``uses``).
"""
from __future__ import annotations

import contextlib

import numpy as np

from .base import PROCESS_STATE, Case, CheckFailure, Exercise, Obj, Tensor, register
from .base import as_array as _array

CHAPTER = "10_inference"


class _DecodingExercise(Exercise):
    """Decoding exercises: cases, reference results and hints computed on one torch
    thread (small models decode faster without a thread pool), and a hint when a call
    raised inside the model."""

    def cases(self, rng, hidden):
        with _one_thread():
            return self._cases(rng, hidden)

    def diagnose(self, case, got, want):
        with _one_thread():
            return self._diagnose(case, got, want)

    def expected(self, case):
        with _one_thread():  # the reference's decoding passes are as tiny as the answer's
            return super().expected(case)

    def judge(self, case, got, want):
        """Each part on its own: a case of one part also accepts the answer that is right
        but for one mistake another part charges (:meth:`_other_part_mistake`): a sentence
        not padded after its <eos> costs greedy decoding's padding part, not its stopping
        part; returning the first hypothesis to end costs beam search's finished-hypotheses
        part, not its penalty part."""
        try:
            return super().judge(case, got, want)
        except CheckFailure as failure:
            other = self._other_part_mistake(case, got, want)
            if other is None:
                raise failure from None
            return [f"the part {self.part_of(case)!r} was judged apart from the mistake that the part "
                    f"{other!r} charges"]

    def _other_part_mistake(self, case, got, want) -> str | None:
        """The name of another part one of whose mistakes ``got`` equals exactly, or ``None``."""
        raise NotImplementedError

    def raised_hint(self, case, got):
        raised = got.raised
        if raised is None or case.expect_error:
            return None
        message = raised.get("message", "")
        if "mask" in message or "size" in message or "shape" in message:
            return ("a shape error inside the model: decode(ys, memory, src_mask, tgt_mask) needs the whole "
                    "prefix ys (B, t) and a causal tgt_mask (1, 1, t, t); take the logits of the last position.")
        return None


@contextlib.contextmanager
def _one_thread():
    """Run the many tiny decoding passes on one thread (restored after): on a busy machine
    torch's thread pool costs more than these (B, t, 16) tensors take to compute."""
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# --------------------------------------------------------------------------- models


def _model_init(rng, layers=1):
    num_heads = int(rng.choice([1, 2]))
    return {"src_vocab_size": int(rng.integers(12, 31)), "tgt_vocab_size": int(rng.integers(8, 16)),
            "d_model": 8 * num_heads, "num_heads": num_heads, "num_encoder_layers": 1,
            "num_decoder_layers": layers, "d_ff": 16, "dropout": 0.1, "max_len": 64}


def _model_state(rng, init, never=(0, 1)):
    """The state_dict (numpy) of a seeded reference Transformer with sharper output logits;
    like a trained model it never predicts the ids in ``never`` (<pad>, <sos>)."""
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    # the references when a case runs (trusted side only; they import torch)
    import solutions

    torch.manual_seed(int(rng.integers(0, 2**31)))
    model = solutions.Transformer(**init)
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    state["generator.weight"] = state["generator.weight"] * np.float32(3.0)  # confident, tie-free arg-max
    for token in never:
        state["generator.bias"][token] -= np.float32(30.0)
    return state


def _build(init, state):
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    # the references when a case runs (trusted side only; they import torch)
    import solutions

    model = solutions.Transformer(**init)
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in state.items()})
    return model.eval()


def _with_eos_bias(state, eos, bias, model=None):
    """A copy of ``state`` with ``bias`` added to the <eos> logit (and the same change made
    in place to ``model``'s generator, so that it need not be rebuilt)."""
    state = dict(state)
    state["generator.bias"] = state["generator.bias"].copy()
    state["generator.bias"][eos] += np.float32(bias)
    if model is not None:
        # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
        import torch

        with torch.no_grad():
            model.generator.bias.copy_(torch.from_numpy(state["generator.bias"]))
    return state


def _causal(length):
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    return torch.tril(torch.ones(length, length, dtype=torch.bool))[None, None]  # (1, 1, t, t)


def _src_batch(rng, init, batch, length):
    src = rng.integers(4, init["src_vocab_size"], size=(batch, length)).astype(np.int64)
    for b in range(1, batch):
        src[b, int(rng.integers(1, length + 1)):] = 0  # right padding
    return src, (src != 0)[:, None, None, :]  # (B, T_src), (B, 1, 1, T_src)


# --------------------------------------------------------------------------- greedy_decode


def greedy_variant(model, src, src_mask, max_len, sos=1, eos=2, pad=0, *, pad_after_eos=True, stop="all",
                   steps=None, causal=True, use_src_mask=True, keep_sos=True, position=-1):
    """Trusted greedy decoding with switches for the plausible mistakes (torch in, numpy out);
    ``position``: the position whose logits choose the next token (the last, ``-1``)."""
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    with torch.no_grad():
        mask = src_mask if use_src_mask else None
        memory = model.encode(src, mask)
        ys = torch.full((src.size(0), 1), sos, dtype=torch.long)
        finished = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len if steps is None else steps):
            hidden = model.decode(ys, memory, mask, _causal(ys.size(1)) if causal else None)
            token = model.project(hidden[:, position]).argmax(dim=-1)  # (B,)
            if pad_after_eos:
                token = token.masked_fill(finished, pad)
            ys = torch.cat([ys, token[:, None]], dim=1)
            finished = finished | (token == eos)
            if (stop == "all" and bool(finished.all())) or (stop == "first" and bool(finished.any())):
                break
    out = ys.numpy()
    return out if keep_sos else out[:, 1:]


def _greedy_case(rng, *, batch, max_len, label, part, layers=1, target="mixed", specials=None, attempts=6,
                 decides=()):
    """A greedy case whose sentences end at different steps (``target="mixed"``: some end,
    at least one does not; ``"all"``: every one ends before ``max_len``; ``"none"``: no
    sentence ends, so the answer is ``max_len`` arg-max tokens after ``<sos>``), on a
    model where each mistake of ``decides`` (:func:`greedy_variant` switches) gives
    other tokens."""
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    init = _model_init(rng, layers)
    sos, eos, pad = (1, 2, 0) if specials is None else specials
    init["tgt_vocab_size"] = max(init["tgt_vocab_size"], max(sos, eos, pad) + 2)
    src, src_mask = _src_batch(rng, init, batch, int(rng.integers(3, 7)))
    chosen = None
    for _ in range(attempts):
        state = _model_state(rng, init, never=(sos, pad))
        model = _build(init, state)
        for bias in (0.0, -3.0, -30.0) if target == "none" else (0.0, 1.5, 3.0, 5.0):
            biased = _with_eos_bias(state, eos, bias, model)
            ys = greedy_variant(model, torch.from_numpy(src), torch.from_numpy(src_mask), max_len,
                                sos, eos, pad)
            ended = (ys[:, 1:] == eos).any(axis=1)
            first_end = {int(np.argmax(row[1:] == eos)) for row in ys}
            if target == "all":
                good = bool(ended.all()) and ys.shape[1] < max_len + 1 and (len(first_end) > 1 or len(ys) == 1)
            elif target == "none":
                good = not bool(ended.any())
            else:
                good = bool(ended.any()) and (not bool(ended.all()) or len(ys) == 1)
            for flags in decides if good else ():
                wrong = greedy_variant(model, torch.from_numpy(src), torch.from_numpy(src_mask), max_len,
                                       sos, eos, pad, **flags)
                good = good and not (wrong.shape == ys.shape and np.array_equal(wrong, ys))
            chosen = chosen if chosen is not None else biased
            if good:
                chosen = biased
                break
        else:
            continue
        break
    kwargs = {} if specials is None else {"sos_id": sos, "eos_id": eos, "pad_id": pad}
    return Case(args=(Obj("solutions.Transformer", init, chosen), Tensor(src), Tensor(src_mask), max_len),
                kwargs=kwargs, label=label, part=part)


# The steps part's cases are drawn where reading the first position's logits gives other tokens.
_STEP_DECIDES = (dict(position=0),)


@register
class GreedyDecode(_DecodingExercise):
    """``greedy_decode(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0)``."""

    name = "greedy_decode"
    chapter = CHAPTER
    kind = "function"
    what = ("<sos> then arg-max tokens, pad after each sentence's <eos>, stop when all ended or after "
            "max_len new tokens, padded sources, other special ids")
    parts = {
        "<sos>, then the arg-max token at each of max_len steps": 2,
        "pad_id after a sentence's <eos>": 1,
        "stop once every sentence has ended": 1,
        "the sos_id, eos_id and pad_id arguments": 1,
    }

    def _cases(self, rng, hidden):
        steps, pad, stop, ids = self.parts
        cases = [
            _greedy_case(rng, batch=2, max_len=5, target="none", part=steps, decides=_STEP_DECIDES,
                         label="2 sentences (one padded) that do not end: <sos> and 5 arg-max tokens"),
            _greedy_case(rng, batch=3, max_len=6, part=pad,
                         label="3 sentences, max_len=6: some end with <eos>, one does not"),
            _greedy_case(rng, batch=2, max_len=10, target="all", part=stop,
                         label="2 sentences that both end before max_len=10: stop early"),
            _greedy_case(rng, batch=3, max_len=7, specials=(4, 5, 6), part=ids,
                         label="other special ids: sos_id=4, eos_id=5, pad_id=6"),
        ]
        if not hidden:
            return cases
        b, m = int(rng.integers(1, 4)), int(rng.integers(2, 9))
        cases.append(_greedy_case(rng, batch=b, max_len=m, target="none", layers=2, part=steps, decides=_STEP_DECIDES,
                                  label=f"random model with 2 decoder layers, {b} sentences that do not end, "
                                        f"max_len={m}"))
        cases.append(_greedy_case(rng, batch=2, max_len=1, target="none", part=steps,
                                  label="max_len=1: exactly one new token"))
        b, m = int(rng.integers(2, 5)), int(rng.integers(4, 10))
        cases.append(_greedy_case(rng, batch=b, max_len=m, layers=2, part=pad,
                                  label=f"random model with 2 decoder layers, {b} sentences, max_len={m}"))
        cases.append(_greedy_case(rng, batch=4, max_len=8, target="all", layers=2, part=stop,
                                  label="4 sentences ending at different steps (2 decoder layers)"))
        cases.append(_greedy_case(rng, batch=3, max_len=6, specials=(7, 3, 5), part=ids,
                                  label="other special ids: sos_id=7, eos_id=3, pad_id=5"))
        return cases

    def _mistakes(self, max_len) -> dict[str, list[tuple[str, dict]]]:
        """Each part's plausible mistakes, as :func:`greedy_variant` switches with
        their hints (the ids part's mistake, the book's default ids, is handled apart)."""
        steps, pad, stop, _ = self.parts
        return {
            steps: [
                ("max_len counts the new tokens: at most max_len steps after <sos> (max_len + 1 columns), "
                 "you made one step too few.", dict(steps=max_len - 1)),
                ("max_len counts the new tokens: at most max_len steps after <sos> (max_len + 1 columns), "
                 "you made one step too many.", dict(steps=max_len + 1)),
                ("column 0 must be <sos>: return the whole sequence, <sos> included.", dict(keep_sos=False)),
                ("you read the logits of the first position (logits[:, 0]), not the last: the next token is "
                 "the arg-max at the last position of the prefix, model.project(hidden[:, -1]).",
                 dict(position=0)),
                ("decode the prefix with a causal tgt_mask (1, 1, t, t): without it earlier positions see later "
                 "ones in the decoder's lower layers.", dict(causal=False)),
                ("pass src_mask to encode and decode: the padded source positions must be masked.",
                 dict(use_src_mask=False)),
            ],
            pad: [
                ("positions after a sentence's <eos> must hold pad_id: once a sentence has ended, append pad_id "
                 "to it, not the arg-max.", dict(pad_after_eos=False)),
            ],
            stop: [
                ("you stopped when the first sentence ended: stop only when every sentence has produced <eos> "
                 "(or after max_len new tokens).", dict(stop="first")),
                ("stop early when every sentence has ended: the result is shorter than max_len + 1 then.",
                 dict(stop="never")),
            ],
        }

    def _other_part_mistake(self, case, got, want) -> str | None:
        """The name of another part one of whose mistakes ``got`` equals exactly
        (that mistake alone, everything else right), or ``None``."""
        g, w = _array(got.value), _array(want.value)
        if got.raised is not None or g is None or getattr(got.value, "dtype", None) != "int64":
            return None
        # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
        import torch

        with PROCESS_STATE, _one_thread():
            model = _build(case.args[0].init, case.args[0].state)
            src, src_mask = (torch.from_numpy(_array(a)) for a in case.args[1:3])
            ids = [case.kwargs.get("sos_id", 1), case.kwargs.get("eos_id", 2), case.kwargs.get("pad_id", 0)]
            mistakes = self._mistakes(case.args[3])
            mine = self.part_of(case)

            def same(value, other):
                return value.shape == other.shape and np.array_equal(value, other)

            def run(flags):
                return greedy_variant(model, src, src_mask, case.args[3], *ids, **flags)

            # Not when the answer also equals a mistake of this case's own part: then the
            # case cannot tell which rule was broken, and its own part is not earned.
            if any(same(run(flags), g) for _, flags in mistakes.get(mine, ())):
                return None
            for part, part_mistakes in mistakes.items():
                if part == mine:
                    continue
                for _, flags in part_mistakes:
                    value = run(flags)
                    if same(value, g) and not same(value, w):
                        return part
        return None

    def _diagnose(self, case, got, want):
        # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
        import torch

        g, w = _array(got.value), _array(want.value)
        if g is None:
            return "return a LongTensor (B, T) of token ids, column 0 = <sos>."
        if getattr(got.value, "dtype", "int64") != "int64":
            return "return a LongTensor (dtype torch.long)."
        init, state = case.args[0].init, case.args[0].state
        model = _build(init, state)
        src, src_mask = (torch.from_numpy(_array(a)) for a in case.args[1:3])
        max_len = case.args[3]
        sos = case.kwargs.get("sos_id", 1)
        eos = case.kwargs.get("eos_id", 2)
        pad = case.kwargs.get("pad_id", 0)

        def run(**flags):
            return greedy_variant(model, src, src_mask, max_len, sos, eos, pad, **flags)

        steps_part, pad_part, stop_part, _ = self.parts
        mistakes = self._mistakes(max_len)
        variants = mistakes[pad_part] + mistakes[stop_part] + mistakes[steps_part]
        matches = []  # several mistakes can give the same tokens on one case: name them all
        for hint, flags in variants:
            value = run(**flags)
            if value.shape == g.shape and np.array_equal(value, g) and not (
                    value.shape == w.shape and np.array_equal(value, w)) and hint not in matches:
                matches.append(hint)
        if matches:
            return " Or: ".join(matches)
        if (sos, eos, pad) != (1, 2, 0):
            value = greedy_variant(model, src, src_mask, max_len)
            if value.shape == g.shape and np.array_equal(value, g):
                return "use the sos_id, eos_id and pad_id arguments, not the book's default ids."
        if g.ndim == 2 and g.shape[0] == w.shape[0] and g.shape[1] != w.shape[1]:
            n = min(g.shape[1], w.shape[1])
            ended = [int(np.argmax(row[1:] == eos)) + 1 if (row[1:] == eos).any() else len(row) for row in w]
            first = next((j for j in range(n) if not np.array_equal(g[:, j], w[:, j])), None)
            if first is not None and first < min(ended):
                return (f"the tokens already differ at column {first}, before any sentence has ended: look at "
                        "how each token is chosen (the arg-max of the last position's logits) before the "
                        "stopping rule.")
        return None


# --------------------------------------------------------------------------- beam_search


def beam_variant(model, src, src_mask, beam_size, max_len, sos=1, eos=2, alpha=0.6, *, mode="reference"):
    """Trusted beam search for one sentence, with modes for sound alternatives and mistakes.

    ``"reference"``: the 2k-candidate bookkeeping of ``solutions.beam_search``;
    ``"shrinking"`` (sound too): the top k candidates each step, finished ones leave the beam;
    mistakes: ``"no_penalty"``, ``"penalty_with_sos"`` (len counts <sos>), ``"divide_by_length"``,
    ``"first_finished"`` (return the first hypothesis that ends), ``"no_finished"`` (<eos> never
    accepted, the best live prefix at max_len wins), ``"penalty_on_live"`` (finished and live
    prefixes compared with the penalty applied to only the finished ones at the end).
    """
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch
    import torch.nn.functional as F

    def penalty(length):
        if mode == "no_penalty":
            return 1.0
        if mode == "divide_by_length":
            return float(length)
        if mode == "penalty_with_sos":
            return ((5 + length + 1) / 6) ** alpha
        return ((5 + length) / 6) ** alpha

    with torch.no_grad():
        memory = model.encode(src, src_mask)
        beams = torch.full((1, 1), sos, dtype=torch.long)
        scores = torch.zeros(1)
        finished = []
        for step in range(1, max_len + 1):
            k = beams.size(0)
            mask = None if src_mask is None else src_mask.expand(k, *src_mask.shape[1:])
            hidden = model.decode(beams, memory.expand(k, -1, -1), mask, _causal(beams.size(1)))
            log_probs = F.log_softmax(model.project(hidden[:, -1]).float(), dim=-1)  # (k, V)
            V = log_probs.size(-1)
            if mode == "no_finished":
                log_probs[:, eos] = -float("inf")
            flat = (scores[:, None] + log_probs).reshape(-1)
            # reference: examine the 2k best, <eos> among the first k finishes, refill k live prefixes;
            # shrinking: examine the k - (finished so far) best, each <eos> among them finishes.
            live = beam_size - len(finished) if mode == "shrinking" else beam_size
            n_top = live if mode == "shrinking" else 2 * beam_size
            top_scores, top_index = flat.topk(min(n_top, flat.numel()))
            rows, tokens, new_scores = [], [], []
            for rank, (score, index) in enumerate(zip(top_scores.tolist(), top_index.tolist())):
                row, token = divmod(index, V)
                if token == eos:
                    if rank < live:
                        finished.append((score / penalty(step), beams[row].tolist() + [eos]))
                        if mode == "first_finished":
                            return finished[-1][1]
                elif len(rows) < live:
                    rows.append(row)
                    tokens.append(token)
                    new_scores.append(score)
            if len(finished) >= beam_size or not rows:
                break
            beams = torch.cat([beams[torch.tensor(rows)], torch.tensor(tokens)[:, None]], dim=1)
            scores = torch.tensor(new_scores)
        else:
            for row in range(beams.size(0)):
                finished.append((scores[row].item() / penalty(max_len), beams[row].tolist()))
    return max(finished, key=lambda item: item[0])[1]


_MISTAKES = ("no_penalty", "penalty_with_sos", "divide_by_length", "first_finished", "no_finished")
# The length penalty's mistakes: the cases of the other parts are drawn where none changes the winner.
_PENALTY_MISTAKES = ("no_penalty", "penalty_with_sos", "divide_by_length")
# The seed of a fixed case, in every draw of the hidden set as in the visible check, on which
# counting <sos> in the penalty's len changes the winner (a test keeps it so): the prompt fixes
# that convention, so every draw must decide it.
_SOS_DECIDES_SEED = 0


def _beam_case(rng, *, beam_size, max_len, label, part, alpha=0.6, want=("beam_differs",),
               eos_bias=(0.0, 1.0, 2.0, 3.0, 4.0), attempts=15):
    """A beam-search case on which the sound variants agree and the search matters.

    ``want`` lists what the chosen model must show: ``"beam_differs"`` (beam ≠ greedy),
    ``"penalty_matters"`` (another winner without the length penalty),
    ``"penalty_irrelevant"`` (the same winner without it: a case of another part),
    ``"not_first"`` (the first hypothesis to end is not the best), ``"ends"`` (the best
    ends with <eos>), ``"sos_decides"`` (counting <sos> in the penalty's len changes the winner).
    Models are drawn until one shows all of them (or the attempts run out).
    """
    # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
    import torch

    init = _model_init(rng)
    fallback = chosen = None
    for _ in range(attempts):
        state = _model_state(rng, init)
        model = _build(init, state)
        src, src_mask = _src_batch(rng, init, 1, int(rng.integers(3, 7)))
        for bias in eos_bias:
            biased = _with_eos_bias(state, 2, bias, model)
            args = (model, torch.from_numpy(src), torch.from_numpy(src_mask), beam_size, max_len)
            ref = beam_variant(*args, alpha=alpha)
            ok = not ("ends" in want and ref[-1] != 2)
            if ok and "beam_differs" in want:
                greedy = greedy_variant(model, args[1], args[2], max_len)[0].tolist()
                ok = (greedy[: greedy.index(2) + 1] if 2 in greedy else greedy) != ref
            if ok and "penalty_matters" in want:
                ok = beam_variant(*args, alpha=alpha, mode="no_penalty") != ref
            if ok and "not_first" in want:
                ok = beam_variant(*args, alpha=alpha, mode="first_finished") != ref
            if ok and "penalty_irrelevant" in want:  # the case is about the search, not the penalty
                ok = all(beam_variant(*args, alpha=alpha, mode=mode) == ref for mode in _PENALTY_MISTAKES)
            if ok and "sos_decides" in want:  # counting <sos> in len changes the winner
                ok = beam_variant(*args, alpha=alpha, mode="penalty_with_sos") != ref
            # the contract leaves the answer open where sound bookkeepings disagree
            sound = beam_variant(*args, alpha=alpha, mode="shrinking") == ref
            if sound and fallback is None:
                fallback = (biased, src, src_mask)
            if ok and sound:
                chosen = (biased, src, src_mask)
                break
        if chosen is not None:
            break
    state, src, src_mask = chosen or fallback or (biased, src, src_mask)
    kwargs = {} if alpha == 0.6 else {"length_penalty": alpha}
    return Case(args=(Obj("solutions.Transformer", init, state), Tensor(src), Tensor(src_mask), beam_size, max_len),
                kwargs=kwargs, label=label, part=part)


@register
class BeamSearch(_DecodingExercise):
    """``beam_search(model, src, src_mask, beam_size, max_len, sos_id=1, eos_id=2, length_penalty=0.6)``."""

    name = "beam_search"
    chapter = CHAPTER
    kind = "function"
    what = ("the best hypothesis as a list with <sos> and <eos>: beam ≠ greedy, GNMT length penalty, finished "
            "hypotheses kept, beam_size=1 = greedy, max_len reached")
    parts = {
        "beam_size prefixes kept at every step (beam ≠ greedy)": 2,
        "beam_size=1 equals greedy decoding": 1,
        "the GNMT length penalty ((5 + len) / 6) ** length_penalty": 1,
        "finished hypotheses kept until beam_size have ended or max_len": 1,
    }
    uses = ("greedy_decode",)

    def _cases(self, rng, hidden):
        beam, one, penalty, finished = self.parts
        cases = [
            _beam_case(rng, beam_size=3, max_len=8, want=("beam_differs", "penalty_irrelevant"), part=beam,
                       label="beam_size=3 on a model where beam search beats greedy"),
            _beam_case(rng, beam_size=1, max_len=8, want=("ends",), part=one,
                       label="beam_size=1 equals greedy decoding"),
            _beam_case(rng, beam_size=3, max_len=8, alpha=1.5, want=("penalty_matters",), part=penalty,
                       label="length_penalty=1.5 on a model where the penalty changes the winner"),
            _beam_case(np.random.default_rng(_SOS_DECIDES_SEED), beam_size=3, max_len=8,
                       want=("penalty_matters", "sos_decides"), part=penalty,
                       label="a model on which len must count the generated tokens, <eos> included, <sos> not"),
            _beam_case(rng, beam_size=3, max_len=8, want=("not_first", "ends", "penalty_irrelevant"), part=finished,
                       label="the first hypothesis to end is not the best one"),
        ]
        if not hidden:
            return cases
        for _ in range(2):
            k, m = int(rng.integers(2, 5)), int(rng.integers(5, 10))
            cases.append(_beam_case(rng, beam_size=k, max_len=m, want=("beam_differs", "penalty_irrelevant"), part=beam,
                                    label=f"random model, beam_size={k}, max_len={m}"))
        cases.append(_beam_case(rng, beam_size=1, max_len=6, want=(), part=one,
                                label="beam_size=1, max_len=6: the greedy sentence"))
        cases.append(_beam_case(rng, beam_size=3, max_len=8, want=("penalty_matters", "ends"), part=penalty,
                                label="the default length_penalty=0.6 changes the winner"))
        cases.append(_beam_case(rng, beam_size=3, max_len=8, want=("not_first", "ends", "penalty_irrelevant"),
                                part=finished,
                                label="another model on which the first hypothesis to end is not the best"))
        cases.append(_beam_case(rng, beam_size=2, max_len=3, want=(), eos_bias=(-30.0,), part=finished,
                                label="<eos> never likely: max_len=3 reached, the best prefix without <eos>"))
        return cases

    def _mistakes(self) -> dict[str, tuple[str, ...]]:
        """The :func:`beam_variant` mistakes of the parts about the length penalty and
        about finished hypotheses."""
        _, _, penalty, finished = self.parts
        return {penalty: _PENALTY_MISTAKES, finished: ("first_finished", "no_finished")}

    def _other_part_mistake(self, case, got, want) -> str | None:
        """The name of another part one of whose mistakes ``got`` equals exactly, or ``None``."""
        if got.raised is not None or not isinstance(got.value, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in got.value):
            return None
        # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
        import torch

        with PROCESS_STATE, _one_thread():
            model = _build(case.args[0].init, case.args[0].state)
            src, src_mask = (torch.from_numpy(_array(a)) for a in case.args[1:3])
            beam_size, max_len = case.args[3:5]
            alpha = case.kwargs.get("length_penalty", 0.6)
            mine = self.part_of(case)

            def run(mode):
                return beam_variant(model, src, src_mask, beam_size, max_len, alpha=alpha, mode=mode)

            # Not when the answer also equals a mistake of this case's own part: then the
            # case cannot tell which rule was broken, and its own part is not earned.
            if any(run(mode) == got.value for mode in self._mistakes().get(mine, ())):
                return None
            for part, modes in self._mistakes().items():
                if part == mine:
                    continue
                for mode in modes:
                    value = run(mode)
                    if value == got.value and value != want.value:
                        return part
        return None

    def _diagnose(self, case, got, want):
        # torch when a case runs: load_all imports every chapter's checks, numpy-only ones too
        import torch

        if not isinstance(got.value, list):
            return "return a plain list of ints (e.g. tensor.tolist()), <sos> first."
        if got.value and got.value[0] != 1 and got.value == want.value[1:]:
            return "the hypothesis must start with <sos>."
        init, state = case.args[0].init, case.args[0].state
        model = _build(init, state)
        src, src_mask = (torch.from_numpy(_array(a)) for a in case.args[1:3])
        beam_size, max_len = case.args[3:5]
        alpha = case.kwargs.get("length_penalty", 0.6)
        hints = {
            "no_penalty": "finished hypotheses are scored log_prob / ((5 + len) / 6) ** length_penalty; "
                          "you compared raw summed log probabilities.",
            "penalty_with_sos": "len in the penalty counts the generated tokens (<eos> included, <sos> not).",
            "divide_by_length": "the GNMT penalty is ((5 + len) / 6) ** length_penalty, not len.",
            "first_finished": "you returned the first hypothesis that ended: keep it among the finished ones and "
                              "go on until beam_size hypotheses have ended (or max_len), then return the best.",
            "no_finished": "hypotheses that end with <eos> must be kept as finished candidates, not dropped.",
        }
        matches = [hints[mode] for mode in _MISTAKES  # several mistakes can agree on one case: name them all
                   if (value := beam_variant(model, src, src_mask, beam_size, max_len, alpha=alpha, mode=mode))
                   == got.value and value != want.value]
        if matches:
            return " Or: ".join(matches)
        if beam_size > 1:
            greedy = greedy_variant(model, src, src_mask, max_len)[0].tolist()
            greedy = greedy[: greedy.index(2) + 1] if 2 in greedy else greedy
            if got.value == greedy and greedy != want.value:
                return "this is the greedy answer: keep beam_size prefixes at every step, not only the best one."
        return None
