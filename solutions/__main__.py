"""``python -m solutions train | translate | bench``: see :mod:`solutions.cli`."""
import sys

from .cli import main

sys.exit(main())
