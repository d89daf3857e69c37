"""Every graded part has a single-rule mutant (issue 38, item 2), or a written reason why
none exists yet.

``test_part_isolation.BROKEN`` holds the mutants: each is the reference with the rule of
one part broken, and loses that part alone in the visible check, hidden draws, the
student package's check and (``test_mutants``) the sandboxed grader. This module checks
the table's reach mechanically, over every registered exercise and every part its prompt
lists, so that a new part (or a part a table edit left uncovered) is a conscious choice.
"""
from __future__ import annotations

from autograder.checks import get_exercise, load_all
from test_part_isolation import BROKEN, part

# (exercise, part index) -> why no mutant breaks that part's rule alone. Each is a known
# gap, not a pass.
WITHOUT_A_MUTANT: dict[tuple[str, int], str] = {
    ("encode", 0): "the lookup of a known token is what every other part's ids rest on: no plausible "
                   "mistake found that changes known tokens' ids and leaves <unk> and the whitespace right",
    ("beam_search", 0): "keeping beam_size prefixes shows only on the hand-built models, whose other cases "
                        "(beam_size=1, the penalty, finished hypotheses) each need their own tolerated variant",
    ("beam_search", 1): "beam_size=1 is greedy whenever the bookkeeping is right: a mistake visible only at "
                        "beam_size=1 also changes the wider beams",
    ("beam_search", 3): "returning the first hypothesis to end is, on the penalty part's cases, what comparing "
                        "without the penalty returns (test_part_isolation's note on BROKEN)",
}


def test_every_part_has_a_single_rule_mutant_or_a_reason():
    """The parts of all registered exercises: each has a row of ``BROKEN`` or is listed
    in ``WITHOUT_A_MUTANT``, never both; every listed part exists."""
    every = {(name, index) for name in load_all() for index in range(len(get_exercise(name).part_points()))}
    covered = {(name, index) for name, index, _, _ in BROKEN}
    listed = set(WITHOUT_A_MUTANT)
    assert listed <= every, sorted(listed - every)
    assert not covered & listed, sorted(covered & listed)
    missing = every - covered - listed
    assert not missing, [f"{n} [{i}] {part(n, i)}" for n, i in sorted(missing)]
