"""``python -m solutions.figures [--check | --alt]``: write (or check) the book's diagrams."""
import sys

from .diagram import main

sys.exit(main())
