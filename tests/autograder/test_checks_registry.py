"""The registry of checks against the exercise contract (``shared/EXERCISES.md``).

Every graded object of the contract has exactly one registered ``Exercise`` under
its exact name, in the module of its chapter, with the chapter id and the kind
("function" or "class") of its reference; and the reference in ``solutions``
passes its own visible and hidden checks.
"""
import inspect
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

import solutions
from autograder.checks import REGISTRY, Exercise, check, load_all
from autograder.checks.base import ADVICE, make_rng

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py: tiny tensors, one thread

# The contract, chapter id -> graded names, in the order of EXERCISES.md.
CONTRACT = {
    "01_rnn_limitations": ["rnn_forward", "hidden_state_jacobian_norms"],
    "02_tokens_and_embeddings": ["build_vocab", "encode", "learn_bpe", "bpe_tokenize", "one_hot",
                                 "cosine_similarity", "TokenEmbedding"],
    "03_positional_encoding": ["sinusoidal_positional_encoding", "PositionalEncoding", "relative_position_matrix"],
    "04_self_attention": ["softmax", "scaled_dot_product_attention", "self_attention"],
    "05_multi_head_attention": ["split_heads", "merge_heads", "MultiHeadAttention"],
    "06_masking": ["padding_mask", "causal_mask", "decoder_mask", "masked_softmax"],
    "07_add_and_norm": ["layer_norm", "PositionwiseFeedForward", "ResidualSublayer", "EncoderLayer"],
    "08_transformer": ["DecoderLayer", "Transformer", "count_parameters"],
    "09_training": ["make_decoder_io", "noam_lr", "label_smoothed_cross_entropy"],
    "10_inference": ["greedy_decode", "beam_search"],
    "11_real_german": ["sentence_statistics", "bootstrap_bleu"],
}
CHAPTER_OF = {name: chapter for chapter, names in CONTRACT.items() for name in names}

# The contract, kept in the repository (a fresh clone has no design folder beside it); in the
# authors' workspace the shared original sits beside the repository and must equal the copy.
EXERCISES_MD = Path(__file__).resolve().parents[1] / "data" / "EXERCISES.md"
SHARED_EXERCISES_MD = Path(__file__).resolve().parents[3] / "shared" / "EXERCISES.md"


def parse_contract(text):
    """Chapter id -> graded names, read from the text of EXERCISES.md."""
    contract, chapter = {}, None
    for line in text.splitlines():
        heading = re.match(r"^## \d+ · .*\(`(\w+)`\)", line)
        if heading:
            chapter = heading.group(1)
            contract[chapter] = []
            continue
        item = re.match(r"^- `(\w+)\(", line)
        if item and chapter:
            contract[chapter].append(item.group(1))
    return contract


def test_the_table_above_is_the_contract():
    text = EXERCISES_MD.read_text(encoding="utf-8")
    assert parse_contract(text) == CONTRACT
    if SHARED_EXERCISES_MD.is_file():  # the authors' workspace: the copy must not drift from the original
        original = _sections(SHARED_EXERCISES_MD.read_text(encoding="utf-8"))
        copy = _sections(text)
        # The original fixes what instructors rely on: the copy may add a chapter's section (chapter 11's
        # exercise came after it), never rename, drop or change one of the original's.
        changed = [heading for heading, body in original.items() if copy.get(heading) != body]
        assert not changed, f"tests/data/EXERCISES.md renames, drops or changes the original's sections {changed}"


def _sections(text):
    """EXERCISES.md's sections by heading line (``## 4 · ...``); the text before the first is ``""``."""
    sections, heading = {"": []}, ""
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line
            sections[heading] = []
        else:
            sections[heading].append(line)
    return {heading: "\n".join(lines).strip() for heading, lines in sections.items()}


def test_the_copy_of_the_contract_may_add_a_section_but_not_change_one():
    original = "intro\n## 1 · A (`01_a`)\n- `f(x) -> y`: text\n"
    assert _sections(original + "\n## 2 · B (`02_b`)\n- `g(x)`: more\n")["## 1 · A (`01_a`)"] == "- `f(x) -> y`: text"
    assert _sections(original.replace("f(x)", "h(x)"))["## 1 · A (`01_a`)"] != _sections(original)["## 1 · A (`01_a`)"]


def test_parse_contract_reads_headings_and_items():
    text = "## 1 · Title (`01_x`)\nprose\n- `f(a) -> b`: text\n- `G(d)` (torch): text\n  - `not_an_item(`\n"
    assert parse_contract(text) == {"01_x": ["f", "G"]}


def test_every_contract_exercise_is_registered():
    registry = load_all()
    missing = sorted(set(CHAPTER_OF) - set(registry))
    assert not missing, f"no registered check for {missing}"


def test_registered_exercises_belong_to_known_chapters():
    for name, exercise in load_all().items():
        assert exercise.chapter in CONTRACT, f"{name}: unknown chapter {exercise.chapter!r}"


def _exercise_classes():
    """Every Exercise subclass defined in a chapter module, registered or not."""
    load_all()
    seen, stack = [], list(Exercise.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("autograder.checks.ch") and cls.name:
            seen.append(cls)
    return seen


@pytest.mark.parametrize("name", list(CHAPTER_OF))
def test_exactly_one_exercise_class_per_name(name):
    classes = [cls for cls in _exercise_classes() if cls.name == name]
    assert len(classes) == 1, f"{name}: {[c.__qualname__ for c in classes]}"
    assert type(REGISTRY[name]) is classes[0]


@pytest.mark.parametrize("name", list(CHAPTER_OF))
def test_chapter_module_and_kind_match_the_contract(name):
    exercise = load_all()[name]
    chapter = CHAPTER_OF[name]
    assert exercise.chapter == chapter
    module = type(exercise).__module__.rsplit(".", 1)[-1]
    assert module.startswith(f"ch{chapter[:2]}_"), module
    reference = getattr(solutions, name)
    assert exercise.kind == ("class" if inspect.isclass(reference) else "function")
    assert exercise.what, f"{name}: say what the checks cover"


@pytest.mark.parametrize("name", list(CHAPTER_OF))
def test_reference_passes_its_own_visible_and_hidden_checks(name, capsys):
    reference = getattr(solutions, name)
    check(name, reference)
    check(name, reference, hidden=True)
    out = capsys.readouterr()
    assert out.out.count(f"✓ {name}") == 2
    assert out.err == ""


def _inputs(cases) -> bytes:
    """Everything a case feeds the answer (arrays included), as bytes."""
    return pickle.dumps([(c.args, c.kwargs, c.init, c.state) for c in cases])


@pytest.mark.parametrize("name", list(CHAPTER_OF))
def test_hidden_cases_are_more_than_the_visible_and_fresh_each_run(name):
    exercise = load_all()[name]
    visible = exercise.cases(make_rng(hidden=False), hidden=False)
    first = exercise.cases(make_rng(hidden=True), hidden=True)
    second = exercise.cases(make_rng(hidden=True), hidden=True)
    assert len(first) > len(visible)
    assert _inputs(first) != _inputs(second), "two hidden runs drew the same inputs"
    # the control: one seed draws the same inputs twice, so the difference above is the draw's
    seeded = [exercise.cases(make_rng(hidden=True, seed=3), hidden=True) for _ in range(2)]
    assert _inputs(seeded[0]) == _inputs(seeded[1])


# --------------------------------------------------------------------------- the grading rules

# Where EXERCISES.md names an error for an exercise, that error is graded; every
# other expected error is advice worth no points ("How an answer is graded").
NAMED_ERRORS = {"sinusoidal_positional_encoding", "split_heads", "noam_lr", "cosine_similarity",
                "PositionalEncoding", "Transformer"}


def _cases(name, hidden):
    return load_all()[name].cases(np.random.default_rng(7), hidden)


@pytest.mark.parametrize("name", list(CHAPTER_OF))
def test_points_are_split_over_two_to_five_named_parts(name):
    parts = type(load_all()[name]).parts
    assert 2 <= len(parts) <= 5, f"{name}: {len(parts)} parts {list(parts)}"
    assert all(isinstance(p, (int, float)) and p > 0 for p in parts.values()), parts
    assert all(n and n != ADVICE for n in parts), parts


@pytest.mark.parametrize("name", list(CHAPTER_OF))
def test_every_part_has_a_visible_case_and_every_case_a_part(name):
    exercise = load_all()[name]
    for hidden in (False, True):
        seen = {exercise.part_of(case) for case in _cases(name, hidden)}  # raises on an unknown part
        missing = set(exercise.parts) - seen
        assert not missing, f"{name}: no {'hidden' if hidden else 'visible'} case for parts {sorted(missing)}"


@pytest.mark.parametrize("name", list(CHAPTER_OF))
def test_errors_are_graded_only_where_the_contract_names_them(name):
    exercise = load_all()[name]
    graded_errors = [c.label for c in _cases(name, True) if c.expect_error and exercise.part_of(c) != ADVICE]
    if name in NAMED_ERRORS:
        assert graded_errors, f"{name}: the contract names an error; a part must grade it"
    else:
        assert not graded_errors, f"{name}: errors the contract does not name are graded: {graded_errors}"


@pytest.mark.parametrize("name", list(CHAPTER_OF))
def test_uses_names_earlier_exercises_of_the_same_chapter(name):
    uses = type(load_all()[name]).uses
    names = CONTRACT[CHAPTER_OF[name]]
    for dep in uses:
        assert dep in names and names.index(dep) < names.index(name), f"{name}.uses: {dep}"
