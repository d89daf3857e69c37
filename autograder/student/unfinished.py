"""A blank exercise stops the cells that need it with one line, not a traceback.

A released notebook's demonstrations call the student's own answers (ARCHITECTURE.md
§7). While an exercise is blank its body is ``raise NotImplementedError()``, and every
demonstration that calls it would print a traceback and stop "Run all". In a student
edition the setup cell's :func:`autograder.student.require_chapter` installs
:class:`UnfinishedGuard` in the IPython kernel, and then:

* a cell that calls a blank exercise (the ``NotImplementedError`` is raised by a
  function or method *defined in the notebook* whose name is an exercise of the
  chapter) stops there and prints one line naming the exercise to finish; the cell
  counts as run, so "Run all" goes on;
* a later cell that needs a name such a cell did not get to define (a ``NameError``
  for it) stops the same way, naming the same exercise;
* ``solutions.<name>`` of an exercise whose cell has not run (``NotReleased``) says so
  in one line;
* a demonstration cell that uses an exercise whose visible check ran in this kernel and
  did not pass (``solutions.<name>`` is the student's answer in a student edition) does
  not run: it prints one line naming the exercise and its score, and counts as run. It
  would show the answer's numbers where the prose explains the reference's, fail on an
  assertion about them, or train a model for minutes on a wrong layer; once the check
  passes, the cell runs;
* after such a stop, a later cell that fails (it may need what the stopped cell would
  have computed: a trained model, a table) says so in one line naming the same
  exercise, until that exercise's check passes.

Every other exception is shown as IPython always shows it, and the cell fails. The
visible check cells and the exercise cells are never stopped: a blank or wrong
exercise's check still fails (nbgrader grades a failing test cell 0). Outside IPython
(``python -m autograder check``, the grading sandbox) nothing is installed.
"""
from __future__ import annotations

import ast

from ..checks import exercises_of
from ..checks.base import CheckFailure, NOT_IMPLEMENTED, last_verdict

__all__ = ["UnfinishedGuard", "install", "exercise_labels", "bound_names", "exercises_used"]


def bound_names(source: str) -> set[str]:
    """The names a cell binds at its top level (assignments, ``for``/``with`` targets,
    ``def``, ``class``, imports), looking inside ``if``/``for``/``while``/``with``/``try``
    blocks but not inside functions or classes.

    Args:
        source: the cell's code, as IPython transformed it (magics already plain Python).

    Returns:
        The names; empty when the source does not parse.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            return
        if isinstance(node, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def exercises_used(source: str, names) -> tuple[list[str], bool]:
    """The exercises of ``names`` that a cell uses (a name it reads, or an attribute such
    as ``solutions.<name>``), in ``names``' order; and whether the cell is one of the
    exercise's own: it defines an exercise (a solution cell) or calls ``check`` (a test
    cell), which are never stopped.

    Args:
        source: the cell's code, as IPython transformed it.
        names: the exercise names, in the notebook's order.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [], True
    wanted = set(names)
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in wanted:
            return [], True
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called == "check":
                return [], True
        if isinstance(node, ast.Name) and node.id in wanted and isinstance(node.ctx, ast.Load):
            used.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in wanted and isinstance(node.ctx, ast.Load):
            used.add(node.attr)
    return [n for n in names if n in used], False


class UnfinishedGuard:
    """IPython hooks that turn a blank exercise's ``NotImplementedError`` into one line.

    Args:
        shell: the IPython shell (``get_ipython()``).
        labels: exercise name -> how the notebook titles it (``"Exercise 6.4"``).
    """

    def __init__(self, shell, labels: dict[str, str]):
        self.shell = shell
        self.labels = dict(labels)
        self.cell = ""
        self.stopped: BaseException | None = None
        #: name a stopped cell did not get to define -> the exercise that stopped it
        self.waiting: dict[str, str] = {}
        #: exercises that stopped a cell, in the order they did
        self.halted: list[str] = []

    def install(self) -> None:
        """Register the exception handler and the two cell events (idempotent per shell)."""
        old = getattr(self.shell, "_transformer_book_guard", None)
        if old is not None:
            old.uninstall()
        self.shell.set_custom_exc((Exception,), self._handle)
        self.shell.events.register("pre_run_cell", self._pre_run_cell)
        self.shell.events.register("post_run_cell", self._post_run_cell)
        self.shell.input_transformers_post.append(self._skip_unready)
        self.shell._transformer_book_guard = self

    def uninstall(self) -> None:
        """Undo :meth:`install`."""
        self.shell.set_custom_exc((), None)
        for event, callback in (("pre_run_cell", self._pre_run_cell), ("post_run_cell", self._post_run_cell)):
            try:
                self.shell.events.unregister(event, callback)
            except ValueError:
                pass
        if self._skip_unready in self.shell.input_transformers_post:
            self.shell.input_transformers_post.remove(self._skip_unready)
        self.shell._transformer_book_guard = None

    # ---- a demonstration of an answer that does not pass its check ---------------------
    def unready(self, name: str) -> str | None:
        """The one line for a cell that uses exercise ``name``, whose check ran in this
        kernel and did not pass; ``None`` when it passed or has not run here."""
        report = last_verdict(name)
        if report is None or report.passed:
            return None
        label = self.labels[name]
        if all(p.message == NOT_IMPLEMENTED for p in report.parts if not p.earned) and report.score == 0:
            return (f"⏸ {label} (`{name}`) is not written yet, so this cell stops here: write it, run its "
                    "cell and its check, then run this cell again.")
        return (f"⏸ This cell runs on your {label} (`{name}`), whose check does not pass yet "
                f"({_num(report.score)}/{_num(report.max_score)} points), so it stops here: fix it, run its "
                "check, then run this cell again.")

    def _skip_unready(self, lines: list[str]) -> list[str]:
        """IPython input transformer: a cell that uses an exercise whose check did not pass
        becomes a ``print`` of the one line saying so (:meth:`unready`); the names it would
        have bound are remembered, so that a later cell needing one says why it is missing."""
        source = "".join(lines)
        used, own = exercises_used(source, list(self.labels))
        if own:
            return lines
        for name in used:
            line = self.unready(name)
            if line is not None:
                for missing in bound_names(source):
                    if missing not in self.shell.user_ns:
                        self.waiting[missing] = name
                if name not in self.halted:
                    self.halted.append(name)
                return [f"print({line!r})\n"]
        return lines

    def after_halt(self, error: BaseException) -> tuple[str, str] | None:
        """A cell that failed after an exercise stopped an earlier one (and still does not
        pass its check, or has not been checked since): the exercise, and one line."""
        if isinstance(error, CheckFailure):
            return None
        for name in self.halted:
            report = last_verdict(name)
            if report is None or not report.passed:
                return name, (f"⏸ This cell failed ({type(error).__name__}) after {self.labels[name]} (`{name}`) "
                              "stopped an earlier cell whose results it may need: finish that exercise, then run "
                              "the cells from there again.")
        return None

    # ---- what stopped the cell -------------------------------------------------------
    def blank_exercise(self, error: BaseException, tb) -> str | None:
        """The exercise whose blank body raised ``error``, or None when it is not that.

        The innermost frame must be a function or method defined in the notebook (its
        globals are ``__main__``'s) whose name, or whose class's name, is an exercise.
        """
        if not isinstance(error, NotImplementedError) or tb is None:
            return None
        while tb.tb_next is not None:
            tb = tb.tb_next
        frame = tb.tb_frame
        if frame.f_globals.get("__name__") != "__main__":
            return None
        code = frame.f_code
        qualname = getattr(code, "co_qualname", code.co_name)
        candidates = [qualname.split(".")[0], code.co_name]
        owner = frame.f_locals.get("self")
        if owner is not None:
            candidates.append(type(owner).__name__)
        return next((name for name in candidates if name in self.labels), None)

    def reason(self, error: BaseException, tb) -> tuple[str, str] | None:
        """The exercise that stopped a cell and the one line that says so, or None
        when ``error`` is not an unfinished exercise's."""
        name = self.blank_exercise(error, tb)
        if name is not None:
            return name, (f"⏸ {self.labels[name]} (`{name}`) is not written yet, so this cell stops here: "
                          "write it, run its cell, then run this cell again.")
        if type(error).__name__ == "NotReleased":  # solutions.<name> of an exercise whose cell has not run
            name = getattr(error, "name", None)
            if name in self.labels:
                return name, (f"⏸ {self.labels[name]} (`{name}`) has not been run yet, so this cell stops "
                              "here: run its cell (blank or written), then this one again.")
        if isinstance(error, NameError) and getattr(error, "name", None) in self.waiting:
            missing = error.name
            name = self.waiting[missing]
            return name, (f"⏸ `{missing}` comes from a cell that stopped at {self.labels[name]} (`{name}`): "
                          "write that exercise, then run the cells from there again.")
        return self.after_halt(error)

    # ---- IPython hooks -----------------------------------------------------------------
    def _pre_run_cell(self, info) -> None:
        self.cell = getattr(info, "raw_cell", "") or ""
        self.stopped = None

    def _handle(self, shell, etype, value, tb, tb_offset=None):
        stopped_by = self.reason(value, tb)
        if stopped_by is None:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return None
        name, line = stopped_by
        if name not in self.halted and self.blank_exercise(value, tb) is not None:
            self.halted.append(name)  # a blank exercise stopped work that later cells may need
        try:
            source = shell.transform_cell(self.cell)
        except Exception:  # noqa: BLE001 - a cell IPython cannot transform binds nothing we can see
            source = self.cell
        for missing in bound_names(source):
            if missing not in shell.user_ns:
                self.waiting[missing] = name
        self.stopped = value
        print(line)
        return None

    def _post_run_cell(self, result) -> None:
        if result is not None and self.stopped is not None and result.error_in_exec is self.stopped:
            result.error_in_exec = None  # the cell ran as far as it could: "Run all" goes on
        self.stopped = None


def install(chapters) -> UnfinishedGuard | None:
    """Install the guard in the running IPython kernel for the exercises of ``chapters``.

    Args:
        chapters: the released chapter ids.

    Returns:
        The guard, or None outside IPython.
    """
    try:
        # IPython only inside a kernel, where the guard is installed
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return None
    guard = UnfinishedGuard(shell, exercise_labels(chapters))
    guard.install()
    return guard


def exercise_labels(chapters) -> dict[str, str]:
    """How the notebooks title the exercises of ``chapters``: ``{"masked_softmax": "Exercise 6.4"}``
    (the registration order of each chapter's checks is the notebook's order, as a test asserts).

    Args:
        chapters: chapter ids, ``"06_masking"``.
    """
    labels = {}
    for chapter in chapters:
        number = int(chapter.split("_", 1)[0])
        for k, exercise in enumerate(exercises_of(chapter), start=1):
            labels[exercise.name] = f"Exercise {number}.{k}"
    return labels


def _num(x: float) -> str:
    x = round(float(x), 4)
    return str(int(x)) if x == int(x) else f"{x:g}"
