"""``similarity``: two copied submissions among honest ones are found; honest students who
wrote the short canonical answer are not flagged; the released stub never counts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.book import BOOK
from autograder.cli import main
from autograder.similarity import Settings, compare_class, read_class, render_html, stub_cells

CH = "04_self_attention"
EXERCISES = ["softmax", "scaled_dot_product_attention", "self_attention"]
CANONICAL_SOFTMAX = """\
e = np.exp(x - x.max(axis=axis, keepdims=True))
return e / e.sum(axis=axis, keepdims=True)"""

HONEST = {
    "honest1": {
        "softmax": CANONICAL_SOFTMAX,
        "scaled_dot_product_attention": """\
d_k = q.shape[-1]
scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)
weights = softmax(scores, axis=-1)
return weights @ v, weights""",
        "self_attention": """\
return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v)""",
    },
    "honest2": {
        "softmax": CANONICAL_SOFTMAX,
        "scaled_dot_product_attention": """\
scale = 1.0 / math.sqrt(k.shape[-1])
logits = np.einsum("...qd,...kd->...qk", q, k) * scale
attn = softmax(logits)
out = np.einsum("...qk,...kv->...qv", attn, v)
return out, attn""",
        "self_attention": """\
queries = np.matmul(x, W_q)
keys = np.matmul(x, W_k)
values = np.matmul(x, W_v)
return scaled_dot_product_attention(queries, keys, values)""",
    },
    "honest3": {
        "softmax": CANONICAL_SOFTMAX,
        "scaled_dot_product_attention": """\
kt = np.moveaxis(k, -1, -2)
s = np.matmul(q, kt)
s = s / (q.shape[-1] ** 0.5)
w = softmax(s, -1)
return np.matmul(w, v), w""",
        "self_attention": """\
projected = [x @ W for W in (W_q, W_k, W_v)]
return scaled_dot_product_attention(*projected)""",
    },
    "honest4": {
        "softmax": """\
x = np.asarray(x, dtype=float)
m = np.max(x, axis=axis, keepdims=True)
z = np.exp(x - m)
total = np.sum(z, axis=axis, keepdims=True)
return z / total""",
        "scaled_dot_product_attention": """\
n = q.shape[-1]
raw = (q @ k.transpose(*range(k.ndim - 2), k.ndim - 1, k.ndim - 2)) / np.sqrt(n)
probs = softmax(raw)
return probs @ v, probs""",
        "self_attention": """\
q, k, v = (np.dot(x, W) for W in (W_q, W_k, W_v))
return scaled_dot_product_attention(q, k, v)""",
    },
}

COPIED_SDPA = """\
q = np.asarray(q, dtype=np.float64)
k = np.asarray(k, dtype=np.float64)
v = np.asarray(v, dtype=np.float64)
if q.shape[-1] != k.shape[-1]:
    raise ValueError("the last axes of q and k differ")
depth = q.shape[-1]
batch_shape = q.shape[:-2]
scores = np.zeros(batch_shape + (q.shape[-2], k.shape[-2]))
for i in range(q.shape[-2]):
    for j in range(k.shape[-2]):
        scores[..., i, j] = np.sum(q[..., i, :] * k[..., j, :], axis=-1) / np.sqrt(depth)
weights = softmax(scores, axis=-1)
output = np.zeros(batch_shape + (q.shape[-2], v.shape[-1]))
for i in range(q.shape[-2]):
    output[..., i, :] = np.sum(weights[..., i, :, None] * v, axis=-2)
return output, weights"""
COPIED_SELF = """\
x = np.asarray(x, dtype=np.float64)
if W_q.shape[0] != x.shape[-1] or W_k.shape[0] != x.shape[-1]:
    raise ValueError("the projections do not fit x")
projections = []
for matrix in (W_q, W_k, W_v):
    projections.append(np.tensordot(x, matrix, axes=([-1], [0])))
result, attention = scaled_dot_product_attention(projections[0], projections[1], projections[2])
return result, attention"""


def rename(code: str, names: dict[str, str]) -> str:
    import re

    for old, new in names.items():
        code = re.sub(rf"\b{old}\b", new, code)
    return code


COPIERS = {
    "copier_a": {"softmax": CANONICAL_SOFTMAX, "scaled_dot_product_attention": COPIED_SDPA,
                 "self_attention": COPIED_SELF},
    # the same work with every local renamed and a comment added: identifiers do not count
    "copier_b": {"softmax": CANONICAL_SOFTMAX,
                 "scaled_dot_product_attention": "# my own attention\n" + rename(COPIED_SDPA, {
                     "depth": "dk", "batch_shape": "lead", "scores": "S", "weights": "A", "output": "Y",
                     "i": "row", "j": "col"}),
                 "self_attention": rename(COPIED_SELF, {"projections": "qkv", "matrix": "W", "result": "out",
                                                       "attention": "attn"})},
}


def submission(stubs: dict[str, str], answers: dict[str, str]) -> dict:
    return submission_for(BOOK, CH, stubs, answers)


def submission_for(book: Path, chapter: str, stubs: dict[str, str], answers: dict[str, str]) -> dict:
    """The chapter's notebook with each solution cell = the released stub, the answer in place
    (no answer: the stub as released)."""
    nb = json.loads((book / chapter / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if name in stubs and cell["metadata"]["nbgrader"].get("solution"):
            stub = stubs[name]  # as released: the answer goes where the stub raises
            assert "raise NotImplementedError()" in stub
            cell["source"] = stub if name not in answers else stub.replace(
                "    # YOUR CODE HERE\n    raise NotImplementedError()", textwrap.indent(answers[name], "    "))
    return nb


@pytest.fixture(scope="module")
def stubs():
    return stub_cells(CH, BOOK)


@pytest.fixture
def submitted(tmp_path, stubs):
    root = tmp_path / "submitted"
    for student, answers in {**HONEST, **COPIERS}.items():
        path = root / student / CH / f"{CH}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(submission(stubs, answers)), encoding="utf-8")
    blank = root / "blank" / CH / f"{CH}.ipynb"  # a student who handed in the released notebook
    blank.parent.mkdir(parents=True)
    blank.write_text(json.dumps(submission(stubs, {})), encoding="utf-8")
    (root / "broken" / CH).mkdir(parents=True)
    (root / "broken" / CH / f"{CH}.ipynb").write_text("{not json", encoding="utf-8")
    return root


def test_copied_pair_found_and_honest_canonical_answers_not_flagged(submitted, stubs):
    answers, skipped = read_class(submitted, CH, EXERCISES)
    assert skipped == {"broken": "not readable (JSONDecodeError)"}
    report = compare_class(answers, stubs, CH, Settings(), skipped)
    flagged = [(p.a, p.b) for p in report.flagged]
    assert flagged == [("copier_a", "copier_b")], [(p.a, p.b, round(p.score, 2)) for p in report.pairs[:6]]
    top = report.pairs[0]
    assert top.score >= 0.9
    # the canonical softmax the honest students share is too short to count, and the class's
    # common code is ignored: no honest pair comes near the threshold
    honest = [p for p in report.pairs if p.a.startswith("honest") and p.b.startswith("honest")]
    assert not any(p.flagged for p in honest) and max(p.score for p in honest) < Settings().threshold
    softmax = next(m for m in top.matches if m.exercise == "softmax")
    assert not softmax.counted
    # the stub never counts: two blank notebooks (only the stub) share nothing
    blank_pairs = [p for p in report.pairs if "blank" in (p.a, p.b)]
    assert all(p.score == 0 and not p.flagged for p in blank_pairs)


def test_two_honest_students_with_the_canonical_softmax_alone(submitted, stubs):
    """Two of three write the one-line softmax (not common enough to be ignored as the
    class's): it is too short to tell apart, so it is left out of their score."""
    answers, _ = read_class(submitted, CH, EXERCISES)
    small = {s: answers[s] for s in ("honest1", "honest2", "honest4")}
    report = compare_class(small, stubs, CH)
    pair = next(p for p in report.pairs if (p.a, p.b) == ("honest1", "honest2"))
    softmax = next(m for m in pair.matches if m.exercise == "softmax")
    assert softmax.matched_a == softmax.written_a > 0  # the same code...
    assert not softmax.counted and not pair.flagged  # ...too short to count
    assert report.flagged == []


def test_page_states_the_rules_and_escapes_code(submitted, stubs, tmp_path):
    answers, skipped = read_class(submitted, CH, EXERCISES)
    answers["copier_a"]["self_attention"] += "\n# </pre><script>alert(1)</script>"
    page = render_html(compare_class(answers, stubs, CH, Settings(), skipped))
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "60 %" in page and "released stub" in page and "one-line softmax" in page
    assert page.count('class="flag">flagged') >= 2 and "<mark>" in page
    assert "copier_a · copier_b" in page
    import re

    links = set(re.findall(r'href="#(pair-\d+)"', page))
    assert links and links <= set(re.findall(r'id="(pair-\d+)"', page))  # every link has its section


def test_similarity_command(submitted, tmp_path, capsys):
    dest = tmp_path / "sim.html"
    code = main(["similarity", str(submitted), "--chapter", CH, "--to", str(dest)])
    out = capsys.readouterr().out
    assert code == 0 and "copier_a · copier_b" in out and "1 pair(s) flagged" in out
    assert dest.is_file()
    code = main(["similarity", str(submitted), "--chapter", CH, "--to", str(dest), "--threshold", "1.5"])
    assert code == 2


def test_the_fingerprints_are_the_same_in_every_process():
    """copydetect hashes with Python's per-process salted ``hash``: the counts of a pair
    moved between runs (an exercise near ``min_tokens`` counted in one, not the next)."""
    code = ("from autograder.similarity import Settings, _fingerprint\n"
            "print(sorted(int(h) for h in _fingerprint('def softmax(x):\\n    e = x - x.max()\\n    return e', "
            "Settings(), None).hashes))")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(runs) == 1 and runs != {"[]\n"}, runs
