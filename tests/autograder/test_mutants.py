"""Every exercise has wrong answers that must be rejected and valid styles that must
be accepted (issue 38), judged the same by the student's check and by the grader.

Two tables, per exercise of the registry:

* ``BROKEN`` (``test_part_isolation``): mutants, each the reference with one rule
  broken, the part it must lose and a phrase of the feedback that names the mistake;
* ``STYLES`` (here): an answer in another style the prompt allows (loops, einsum,
  ``-inf`` + ``nan_to_num``, a float32 table, no ``need_weights`` fast path, a
  ``persistent=False`` buffer, …), written as a student's notebook cell, which must
  earn full marks.

The tests: each table covers every registered exercise; each style earns full marks in
the visible check, a hidden draw and the student package's stored check; the local
check's points equal the grader's on the reference, the blank stub and each style; and,
through the real sandboxed grader (``grade_submission``, one notebook per round: a round
holds at most one mutant per exercise and none beside a mutant of an exercise it uses,
the styles fill a round of their own), each
mutant loses exactly its part with feedback naming the mistake and none of the words
``NOT_SAID`` lists for it, each slip of ``SLIPS`` (a typo costing several parts) exactly
its parts, each style full marks. Every mutant is a cell a notebook can hold: the ones
built from the reference carry their cell (``reference_with``), so none is judged in
process only.
"""
from __future__ import annotations

import functools
import inspect
import math
import re
import textwrap
from collections import Counter
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fixtures
import solutions
from autograder.checks import exercises_of, get_exercise, load_all
from autograder.checks.base import check_report
from check_helpers import cases_drawn_once, notebook_namespace, stored_checks  # noqa: F401 (a fixture)
from test_part_isolation import BROKEN, ENCODER_LAYER_WITHOUT_MASK, NOT_SAID, SLIPS, part

# tests/conftest.py: tiny tensors, one thread; check_helpers: each seeded draw of cases made once
pytestmark = pytest.mark.usefixtures("one_torch_thread", "cases_drawn_once")

BOOK = Path(__file__).resolve().parents[2] / "book"
CHAPTERS = sorted({get_exercise(n).chapter for n in load_all()})

# --------------------------------------------------------------------------- valid styles, as notebook cells

# The sub-layers written out, no ResidualSublayer: test_part_isolation's mutant without its slip.
ENCODER_LAYER_WRITTEN_OUT = ENCODER_LAYER_WITHOUT_MASK.replace(
    "        src_mask = None  # the mask never reaches the attention\n", "")
assert ENCODER_LAYER_WRITTEN_OUT != ENCODER_LAYER_WITHOUT_MASK

STYLES = {
    "rnn_forward": '''
def rnn_forward(x, h0, W_xh, W_hh, b_h):
    states, h = [], h0
    for x_t in x:  # one time step at a time, a list of states
        h = np.tanh(x_t @ W_xh + h @ W_hh + b_h)
        states.append(h)
    return np.stack(states)
''',
    "hidden_state_jacobian_norms": '''
def hidden_state_jacobian_norms(H, W_hh):
    T, d_h = H.shape
    norms, product = np.empty(T), np.eye(d_h)
    norms[T - 1] = 1.0
    for t in range(T - 2, -1, -1):
        J = np.diag(1 - H[t + 1] ** 2) @ W_hh.T  # J[i, j] = (1 - H[t+1, i]^2) W_hh[j, i]
        product = product @ J  # J_{T-1} ... J_{t+1}
        norms[t] = np.linalg.svd(product, compute_uv=False)[0]
    return norms
''',
    "build_vocab": '''
def build_vocab(sentences, min_freq=1, specials=("<pad>", "<sos>", "<eos>", "<unk>")):
    counts = Counter(token for sentence in sentences for token in sentence.split())
    vocab = {token: i for i, token in enumerate(specials)}
    for token, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n >= min_freq and token not in vocab:
            vocab[token] = len(vocab)
    return vocab
''',
    "encode": '''
def encode(sentence, vocab):
    return [vocab[t] if t in vocab else vocab["<unk>"] for t in re.split(r"\\s+", sentence.strip()) if t]
''',
    "learn_bpe": '''
def learn_bpe(corpus, num_merges):
    words = Counter(tuple(word) + ("</w>",) for sentence in corpus for word in sentence.split())
    merges = []
    while len(merges) < num_merges:
        pairs = Counter()
        for symbols, n in words.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = Counter()
        for symbols, n in words.items():
            out, i = [], 0
            while i < len(symbols):
                if symbols[i:i + 2] == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return merges
''',
    "bpe_tokenize": '''
def bpe_tokenize(word, merges):
    symbols = [*word, "</w>"]
    for pair in merges:
        i = 0
        while i < len(symbols) - 1:  # merge in place, left to right
            if (symbols[i], symbols[i + 1]) == tuple(pair):
                symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
            i += 1
    return symbols
''',
    "one_hot": '''
def one_hot(ids, vocab_size):
    return np.eye(vocab_size)[np.asarray(ids, dtype=np.int64).reshape(-1)].reshape(len(ids), vocab_size)
''',
    "cosine_similarity": '''
def cosine_similarity(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norm_a, norm_b = math.sqrt(float(a @ a)), math.sqrt(float(b @ b))
    if norm_a == 0 or norm_b == 0:
        raise ValueError("cosine similarity is undefined for a zero vector")
    return float(a @ b) / (norm_a * norm_b)
''',
    "TokenEmbedding": '''
class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.register_buffer("scale", torch.tensor(math.sqrt(d_model)))  # state of its own

    def forward(self, ids):
        return self.embedding(ids) * self.scale
''',
    "sinusoidal_positional_encoding": '''
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    pe = np.zeros((max_len, d_model), dtype=np.float32)  # a float32 table: the prompt allows it
    position = np.arange(max_len, dtype=np.float32)[:, None]
    div = np.exp(np.arange(0, d_model, 2, dtype=np.float32) * np.float32(-math.log(10000.0) / d_model))
    pe[:, 0::2] = np.sin(position * div)
    pe[:, 1::2] = np.cos(position * div)
    return pe
''',
    "PositionalEncoding": '''
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        table = torch.as_tensor(sinusoidal_positional_encoding(max_len, d_model), dtype=torch.float32)
        self.register_buffer("pe", table, persistent=False)  # not in the state_dict: still a buffer
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x):
        seq_len = x.shape[1]
        if seq_len > self.pe.shape[0]:
            raise ValueError(f"sequence of {seq_len} tokens is longer than max_len={self.pe.shape[0]}")
        return self.dropout(x + self.pe[:seq_len])
''',
    "relative_position_matrix": '''
def relative_position_matrix(k, d_model):
    M = np.zeros((d_model, d_model))
    for i in range(0, d_model, 2):  # i is 2i of the formula here
        angle = k / 10000 ** (i / d_model)
        c, s = math.cos(angle), math.sin(angle)
        M[i:i + 2, i:i + 2] = [[c, s], [-s, c]]
    return M
''',
    "softmax": '''
def softmax(x, axis=-1):
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    log_sum = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))  # logsumexp
    return np.exp(x - log_sum)
''',
    "scaled_dot_product_attention": '''
def scaled_dot_product_attention(q, k, v):
    scores = np.einsum("...qd,...kd->...qk", q / math.sqrt(q.shape[-1]), k)  # pre-scaled queries
    weights = softmax(scores, axis=-1)
    return np.einsum("...qk,...kd->...qd", weights, v), weights
''',
    "self_attention": '''
def self_attention(x, W_q, W_k, W_v):
    q, k, v = np.matmul(x, W_q), np.matmul(x, W_k), np.matmul(x, W_v)
    return scaled_dot_product_attention(q, k, v)
''',
    "split_heads": '''
def split_heads(x, num_heads):
    if x.size(-1) % num_heads != 0:
        raise ValueError(f"d_model={x.size(-1)} is not divisible by num_heads={num_heads}")
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)  # (B, h, T, d_k)
''',
    "merge_heads": '''
def merge_heads(x):
    return x.transpose(1, 2).flatten(2)  # (B, T, h * d_k)
''',
    "MultiHeadAttention": '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0):
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.attn_weights = None

    def forward(self, query, key, value, mask=None):  # no need_weights fast path
        B = query.size(0)
        q = self.w_q(query).view(B, -1, self.num_heads, self.d_k).transpose(1, 2)
        k = self.w_k(key).view(B, -1, self.num_heads, self.d_k).transpose(1, 2)
        v = self.w_v(value).view(B, -1, self.num_heads, self.d_k).transpose(1, 2)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        self.attn_weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # -inf, then NaN rows to 0
        out = torch.einsum("bhqk,bhkd->bhqd", self.dropout(self.attn_weights), v)
        return self.w_o(out.transpose(1, 2).reshape(B, -1, self.num_heads * self.d_k))
''',
    "padding_mask": '''
def padding_mask(ids, pad_id=0):
    return (ids != pad_id).unsqueeze(1).unsqueeze(2)  # (B, 1, 1, T)
''',
    "causal_mask": '''
def causal_mask(size):
    rows = torch.arange(size)
    return (rows[:, None] >= rows[None, :])[None, None]  # (1, 1, size, size)
''',
    "decoder_mask": '''
def decoder_mask(tgt_ids, pad_id=0):
    T = tgt_ids.size(1)
    keep = (tgt_ids != pad_id)[:, None, None, :]  # (B, 1, 1, T), written inline
    return keep & torch.ones(T, T, dtype=torch.bool, device=tgt_ids.device).tril()
''',
    "masked_softmax": '''
def masked_softmax(scores, mask):
    if mask is None:
        return torch.softmax(scores, dim=-1)
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    e = torch.exp(filled - filled.amax(dim=-1, keepdim=True)) * mask
    return e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).tiny)
''',
    "layer_norm": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    centered = x - x.mean(axis=-1, keepdims=True)
    var = (centered ** 2).mean(axis=-1, keepdims=True)
    return gamma * centered / np.sqrt(var + eps) + beta
''',
    "PositionwiseFeedForward": '''
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x):
        return self.linear2(F.dropout(F.relu(self.linear1(x)), self.p, training=self.training))
''',
    "ResidualSublayer": '''
class ResidualSublayer(nn.Module):
    def __init__(self, d_model, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm, self.dropout, self.norm_first = nn.LayerNorm(d_model), nn.Dropout(dropout), norm_first

    def forward(self, x, sublayer):
        y = x + self.dropout(sublayer(self.norm(x) if self.norm_first else x))
        return y if self.norm_first else self.norm(y)
''',
    "EncoderLayer": ENCODER_LAYER_WRITTEN_OUT,
    "DecoderLayer": '''
class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)  # one dropout module for the three sub-layers
        self.norm_first = norm_first

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop(self.self_attn(h, h, h, tgt_mask))
            h = self.norm2(x)
            x = x + self.drop(self.cross_attn(h, memory, memory, src_mask))
            return x + self.drop(self.feed_forward(self.norm3(x)))
        x = self.norm1(x + self.drop(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.drop(self.cross_attn(x, memory, memory, src_mask)))
        return self.norm3(x + self.drop(self.feed_forward(x)))
''',
    "Transformer": '''
class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_encoder_layers=6,
                 num_decoder_layers=6, d_ff=2048, dropout=0.1, max_len=5000, share_embeddings=False,
                 norm_first=False):
        super().__init__()
        if share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.positional = PositionalEncoding(d_model, max_len, dropout)
        layer_args = (d_model, num_heads, d_ff, dropout, norm_first)
        self.encoder_layers = nn.ModuleList(EncoderLayer(*layer_args) for _ in range(num_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(*layer_args) for _ in range(num_decoder_layers))
        self.norm_first = norm_first
        if norm_first:
            self.encoder_norm, self.decoder_norm = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.generator = nn.Linear(d_model, tgt_vocab_size)  # no Xavier init: a style choice
        if share_embeddings:  # tied through the target embedding: still one matrix
            self.tgt_embed.embedding.weight = self.src_embed.embedding.weight
            self.generator.weight = self.tgt_embed.embedding.weight

    def encode(self, src, src_mask=None):
        x = self.positional(self.src_embed(src))
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.encoder_norm(x) if self.norm_first else x

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        x = self.positional(self.tgt_embed(tgt))
        for layer in self.decoder_layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.decoder_norm(x) if self.norm_first else x

    def project(self, hidden):
        return self.generator(hidden)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.project(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))
''',
    "count_parameters": '''
def count_parameters(model):
    seen, total = set(), 0
    for _, p in model.named_parameters(remove_duplicate=False):  # every name, tied ones too
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total
''',
    "make_decoder_io": '''
def make_decoder_io(targets, sos_id=1, eos_id=2, pad_id=0):
    from torch.nn.utils.rnn import pad_sequence

    inputs = [torch.tensor([sos_id] + list(t), dtype=torch.long) for t in targets]
    labels = [torch.tensor(list(t) + [eos_id], dtype=torch.long) for t in targets]
    return (pad_sequence(inputs, batch_first=True, padding_value=pad_id),
            pad_sequence(labels, batch_first=True, padding_value=pad_id))
''',
    "noam_lr": '''
def noam_lr(step, d_model, warmup_steps, factor=1.0):
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    if step < warmup_steps:  # two branches instead of a min
        rate = step / warmup_steps ** 1.5
    else:
        rate = 1 / math.sqrt(step)
    return factor * rate / math.sqrt(d_model)
''',
    "label_smoothed_cross_entropy": '''
def label_smoothed_cross_entropy(logits, labels, smoothing=0.1, pad_id=0):
    V = logits.size(-1)
    log_probs = torch.log_softmax(logits.reshape(-1, V), dim=-1)
    labels = labels.reshape(-1)
    keep = labels != pad_id
    nll = -log_probs.gather(1, labels[:, None]).squeeze(1)
    uniform = -log_probs.mean(dim=-1)
    loss = (1 - smoothing) * nll + smoothing * uniform
    return loss[keep].sum() / keep.sum()
''',
    "label_smoothing_floor": '''
def label_smoothing_floor(vocab_size, smoothing=0.1):
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 2:
        raise ValueError(f"vocab_size must be an int >= 2, got {vocab_size!r}")
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
    if smoothing == 0:
        return 0.0, math.inf
    q_label, q_other = 1 - smoothing + smoothing / vocab_size, smoothing / vocab_size
    floor = -(q_label * math.log(q_label) + (vocab_size - 1) * q_other * math.log(q_other))
    return floor, math.log(q_label / q_other)
''',
    "greedy_decode": '''
def greedy_decode(model, src, src_mask, max_len, sos_id=1, eos_id=2, pad_id=0):
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        ys = torch.full((src.size(0), 1), sos_id, dtype=torch.long)
        done = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            T = ys.size(1)
            tgt_mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
            logits = model.project(model.decode(ys, memory, src_mask, tgt_mask))  # every position
            token = torch.where(done, torch.full_like(done, pad_id, dtype=torch.long), logits[:, -1].argmax(-1))
            ys = torch.cat([ys, token[:, None]], dim=1)
            done = done | (token == eos_id)
            if done.all():
                break
    return ys
''',
    "bootstrap_bleu": '''
def bootstrap_bleu(stats, resamples):  # every resample at once: an (S, M, 2K + 2) gather, then sums
    stats = np.asarray(stats, dtype=np.float64)
    k = (stats.shape[1] - 2) // 2
    sums = stats[resamples].sum(axis=1)
    m, t, c, r = sums[:, :k], sums[:, k:2 * k], sums[:, -2], sums[:, -1]
    with np.errstate(divide="ignore", invalid="ignore"):
        score = 100 * np.where(c > r, 1.0, np.exp(1 - r / c)) * np.exp(np.log(m / t).mean(axis=1))
    return np.where((m.min(axis=1) > 0) & (c > 0), score, 0.0)
''',
    "beam_search": '''
def beam_search(model, src, src_mask, beam_size, max_len, sos_id=1, eos_id=2, length_penalty=0.6):
    with torch.no_grad():  # plain lists of (tokens, score), sorted in Python
        memory = model.encode(src, src_mask)
        live, finished = [([sos_id], 0.0)], []
        for step in range(1, max_len + 1):
            ys = torch.tensor([tokens for tokens, _ in live])  # the live prefixes, all of length step
            tgt_mask = torch.ones(step, step, dtype=torch.bool).tril()[None, None]
            mask = None if src_mask is None else src_mask.expand(len(live), *src_mask.shape[1:])
            hidden = model.decode(ys, memory.expand(len(live), -1, -1), mask, tgt_mask)
            log_probs = torch.log_softmax(model.project(hidden[:, -1]).float(), dim=-1).tolist()
            candidates = [(score + lp, tokens, token)
                          for (tokens, score), row in zip(live, log_probs) for token, lp in enumerate(row)]
            candidates.sort(key=lambda c: -c[0])
            live = []
            for rank, (score, tokens, token) in enumerate(candidates[:2 * beam_size]):
                if token == eos_id:
                    if rank < beam_size:
                        finished.append((score / ((5 + step) / 6) ** length_penalty, tokens + [eos_id]))
                elif len(live) < beam_size:
                    live.append((tokens + [token], score))
            if len(finished) >= beam_size or not live:
                break
        else:
            finished += [(score / ((5 + max_len) / 6) ** length_penalty, tokens) for tokens, score in live]
    return max(finished, key=lambda f: f[0])[1]
''',
    "sentence_statistics": '''
def sentence_statistics(hypotheses, references, max_order=4):  # plain dicts, matches consumed one by one, floats
    out = np.zeros((len(hypotheses), 2 * max_order + 2))
    for row, (hyp, ref) in enumerate(zip(hypotheses, references)):
        for n in range(1, max_order + 1):
            left = {}
            for i in range(len(ref) - n + 1):
                left[tuple(ref[i:i + n])] = left.get(tuple(ref[i:i + n]), 0) + 1
            for i in range(len(hyp) - n + 1):
                gram = tuple(hyp[i:i + n])
                if left.get(gram, 0):
                    left[gram] -= 1
                    out[row, n - 1] += 1
                out[row, max_order + n - 1] += 1
        out[row, -2:] = len(hyp), len(ref)
    return out
''',
}


def notebook_names() -> dict:
    """What a chapter notebook's cells see: the setup cell's modules and, for the other
    exercises, the reference answers (the source notebook's own cells)."""
    names = {"math": math, "np": np, "torch": torch, "nn": nn, "F": F, "re": re, "Counter": Counter}
    names.update({n: getattr(solutions, n) for n in solutions.__all__})
    return names


def style(name: str):
    """The class or function of ``STYLES[name]``, defined in a notebook-like namespace."""
    return notebook_namespace(notebook_names(), STYLES[name])[name]


def blank(*args, **kwargs):
    raise NotImplementedError()


# --------------------------------------------------------------------------- the tables cover every exercise


def test_every_exercise_has_rejected_mutants_and_accepted_styles():
    """A new exercise needs at least one mutant (with the part it loses and the words
    naming its mistake) and one valid style before its checks count as tested."""
    exercises = set(load_all())
    broken = {n for n, _, _, _ in BROKEN}
    assert exercises - broken == set(), f"no rejected mutant: {sorted(exercises - broken)}"
    assert exercises - set(STYLES) == set(), f"no accepted style: {sorted(exercises - set(STYLES))}"
    assert set(STYLES) <= exercises and broken <= exercises
    for name, index, _, mistake in BROKEN:
        assert 0 <= index < len(get_exercise(name).parts) and mistake.strip(), (name, index)


# --------------------------------------------------------------------------- styles, in process


@pytest.mark.parametrize("name", sorted(STYLES))
def test_a_valid_style_earns_full_marks_everywhere(name):
    """Full marks in the visible check, a hidden draw (the grader's judging) and the
    student package's stored check."""
    answer = style(name)
    for hidden, seed in ((False, None), (True, 3)):
        report = check_report(name, answer, hidden=hidden, seed=seed)
        assert report.passed and report.score == report.max_score, report.render(name)
    with stored_checks(get_exercise(name).chapter):
        report = check_report(name, answer)
    assert report.passed, report.render(name)


@pytest.mark.parametrize("name", sorted(load_all()))
def test_the_local_check_gives_the_graders_points_on_the_reference_and_the_blank(name):
    """The student package's check (stored cases, no reference) prints the points the
    grade gives: all of them for the reference, none for the blank stub, with
    "not implemented yet" and no note (the mutants: ``test_part_isolation``)."""
    reference = getattr(solutions, name)
    with stored_checks(get_exercise(name).chapter):
        local = {label: check_report(name, answer) for label, answer in (("reference", reference), ("blank", blank))}
    graded = {label: check_report(name, answer, hidden=True, seed=3)
              for label, answer in (("reference", reference), ("blank", blank))}
    for label in local:
        assert local[label].score == graded[label].score, (label, local[label].render(name),
                                                           graded[label].render(name))
    assert local["reference"].passed and local["blank"].score == 0
    text = local["blank"].render(name)
    assert "not implemented yet" in text and not local["blank"].notes, text


# --------------------------------------------------------------------------- the real sandboxed grader


def _withheld_reference(name: str, chapter_nb) -> str:
    """The source notebook's own solution cell of ``name`` renamed ``_reference_<name>``:
    a mutant written against the reference keeps working where the sandbox's
    ``solutions`` no longer holds this chapter's answers."""
    source = fixtures.solution_cell(chapter_nb, name).source
    return re.sub(rf"^(def|class) {name}\b", rf"\1 _reference_{name}", source, count=1, flags=re.M)


def mutant_cell(name: str, answer, chapter_nb) -> str | None:
    """``answer`` (a function or class of ``BROKEN``) as the notebook cell of exercise
    ``name``: its ``.cell`` when it carries one (a mutant written as a cell, e.g. an edit of
    the reference's cell), else its source, renamed ``name``. A reference it calls
    (``solutions.<exercise of this chapter>``, withheld from the chapter's sandbox) comes
    with it as ``_reference_<exercise>``, the source notebook's own cell. ``None`` for a
    closure or an answer written with the checks' own helpers, which no cell can hold."""
    source = getattr(answer, "cell", None)
    own = getattr(answer, "__name__", "")
    if not isinstance(source, str):
        try:
            source = textwrap.dedent(inspect.getsource(answer))
        except (OSError, TypeError):
            return None
        if not re.match(rf"(def|class) {re.escape(own)}\b", source) or answer.__qualname__ != own:
            return None  # a closure or a method of a factory
        if re.search(r"\b(_bpe|_merge|greedy_variant|beam_variant)\b", source):
            return None  # written with the checks' own helpers
    withheld = {ex.name for ex in exercises_of(get_exercise(name).chapter)}
    prelude = []
    for used in sorted(set(re.findall(r"\bsolutions\.(\w+)\b(?!\.)", source)) & withheld):
        prelude.append(_withheld_reference(used, chapter_nb))
        source = source.replace(f"solutions.{used}", f"_reference_{used}")
    source = re.sub(rf"^(def|class) {re.escape(own)}\b", rf"\1 {name}", source, count=1, flags=re.M)
    return "\n\n".join(prelude + [source])


def _related(name: str) -> set[str]:
    """The exercises ``name`` uses, directly or through another (``Exercise.uses``)."""
    found, stack = set(), [name]
    while stack:
        for used in get_exercise(stack.pop()).uses:
            if used not in found:
                found.add(used)
                stack.append(used)
    return found


@functools.cache  # read-only tables, built once per chapter: the tests below only read them
def sandbox_rounds(chapter: str) -> tuple[list[dict], list[tuple], list[tuple]]:
    """The notebooks that grade ``chapter``'s mutants and styles: round 0 holds every
    style; each mutant of ``BROKEN`` then ``SLIPS`` goes to the first round that holds no
    other mutant of its exercise and none of an exercise it uses or that uses it (those
    keep the source's reference cell there). So each mutant is judged beside correct
    answers of what it calls: a failing earlier answer in its notebook would regrade it
    (two sandbox starts, the references' and the student's, per mutant) only to give back
    what that answer cost; the regrade itself is tested where it is the subject
    (test_grading, test_checks_sandboxed, test_fairness_class).

    Returns the rounds (``{exercise: cell}``), the rows each round asserts: ``(round,
    exercise, parts lost (empty for full marks), words naming the mistake, words that must
    not be said)``, and the mutants no cell can hold (``(exercise, answer name)``), which
    the in-process test judges alone."""
    nb = nbformat.read(str(BOOK / chapter / f"{chapter}.ipynb"), as_version=4)
    names = [ex.name for ex in exercises_of(chapter)]
    rounds: list[dict] = [{n: STYLES[n] for n in names}]
    rows: list[tuple] = [(0, n, set(), "", ()) for n in names]
    left_out = []

    def add(name, cell, lost, said, not_said):
        k = 1
        while k < len(rounds) and (name in rounds[k] or any(
                other in _related(name) or name in _related(other) for other in rounds[k])):
            k += 1
        if k == len(rounds):
            rounds.append({})
        rounds[k][name] = cell
        rows.append((k, name, lost, said, not_said))

    for name, index, answer, mistake in BROKEN:
        if name in names:
            cell = mutant_cell(name, answer, nb)
            if cell is None:
                left_out.append((name, getattr(answer, "__name__", "?")))
            else:
                add(name, cell, {part(name, index)}, mistake, NOT_SAID.get(answer, ()))
    for name, cell, indices, mistake in SLIPS:
        if name in names:
            add(name, cell, {part(name, i) for i in indices}, mistake, ())
    return rounds, rows, left_out


def grade_round(chapter: str, folder: Path, cells: dict) -> dict:
    """Grade, through ``grade_submission`` (the sandbox, hidden cases of a fixed seed), the
    chapter's notebook with the solution cells ``cells`` replaced. Only those exercises
    are graded, with the earlier exercises they may call (``Exercise.uses``: the grader
    runs the solution cells of graded exercises only): the source given to the grader is
    the chapter's own notebook without the other exercises' test cells.
    Returns ``{exercise: ExerciseScore}``."""
    from autograder.grading import grade_submission

    graded, stack = set(cells), list(cells)
    while stack:
        for used in get_exercise(stack.pop()).uses:
            if used not in graded:
                graded.add(used)
                stack.append(used)
    source = nbformat.read(str(BOOK / chapter / f"{chapter}.ipynb"), as_version=4)
    submission = fixtures.submission_with(source, **cells)
    source.cells = [c for c in source.cells
                    if not (c.get("metadata", {}).get("nbgrader", {}).get("grade")
                            and not c.metadata["nbgrader"].get("solution")
                            and c.metadata["nbgrader"].get("grade_id", "").removeprefix("test_") not in graded)]
    source_path = fixtures.write_notebook(source, folder / "source" / f"{chapter}.ipynb")
    submitted = fixtures.write_notebook(submission, folder / "submission.ipynb")
    return {s.exercise: s for s in grade_submission(source_path, submitted, seed=7).scores}


def test_the_sandbox_rounds_hold_every_mutant():
    """Every mutant is a cell a notebook can hold, so the sandboxed grader judges each one
    (a factory's closure or an answer over the checks' helpers needs its ``.cell``)."""
    left = [row for chapter in CHAPTERS for row in sandbox_rounds(chapter)[2]]
    assert left == [], left
    rows = [row for chapter in CHAPTERS for row in sandbox_rounds(chapter)[1] if row[2]]
    assert len(rows) == len(BROKEN) + len(SLIPS)
    # no mutant is judged beside a failing answer it calls (which would regrade it)
    for chapter in CHAPTERS:
        for k, cells in enumerate(sandbox_rounds(chapter)[0][1:], start=1):
            assert not [(n, u) for n in cells for u in get_exercise(n).uses if u in cells], (chapter, k, sorted(cells))


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_sandboxed_grader_rejects_each_mutant_and_accepts_each_style(chapter, tmp_path, needs_sandbox):
    """Each chapter's notebooks graded by ``grade_submission`` (hidden cases, the
    sandbox's redaction): a mutant loses exactly its part and the feedback names its
    mistake; every style earns full marks."""
    rounds, rows, _ = sandbox_rounds(chapter)
    graded = [grade_round(chapter, tmp_path / f"round{k}", cells) for k, cells in enumerate(rounds)]
    for k, name, want, mistake, not_said in rows:
        score = graded[k][name]
        if not want:
            assert score.status == "passed" and score.score == score.max_score, score
            continue
        lost = {p.name for p in score.parts if p.score < p.points}
        assert lost == want, (k, name, score)
        feedback = " ".join([score.reason] + [p.hint + " " + p.message for p in score.parts] + score.notes)
        assert mistake in feedback, (k, name, mistake, score)
        assert not [w for w in not_said if w in feedback], (k, name, not_said, score)
