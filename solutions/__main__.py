"""``python -m solutions train | translate | bench``: see :mod:`solutions.app.cli`."""
import sys

from .app.cli import main

sys.exit(main())
