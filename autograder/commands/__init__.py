"""The commands of ``python -m autograder``, one module per concern: grading a class and
handing out its results (:mod:`.grade`), a notebook's checks and the self-test
(:mod:`.check`), the term's (:mod:`.term`), and what every grading command decides the same
way (:mod:`.runs`). :mod:`autograder.cli` builds the parser and calls them."""
