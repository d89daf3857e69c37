"""``python -m autograder …``: see :mod:`autograder.cli`."""
import sys

from .cli import main

sys.exit(main())
