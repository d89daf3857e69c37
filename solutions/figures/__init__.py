"""The book's figures: the diagrams (SVG, one module per chapter) and the measured plots.

Nothing here is an exercise's answer and nothing here imports the reference model
(``tests/unit/test_package_layout.py`` holds both), so the figures never decide what
the grading sandbox or a student package withholds.

* :mod:`.diagram`: the book's diagram language (tensors, operations, masks, arrows,
  frames, notes) and the command ``python -m solutions.figures [--check | --alt]``
  that writes every diagram of the book from the chapter modules;
* :mod:`.ch01` … :mod:`.ch10`: each chapter's diagrams, drawn in that language;
* :mod:`.plots`: matplotlib pictures of attention that the chapters' cells draw from
  measured values (heatmaps, per-head maps, masks) and the explorers' static fallback.

This ``__init__`` imports nothing, so ``import solutions.figures.plots`` costs only numpy
and :mod:`.diagram` (its roles' colours; matplotlib waits for the first drawing), and the
diagrams cost nothing but the standard library.
"""
