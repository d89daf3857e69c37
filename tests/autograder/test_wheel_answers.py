"""No student wheel holds an answer of its own chapter or a later one, by behaviour (issue 36, attack 1).

:mod:`wheel_audit` puts every function and class of each chapter's student package in
the place of every exercise of that chapter and of the later ones (a one-line wrapper:
the object itself, called as the exercise is) and grades it with the hidden checks; a
part it earns that a blank answer does not is an answer the wheel ships. The shipped
check modules are read too: no case maker and no hidden-case branch ship, and every
helper outside a check's verdict ships as recorded results.

The packages are the wheels of the release of every chapter (``released_packages``),
read back from the wheel files: what ships is what is audited, and the release's
packages (about 40 CPU s, each chapter's stand-ins and check helpers recorded) are
built once per run for this module and the two release modules, on one worker (the
xdist group ``"releases"``).
"""
from __future__ import annotations

import ast

import numpy as np
import pytest
import torch

import wheel_audit
from autograder.book import BOOK, chapter_ids
from autograder.student.hints import withhold_helpers
from autograder.student.standin_modules import RECORDED_FILE

# One intra-op thread for the whole file, its module-scoped fixtures included (tests/conftest.py):
# the audit runs thousands of tiny torch calls, which extra threads only slow on a shared machine.
pytestmark = [pytest.mark.xdist_group("releases"), pytest.mark.usefixtures("one_torch_thread_for_module")]


class _Built(dict):
    """Chapter -> what ``make(chapter)`` gives, made at the first use and kept (a test
    that needs one chapter's wheel imports only that one)."""

    def __init__(self, make):
        super().__init__()
        self.make = make

    def __missing__(self, chapter):
        self[chapter] = value = self.make(chapter)
        return value


@pytest.fixture(scope="module")
def wheels(released_packages, tmp_path_factory):
    """Every chapter's wheel imported once (under ``wheel_<chapter>``): chapter -> its objects."""
    root = tmp_path_factory.mktemp("wheels")
    return _Built(lambda chapter: wheel_audit.load_wheel(chapter, BOOK, root, released_packages[chapter][0]))


@pytest.mark.slow
def test_no_object_of_any_wheel_earns_a_part_of_its_chapter_or_a_later_one(wheels, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)
    found = wheel_audit.audit(chapter_ids(BOOK), BOOK, tmp_path / "wheels", wheels=wheels)
    assert found == [], found


def test_a_blank_answer_and_a_copied_check_helper_earn_nothing_beyond_it(wheels):
    """The audit itself: the reference earns every part, the chapter 4 wheel's check helpers none."""
    import solutions
    from autograder.checks.base import get_exercise

    softmax = get_exercise("softmax")
    cases = list(wheel_audit.hidden_cases("softmax", 1))
    assert wheel_audit.earned_parts(softmax, solutions.softmax, cases) == set(softmax.parts)
    assert wheel_audit.earned_parts(softmax, wheel_audit._blank(softmax), cases) == set()
    helper = dict(wheels["04_self_attention"])["autograder.checks.ch04_self_attention._softmax"]
    assert wheel_audit.earned_parts(softmax, helper, cases) == set()  # a replay: no recorded result for these


@pytest.fixture(scope="module")
def shipped_checks(released_packages):
    """Every chapter's shipped check modules: (chapter, module name) -> text."""
    texts = {}
    for chapter in chapter_ids(BOOK):
        files, _ = released_packages[chapter]
        for name, data in files.items():
            if name.startswith("autograder/checks/ch") and name.endswith(".py"):
                texts[(chapter, name)] = data.decode("utf-8")
    return texts


@pytest.mark.slow
def test_shipped_check_modules_hold_no_case_maker_and_no_hidden_branch(shipped_checks):
    assert shipped_checks
    for (chapter, name), text in shipped_checks.items():
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("cases", "_cases"):
                assert len(node.body) == 1 and isinstance(node.body[0], ast.Raise), (chapter, name, node.name)
            if isinstance(node, ast.If):
                names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
                assert "hidden" not in names, (chapter, name, node.lineno)


def test_helpers_outside_the_verdict_are_withheld_whatever_their_lines():
    text = ("def _variant(x):\n    return x.exp() / x.exp().sum()\n\n\n"
            "def _same(a, b):\n    return a == b\n\n\n"
            "class Ex:\n    def cases(self, rng, hidden):\n        if hidden:\n            return [1]\n        return []\n\n"
            "    def judge(self, case, got, want):\n        return _same(got, want)\n\n"
            "    def diagnose(self, case, got, want):\n        return _variant(case)\n")
    out, withheld = withhold_helpers(text, set(), "chX")
    assert withheld == ["Ex.cases", "_variant"]  # no line of an answer in it: withheld by what it is
    assert "x.exp()" not in out and "if hidden" not in out and "return a == b" in out
    assert "return _replay('chX._variant', {'x': x})" in out
    compile(out, "<withheld>", "exec")


def test_a_recorded_stand_in_serves_its_chapters_calls_and_no_other(released_packages, wheels):
    files, info = released_packages["02_tokens_and_embeddings"]
    assert "sinusoidal_positional_encoding" in info.standins and RECORDED_FILE in files
    assert "np.exp(1j" not in files["solutions/_standins.py"].decode()  # no code computes the table
    objects = dict(wheels["02_tokens_and_embeddings"])
    table = objects["solutions._standins.sinusoidal_positional_encoding"]
    import solutions

    assert np.allclose(table(64, 512), solutions.sinusoidal_positional_encoding(64, 512))
    with pytest.raises(LookupError, match="only for the calls this chapter makes"):
        table(10, 4)


def test_chapter_9_translates_with_its_greedy_decode_stand_in(monkeypatch):
    """Chapter 9's wheel decodes with the stand-in, which serves ``translate``'s calls only
    (and so earns nothing of chapter 10's check): through ``translate``, as the chapter's
    cells and its ``Trainer`` call it, the translations are the reference's."""
    import solutions
    from autograder.student import standins
    from solutions import translation
    from solutions.app.tokenizer import build_tokenizer

    pairs = [("the cat sat", "le chat"), ("a dog", "un chien est la"), ("the dog sat on a cat", "le chien")]
    src_tokenizer = build_tokenizer((s for s, _ in pairs), "word")
    tgt_tokenizer = build_tokenizer((t for _, t in pairs), "word")
    torch.manual_seed(0)
    model = solutions.Transformer(len(src_tokenizer), len(tgt_tokenizer), d_model=16, num_heads=2,
                                  num_encoder_layers=1, num_decoder_layers=1, d_ff=32, dropout=0.0, max_len=40)
    with torch.no_grad():
        model.generator.bias[2] += 1.5  # <eos> likelier: decoding may stop before max_len
    sentences = [s for s, _ in pairs]
    want = translation.translate(model, sentences, src_tokenizer, tgt_tokenizer)
    monkeypatch.setattr(translation, "greedy_decode", standins.greedy_decode)  # as the wheel's translation.py
    assert translation.translate(model, sentences, src_tokenizer, tgt_tokenizer) == want
