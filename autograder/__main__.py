"""``python -m autograder …``: see :mod:`autograder.cli`."""
import sys

# jsonschema, which nbformat imports, loads its optional IRI format checker at import when
# rfc3987-syntax is installed (jupyter-events pulls it in): 38 Earley parsers built, about
# 1.7 CPU seconds in every command that reads a notebook. No schema the autograder checks
# is validated with a format checker, so the command goes without it: None in sys.modules
# makes that optional import fail as if the package were not installed.
sys.modules.setdefault("rfc3987_syntax", None)

from .cli import main  # noqa: E402  (after the line above: the commands import nbformat)

sys.exit(main())
