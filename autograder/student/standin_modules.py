"""The later chapters' stand-ins as the package ships them: copied code or recorded outputs.

A later chapter's building block a setup cell imports ships as a stand-in from
:mod:`autograder.student.standins` (:func:`standin_sources`), copied under the module
path the notebook imports (:func:`standin_module`); one the chapter calls with fixed
arguments ships as its recorded outputs (:func:`recorded_outputs`, :data:`RECORDED_FILE`).
"""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np

from .partial import segment

__all__ = ["RECORDED_FILE", "call_key", "recorded_outputs", "standin_sources", "standin_module"]


#: The recorded outputs of the stand-ins of :data:`~autograder.student.standins.RECORDED`.
RECORDED_FILE = "solutions/_standins_recorded.npz"


def call_key(name, args):
    """The text that names a call of ``name`` with ``args`` among recorded outputs: an
    array or tensor by its kind, dtype, shape and values, anything else by its ``repr``."""
    def plain(value):
        kind = "tensor" if hasattr(value, "detach") else "array" if isinstance(value, np.ndarray) else ""
        if not kind:
            return repr(value)
        value = value.detach().cpu().numpy() if kind == "tensor" else value
        return f"{kind}({value.dtype}, {value.shape}, {value.tolist()!r})"

    return f"{name}({', '.join(plain(a) for a in args)})"


_RECORDED_LOOKUP = '''

{call_key}

def _recorded(name, args):
    """What stand-in ``name`` returned at release for ``args``: a later chapter's exercise
    ships here as recorded outputs for this chapter's own calls, not as code."""
    import pathlib

    key = call_key(name, args)
    with np.load(pathlib.Path(__file__).with_name("_standins_recorded.npz"), allow_pickle=False) as data:
        if key not in data.files:
            raise LookupError(f"{{name}} is a later chapter's exercise: this package holds its outputs only for "
                              f"the calls this chapter makes, not {{key}}")
        value = data[key]
        return torch.from_numpy(value) if "torch:" + key in data.files else value
'''


def _recorded_standin(node: ast.FunctionDef) -> str:
    """A stand-in's replacement: its signature (defaults kept), and a lookup of its
    recorded outputs for every argument."""
    params = [a.arg for a in node.args.args]
    return (f"def {node.name}({ast.unparse(node.args)}):\n"
            f'    """Recorded outputs of a later chapter\'s exercise, for this chapter\'s calls only (no code)."""\n'
            f"    return _recorded({node.name!r}, ({', '.join(params)}{',' if len(params) == 1 else ''}))\n")


def recorded_outputs(names: list[str]) -> dict[str, np.ndarray]:
    """The outputs of every recorded stand-in among ``names`` for its calls (key:
    :func:`call_key` of every argument, defaults included; a key ``torch:<key>`` marks an
    output that is a tensor)."""
    from . import standins  # imports torch: only when a package holds a stand-in

    recorded = {}
    for name in names:
        function = getattr(standins, name)
        for args in standins.RECORDED.get(name, ()):
            bound = inspect.signature(function).bind(*args)
            bound.apply_defaults()
            key = call_key(name, tuple(bound.arguments.values()))
            value = function(*args)
            if hasattr(value, "detach"):
                recorded["torch:" + key] = np.zeros(())
                value = value.detach().cpu().numpy()
            recorded[key] = np.asarray(value)
    return recorded


def standin_sources(names: list[str]) -> str:
    """The stand-ins module of the package: the header of :mod:`~autograder.student.standins`
    (docstring and imports), the functions ``names`` and the stand-ins they call, nothing else;
    a stand-in of :data:`~autograder.student.standins.RECORDED` as a lookup of its
    recorded outputs (:func:`recorded_outputs`), never its code."""
    # standins imports torch and solutions: only when a package is built
    from .standins import RECORDED

    path = Path(__file__).with_name("standins.py")
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    doc = ast.get_source_segment(text, tree.body[0])
    imports = [ast.get_source_segment(text, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    wanted, todo = set(), list(names)
    while todo:  # and the stand-ins they call (greedy_decode builds its mask with causal_mask)
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name) and n.id in defs]
    funcs = [_recorded_standin(n) if n.name in RECORDED else segment(text, n)
             for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    lookup = _RECORDED_LOOKUP.format(call_key=inspect.getsource(call_key)) if wanted & set(RECORDED) else ""
    return (f"{doc}\n" + "\n".join(imports) + f"\n\n__all__ = {sorted(names)!r}\n{lookup}\n\n"
            + "\n\n\n".join(funcs) + "\n")


#: A later exercise that shipped code names but no released cell calls.
_LATER = (
    "\n\ndef {name}(*args, **kwargs):\n"
    '    """{name} is an exercise of chapter {chapter}: not in this package (no stand-in either)."""\n'
    '    raise NotImplementedError("{name} is an exercise of chapter {chapter}, not released with these chapters: "\n'
    '                              "no released cell calls it")\n'
)


def standin_module(module: str, wanted: set[str], available: set[str], later: dict[str, str]) -> str:
    """``solutions/<module>.py`` of the package when it holds only stand-ins: an import
    of each stand-in of :mod:`.standins`, and, for a later exercise that the shipped code
    names but no released cell calls (chapter 9's ``translate`` names ``beam_search``,
    for a beam its cells never ask for), a function that says it is not here.

    Raises:
        ValueError: a wanted name is neither a stand-in nor a later chapter's exercise.
    """
    ready = sorted(wanted & available)
    absent = sorted(wanted - available)
    text = (f'"""Stand-ins for {module} (generated by `autograder release`, do not edit): '
            'see solutions._standins."""\n')
    if ready:  # solutions/_standins.py, from a module of solutions or of one of its subpackages
        text += f"from {'.' * module.count('.')}_standins import {', '.join(ready)}\n"
    text += f"\n__all__ = {sorted(wanted)!r}\n"
    for name in absent:
        if name not in later:
            raise ValueError(f"{module}.{name} has no stand-in in autograder/student/standins.py")
        text += _LATER.format(name=name, chapter=int(later[name].split("_")[0]))
    return text
