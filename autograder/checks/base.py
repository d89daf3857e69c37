"""The checks API: exercises, cases, judging, and the visible ``check()``.

This module is what a chapter's check module (``chNN_<topic>.py``) and
``from autograder import check`` import: it gathers, by name, the API kept in one module
per concept (every name re-exported here is defined there):

* :mod:`~autograder.checks.cases`: :class:`Case`, :class:`Result`, :class:`CheckFailure`, ``ADVICE``;
* :mod:`~autograder.checks.compare`: :func:`compare`, :func:`dtype_verdict`, :func:`as_array`,
  :func:`close`, and the redaction rule (:func:`redacting`, :func:`shown`);
* :mod:`~autograder.checks.exercise`: :class:`Exercise`, the registry (:func:`register`,
  :func:`get_exercise`), what an answer's errors say, ``PROCESS_STATE``;
* :mod:`~autograder.checks.precomputed`: the student package's stored expected results;
* :mod:`~autograder.checks.draws`: :func:`make_rng`, :func:`draw_cases`, :func:`visible_cases`,
  :func:`public_labels`;
* :mod:`~autograder.checks.scoring`: :func:`evaluate`, :class:`Report`, :class:`PartResult`, :class:`Points`;
* :mod:`~autograder.checks.dependencies`: one mistake charged once (notes, the better grade);
* :mod:`~autograder.checks.visible`: :func:`check`, :func:`check_report`, :func:`last_verdict`.

An :class:`Exercise` describes one contract exercise (``shared/EXERCISES.md``):

* :meth:`Exercise.cases` makes the inputs — pure data, from a random generator the
  caller seeds (fresh for hidden checks, so memorising answers does not pay);
* :meth:`Exercise.expected` computes the reference result with ``solutions``, in
  the trusted process only;
* :meth:`Exercise.judge` compares a result with the reference and, on a mismatch,
  raises :class:`CheckFailure` with a message that names the likely mistake.

The same three methods serve the visible check (``check(name, obj)`` in the
student's kernel) and the trusted grader (which ships the cases into the sandbox,
runs them with :mod:`autograder.runner`, and judges the returned data outside).

Hidden cases, one rule: :func:`evaluate` with ``hidden=True`` judges under
:func:`redacting`. There every message names the mistake without quoting a value
that came from, or was computed from, the inputs: :func:`compare` says kinds,
shapes, dtypes, counts ("3 of 12 entries differ"), the largest error and where it
is, never an element, a returned string or key, or an expected value; the
checks' own hints format values through :func:`shown`, which describes a value
instead of quoting it. The whole hidden set is judged so, its visible cases too:
they ran in the same sandbox as the hidden inputs, so what they returned may carry
them. A case's label is shown only when it is fixed text (the same in every
draw of the cases, :func:`public_labels`): a label such as "random corpus [...]"
spells out its inputs. The check in the student's own kernel (:func:`check`, even with
``hidden=True``: the inputs are made in that kernel) keeps its detailed messages.
"""
from __future__ import annotations

# The check authors' API, re-exported from the modules that define it (see above): the
# chapter modules and ``autograder.check`` import it from here, as ARCHITECTURE.md §3 says.
from ..wire import Obj, Tensor
from .cases import ADVICE, Case, CheckFailure, Result
from .compare import as_array, close, compare, dtype_verdict, redacting, shown
from .dependencies import called_dependencies, charged_once, dependency_note, dependency_unchanged_note
from .draws import draw_cases, make_rng, public_labels, visible_cases
from .exercise import (NOT_IMPLEMENTED, PROCESS_STATE, REGISTRY, Exercise, accept_own_state, get_exercise,
                       load_state_hint, own_code_message, register)
from .precomputed import Precomputed, precomputed, use_precomputed
from .scoring import PartResult, Points, Report, evaluate, run_cases
from .visible import check, check_report, last_verdict

__all__ = [
    "ADVICE",
    "Case",
    "CheckFailure",
    "Exercise",
    "PartResult",
    "Points",
    "Report",
    "Result",
    "REGISTRY",
    "register",
    "get_exercise",
    "check",
    "charged_once",
    "dependency_note",
    "dependency_unchanged_note",
    "check_report",
    "last_verdict",
    "dtype_verdict",
    "called_dependencies",
    "accept_own_state",
    "load_state_hint",
    "evaluate",
    "own_code_message",
    "run_cases",
    "draw_cases",
    "make_rng",
    "as_array",
    "close",
    "compare",
    "Precomputed",
    "use_precomputed",
    "precomputed",
    "visible_cases",
    "public_labels",
    "redacting",
    "shown",
    "NOT_IMPLEMENTED",
    "PROCESS_STATE",
    "Tensor",
    "Obj",
]
