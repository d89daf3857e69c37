"""Pictures of attention for the chapters: heatmaps, per-head maps, masks, explorers.

Every chapter draws attention the same way, so the reader learns to read one
picture: **queries on the rows, keys on the columns**, a row of weights sums to one
(the softmax runs over the keys, "Attention Is All You Need", section 3.2.1). Masks
use the book's convention, **True = may attend**, drawn as a filled cell.

The helpers accept numpy arrays or torch tensors (detached and moved to the CPU
here) and strip leading axes of size one, so ``model.attn_weights[0]`` or a
``(1, 1, T, T)`` causal mask can be passed as they are.

In a notebook, end a plotting line with ``;`` (or assign the result) so Jupyter
does not print the returned object's text next to the picture.
"""
import os

import numpy as np

from .diagram import ROLES  # the diagrams' colours for the roles (standard library only)

__all__ = ["plot_attention", "plot_heads", "plot_head_steps", "plot_head_blocks", "plot_query_steps", "plot_projections",
           "plot_mask", "show_explorer", "STATIC_ENV_VAR"]

#: Environment variable the book build sets to "1": explorers render a static figure.
STATIC_ENV_VAR = "TRANSFORMER_BOOK_STATIC"


def _pyplot():
    """``matplotlib.pyplot``, imported when a helper first draws.

    Chapters import these helpers in their setup cell, and the grading sandbox runs that
    cell for every submission without drawing anything: importing matplotlib there would
    cost about a tenth of a sandbox's start.
    """
    # matplotlib on first use (heavy): importing the helpers costs numpy only
    import matplotlib.pyplot as plt

    return plt


# Maps with at most this many cells get their values written into the cells.
_ANNOTATE_MAX_CELLS = 64


def _to_numpy(x, name):
    """Return ``x`` as a numpy array (torch tensors are detached and copied to the CPU)."""
    if hasattr(x, "detach"):  # a torch tensor; torch itself is not imported here
        x = x.detach().cpu().numpy()
    try:
        return np.asarray(x)
    except Exception as err:  # pragma: no cover - numpy accepts almost anything
        raise TypeError(f"{name} must be array-like, got {type(x).__name__}") from err


def _squeeze_leading(x, ndim, name):
    """Drop leading axes of size one until ``x`` has ``ndim`` axes.

    Raises:
        ValueError: when ``x`` cannot be brought to ``ndim`` axes that way.
    """
    original = x.shape
    while x.ndim > ndim and x.shape[0] == 1:
        x = x[0]
    if x.ndim != ndim:
        raise ValueError(
            f"{name} must have {ndim} axes (leading axes of size 1 are dropped), "
            f"got shape {tuple(original)}"
        )
    return x


def _check_tokens(tokens, size, name):
    """Return ``tokens`` as a list of strings of length ``size`` (or None)."""
    if tokens is None:
        return None
    tokens = [str(t) for t in tokens]
    if len(tokens) != size:
        raise ValueError(f"{name} has {len(tokens)} labels but the map has {size} of them")
    return tokens


def _map_axes(ax, n_q, n_k, *, cell, extra_width, min_height):
    """Return the Axes to draw an ``(n_q, n_k)`` map into.

    Args:
        ax: the caller's Axes, returned as it is; None for a new figure.
        n_q, n_k: the map's rows (queries) and columns (keys).
        cell: the side of one cell in a new figure, in inches.
        extra_width: inches added to the width of a new figure for what stands
            beside the map (the row labels and a colour bar or legend).
        min_height: the least height of a new figure, in inches (its width is at
            least 3 inches).

    Returns:
        matplotlib.axes.Axes: ``ax``, or the Axes of the new figure.
    """
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(max(3.0, extra_width + cell * n_k), max(min_height, 1.0 + cell * n_q)))
    return ax


def _label_axes(ax, n_rows, n_cols, query_tokens, key_tokens):
    """Put token labels (or positions) on the rows (queries) and columns (keys)."""
    ax.set_xticks(range(n_cols))
    ax.set_yticks(range(n_rows))
    if key_tokens is not None:
        long_labels = max(map(len, key_tokens), default=0) > 3
        ax.set_xticklabels(key_tokens, rotation=45 if long_labels else 0,
                           ha="right" if long_labels else "center")
    if query_tokens is not None:
        ax.set_yticklabels(query_tokens)
    ax.set_xlabel("keys")
    ax.set_ylabel("queries")
    ax.tick_params(length=0)


def _annotation_fontsize(ax, texts, n_rows, n_cols):
    """The size, in points, of ``texts`` written into the cells of ``ax``'s map: as large as
    a cell allows (about 0.6 em a character and 1.4 em of white beside the widest, so a
    text height stays between neighbours; a line is about 1.2 em tall), between 8 and 11
    points. A map drawn into a large Axes (an explorer's panel) gets 11-point numbers,
    legible at the book's column, where a fixed 8 points shrank to about 8 pixels there."""
    fig_w, fig_h = ax.figure.get_size_inches()
    box = ax.get_position()
    cell_w = 72 * box.width * fig_w / max(n_cols, 1)
    cell_h = 72 * box.height * fig_h / max(n_rows, 1)
    em_wide = 0.6 * max(map(len, texts), default=1) + 1.4
    return float(min(11.0, max(8.0, min(cell_w / em_wide, cell_h / 1.8))))


def plot_attention(weights, query_tokens=None, key_tokens=None, ax=None, title=None, annotate=None):
    """Draw one attention map as a heatmap: queries on the rows, keys on the columns.

    Args:
        weights: attention weights, numpy array or torch tensor; each row is one
            query's distribution over the keys (it sums to 1 after a softmax).
        query_tokens: optional labels of the rows (one per query).
        key_tokens: optional labels of the columns (one per key).
        ax: optional matplotlib Axes to draw into; a new figure is made otherwise.
        title: optional title of the map.
        annotate: write each weight into its cell. ``None`` (default) annotates
            small maps only (at most 64 cells); ``True``/``False`` force it.

    Shape:
        weights: ``(T_q, T_k)``; leading axes of size 1 are dropped, so
        ``(1, 1, T_q, T_k)`` works too.

    Returns:
        matplotlib.axes.Axes: the Axes holding the map (``ax.figure`` is its Figure).

    Raises:
        ValueError: when ``weights`` is not two-dimensional or the labels do not
            match its shape.

    Paper: "Attention Is All You Need", section 3.2.1 (the weights
    ``softmax(Q Kᵀ / √d_k)``).
    """
    w = _squeeze_leading(_to_numpy(weights, "weights").astype(float), 2, "weights")  # (T_q, T_k)
    n_q, n_k = w.shape
    query_tokens = _check_tokens(query_tokens, n_q, "query_tokens")
    key_tokens = _check_tokens(key_tokens, n_k, "key_tokens")
    ax = _map_axes(ax, n_q, n_k, cell=0.45, extra_width=1.5, min_height=2.5)
    vmax = max(1.0, float(np.nanmax(w))) if w.size and np.nanmin(w) >= 0 else None
    vmin = 0.0 if vmax is not None else None
    image = ax.imshow(w, cmap="Blues", vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    _label_axes(ax, n_q, n_k, query_tokens, key_tokens)
    if annotate is None:
        annotate = w.size <= _ANNOTATE_MAX_CELLS
    if annotate:
        low, high = image.get_clim()
        middle = low + 0.6 * (high - low)
        fontsize = _annotation_fontsize(ax, [f"{v:.2f}" for v in w.ravel()], n_q, n_k)
        for i in range(n_q):
            for j in range(n_k):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=fontsize,
                        color="white" if w[i, j] > middle else "black")
    if title is not None:
        ax.set_title(title)
    return ax


def plot_heads(weights, query_tokens=None, key_tokens=None, titles=None):
    """Draw one small attention map per head, rows fitting the column, one colour scale.

    Args:
        weights: per-head attention weights, numpy array or torch tensor.
        query_tokens: optional labels of the rows (shown on the first map).
        key_tokens: optional labels of the columns (shown on every map).
        titles: optional list of one title per head; default ``"head 0"``, ``"head 1"``…

    Shape:
        weights: ``(h, T_q, T_k)``; leading axes of size 1 are dropped, so one
        sentence of ``MultiHeadAttention.attn_weights`` ``(1, h, T_q, T_k)`` works.

    Returns:
        matplotlib.figure.Figure: the figure with ``h`` Axes (``fig.axes[:h]``).

    Raises:
        ValueError: when ``weights`` is not three-dimensional or the labels or
            titles do not match its shape.

    Paper: "Attention Is All You Need", section 3.2.2 (multi-head attention).
    """
    w = _squeeze_leading(_to_numpy(weights, "weights").astype(float), 3, "weights")  # (h, T_q, T_k)
    num_heads, n_q, n_k = w.shape
    if num_heads == 0:
        raise ValueError("weights must hold at least one head, got shape (0, ...)")
    query_tokens = _check_tokens(query_tokens, n_q, "query_tokens")
    key_tokens = _check_tokens(key_tokens, n_k, "key_tokens")
    if titles is None:
        titles = [f"head {i}" for i in range(num_heads)]
    elif len(titles) != num_heads:
        raise ValueError(f"titles has {len(titles)} entries but there are {num_heads} heads")
    cell = max(1.8, 0.3 * max(n_q, n_k))
    # As many maps a row as fit the book's column (about 7.5 inches at 100 %), at most 4.
    cols = max(1, min(num_heads, 4, int(7.5 // cell)))
    rows = -(-num_heads // cols)  # ceiling division
    fig, axes = _pyplot().subplots(rows, cols, figsize=(cell * cols + 1.0, cell * rows + 0.6 * rows),
                                   squeeze=False, layout="constrained")
    vmax = max(1.0, float(np.nanmax(w))) if w.size and np.nanmin(w) >= 0 else float(np.nanmax(w))
    vmin = 0.0 if np.nanmin(w) >= 0 else float(np.nanmin(w))
    image = None
    for head, ax in enumerate(axes.flat):
        if head >= num_heads:
            ax.remove()  # empty slots of the last row
            continue
        image = ax.imshow(w[head], cmap="Blues", vmin=vmin, vmax=vmax, aspect="auto",
                          interpolation="nearest")
        _label_axes(ax, n_q, n_k, query_tokens if head % cols == 0 else None, key_tokens)
        if head % cols != 0:
            ax.set_yticklabels([])
            ax.set_ylabel("")
        if head + cols < num_heads:  # another map sits below: its title needs the room
            ax.set_xlabel("")
        ax.set_title(str(titles[head]), fontsize=10)
    fig.colorbar(image, ax=list(fig.axes), fraction=0.02, pad=0.02)
    return fig


def _number_text(value):
    """A cell's text: an integer as it is, anything else to 3 decimals."""
    return f"{value:.0f}" if value == round(value) else f"{value:.3f}"


def _cell_inches(matrices, fontsize):
    """The width, in inches, of one cell of a column that holds ``matrices``: the widest
    number at ``fontsize`` (about 0.6 em a character) and 1.6 em of white beside it, so
    that neighbouring numbers stay a text height apart; never under 2.2 em."""
    widest = max(len(_number_text(v)) for m in matrices for v in np.asarray(m, dtype=float).ravel())
    return max(0.6 * widest + 1.6, 2.2) * fontsize / 72


def _numbers(ax, matrix, cmap, rows=None, cols=None, title="", strength=1.6, fontsize=8.5):
    """Draw a small matrix as a grid of its values (3 decimals), tinted by ``cmap`` (its
    darkest tint at ``strength`` times the largest value, so every number stays readable).
    The cells take the Axes' shape (``aspect="auto"``): square cells as tall as a row of the
    figure are narrower than "0.452", and neighbouring numbers ran into each other.
    ``fontsize`` is the numbers'; the labels scale with it, the title stays at most 10 points
    (a step's title may be wider than its single column of numbers)."""
    n_rows, n_cols = matrix.shape
    top = strength * max(1.0, float(matrix.max()))
    ax.imshow(matrix, cmap=cmap, vmin=min(0.0, float(matrix.min())), vmax=top, aspect="auto",
              interpolation="nearest")
    for i in range(n_rows):
        for j in range(n_cols):
            ax.text(j, i, _number_text(matrix[i, j]), ha="center", va="center", fontsize=fontsize,
                    color="#1a1a1a")
    ax.set_xticks(range(n_cols))
    ax.set_xticklabels([str(c) for c in (cols if cols is not None else range(n_cols))],
                       fontsize=fontsize * 8 / 8.5)
    ax.set_yticks(range(n_rows))
    ax.set_yticklabels(rows if rows is not None else [str(i) for i in range(n_rows)],
                       fontsize=fontsize * 9 / 8.5)
    ax.tick_params(length=0)
    ax.set_title(title, fontsize=min(fontsize * 9.5 / 8.5, 10.0))


# The step-by-step pictures (Figures 4.2 and 5.1) are shown at the book's column, 684 px
# (tests/book/test_line_widths.py): at the inline backend's 100 dpi a figure of about
# 7 inches is drawn at full size, so 11-point numbers read as 15 px, the size of the
# page's code font.
_STEP_FONTSIZE = 11


def plot_head_steps(heads, tokens, merged=None, merged_title="concatenated"):
    """Draw multi-head attention step by step with its numbers: per head, the features it
    sees, its attention weights and its output; then the heads' outputs side by side.

    One row per head, read left to right: the slice of the input the head projects
    (here its queries, keys and values), the weights ``softmax(Q Kᵀ / √d_k)`` (queries on
    the rows, keys on the columns, as :func:`plot_attention`) and the output
    ``weights @ V``. ``merged``, when given, is drawn in a last row, under the outputs it
    concatenates. Colours follow the book's roles: values green, weights purple.

    Args:
        heads: a list of dicts, one per row, with keys ``"title"``, ``"input"`` ``(T, d)``,
            ``"weights"`` ``(T, T)`` and ``"output"`` ``(T, d_v)`` (arrays or tensors);
            optional ``"features"``, the ``d`` column labels of the input and the output
            (the model features a head's slice holds; default 0, 1, …), and ``"merge"``
            (bool, default True), whether the row's output is part of ``merged``.
        tokens: the ``T`` token labels of the rows.
        merged: optional ``(T, D)`` concatenation of the merged rows' outputs.
        merged_title: the title above ``merged``.

    Returns:
        matplotlib.figure.Figure: three Axes per row, then one for ``merged`` (in the
        output column, under the last row).

    Raises:
        ValueError: when a matrix's rows do not match ``tokens`` or ``heads`` is empty.

    Paper: "Attention Is All You Need", section 3.2.2 and its Figure 2 (right).
    """
    if not heads:
        raise ValueError("heads must hold at least one row")
    tokens = [str(t) for t in tokens]
    rows = []
    for row in heads:
        mats = [_to_numpy(row[key], key).astype(float) for key in ("input", "weights", "output")]
        for key, mat in zip(("input", "weights", "output"), mats):
            if mat.ndim != 2 or mat.shape[0] != len(tokens):
                raise ValueError(f"{row.get('title', 'a head')}: {key} must have {len(tokens)} rows, "
                                 f"got shape {mat.shape}")
        features = row.get("features", range(mats[0].shape[1]))
        rows.append((row["title"], mats, row.get("merge", True), list(features)))
    n = len(rows)
    fs = _STEP_FONTSIZE
    # Each column as wide as its widest matrix needs (a cell per number, see _cell_inches),
    # at least 3 cells; the merged output goes under the heads' outputs, not beside them,
    # so that the figure stays about 7 inches wide (the book's column at full size).
    width = []
    for c in range(3):
        mats = [m[c] for _, m, _, _ in rows]
        width.append(max(max(m.shape[1] for m in mats), 3) * _cell_inches(mats, fs))
    width[0] = max(width[0], 1.6)  # inches: "the features it sees" at 10 points
    if merged is not None:
        merged = _to_numpy(merged, "merged").astype(float)
        width[2] = max(width[2], merged.shape[1] * _cell_inches([merged], fs))
    heights = [1.0] * n + ([1.0] if merged is not None else [])
    row_inches = len(tokens) * 0.3 + 0.95  # the numbers, a two-line title, the column labels
    fig = _pyplot().figure(figsize=(sum(width) + 0.55, row_inches * len(heights) + 0.4), layout="constrained")
    grid = fig.add_gridspec(len(heights), 3, width_ratios=width, height_ratios=heights)
    steps = ("the features it sees", "weights:\nsoftmax(Q Kᵀ / √d_k)", "output:\nweights @ V")
    for r, (title, (inp, w, out), _, features) in enumerate(rows):
        columns = (features, tokens, features if out.shape[1] == len(features) else None)
        for c, (mat, cmap) in enumerate(((inp, "Greys"), (w, "Purples"), (out, "Greens"))):
            ax = fig.add_subplot(grid[r, c])
            _numbers(ax, mat, cmap, rows=tokens if c == 0 else [""] * len(tokens), cols=columns[c],
                     title=f"{title}:\n{steps[c]}" if c == 0 else steps[c], fontsize=fs)
    if merged is not None:
        # under the outputs, its token labels on its left, in the empty weights column of
        # its row: kept out of the layout, they would push the output column away from the
        # weights in every row (and the figure past the book's 7 inches)
        ax = fig.add_subplot(grid[n, 2])
        _numbers(ax, merged, "Greens", rows=tokens, title=merged_title, fontsize=fs)
        ax.yaxis.set_in_layout(False)
    return fig


def plot_query_steps(query, keys, values, tokens, query_token="q"):
    """Draw one query's pass through scaled dot-product attention, step by step, with its
    numbers: the scores against every key, the division by ``√d_k``, the softmax, each value
    scaled by its weight, and their sum, the query's output.

    The keys and every per-key step share one row per key token, so a row reads across
    as what happens to that key. The query sits under the keys, the output under the
    weighted values. Colours follow the book's roles: the query blue, keys orange,
    scores and weights purple, values and the output green.

    Args:
        query: the query, one vector.
        keys: one key per row.
        values: one value per row (one per key).
        tokens: the ``n_k`` labels of the keys (and of their values).
        query_token: the label of the query (and of its output).

    Shape:
        query: ``(d_k,)``; keys: ``(n_k, d_k)``; values: ``(n_k, d_v)``.

    Returns:
        matplotlib.figure.Figure: eight Axes, the six steps on the top row (keys, scores,
        scaled scores, weights, values, weighted values), then the query and the output.

    Raises:
        ValueError: when the shapes do not fit together or ``tokens`` does not name every key.

    Paper: "Attention Is All You Need", section 3.2.1, equation (1), for one row of ``Q``.
    """
    q = _to_numpy(query, "query").astype(float)
    k = _to_numpy(keys, "keys").astype(float)
    v = _to_numpy(values, "values").astype(float)
    if q.ndim != 1 or k.ndim != 2 or v.ndim != 2 or k.shape[1] != q.shape[0] or v.shape[0] != k.shape[0]:
        raise ValueError(f"expected query (d_k,), keys (n_k, d_k) and values (n_k, d_v), got "
                         f"{q.shape}, {k.shape} and {v.shape}")
    tokens = _check_tokens(list(tokens), k.shape[0], "tokens")
    d_k = q.shape[0]
    scores = (k @ q)[:, None]  # (n_k, 1): q · k_j
    scaled = scores / np.sqrt(d_k)
    weights = np.exp(scaled - scaled.max())
    weights /= weights.sum()  # (n_k, 1), sums to 1
    weighted = weights * v  # (n_k, d_v): row j is weight_j · v_j
    output = weighted.sum(axis=0, keepdims=True)  # (1, d_v)

    n_k, d_v = v.shape
    fs = _STEP_FONTSIZE
    # One column per step, each as wide as its numbers need (see _cell_inches); the single
    # numbers of steps 1-3 get room for their two-line titles. About 7 inches wide: the
    # book's column shows it at full size.
    narrow = 0.75  # inches: "1 · score" at 10 points
    width = [d_k * _cell_inches([k, q[None, :]], fs), max(_cell_inches([scores], fs), narrow),
             max(_cell_inches([scaled], fs), narrow), max(_cell_inches([weights], fs), narrow),
             d_v * _cell_inches([v], fs), d_v * _cell_inches([weighted, output], fs)]
    fig = _pyplot().figure(figsize=(sum(width) + 1.0, 0.3 * (n_k + 1) + 2.0), layout="constrained")
    grid = fig.add_gridspec(2, len(width), width_ratios=width, height_ratios=[n_k, 1])
    steps = ((k, "Oranges", "keys\nk_j", [str(c) for c in range(d_k)]),
             (scores, "Purples", "1 · score\nq·k_j", [""]),
             (scaled, "Purples", f"2 · ÷ √d_k\n= {np.sqrt(d_k):g}", [""]),
             (weights, "Purples", "3 · soft-\nmax", [""]),
             (v, "Greens", "values\nv_j", [str(c) for c in range(d_v)]),
             (weighted, "Greens", "4 · weight_j\n× v_j", [str(c) for c in range(d_v)]))
    for c, (matrix, cmap, title, cols) in enumerate(steps):
        ax = fig.add_subplot(grid[0, c])
        _numbers(ax, matrix, cmap, rows=tokens if c == 0 else [""] * n_k, cols=cols, title=title,
                 fontsize=fs)
    _numbers(fig.add_subplot(grid[1, 0]), q[None, :], "Blues", rows=[query_token],
             cols=[str(c) for c in range(d_k)], title=f"query q of \"{query_token}\"", fontsize=fs)
    _numbers(fig.add_subplot(grid[1, len(width) - 1]), output, "Greens", rows=[f"z ({query_token})"],
             cols=[str(c) for c in range(d_v)], title="5 · sum over the keys: z", fontsize=fs)
    return fig


# The tint of a learned matrix: the yellow of "parameters" in the diagrams' palette
# (solutions.figures.diagram.ROLES), from white.
_PARAMETERS = ("#ffffff", "#d9c400")


def plot_projections(x, projections, tokens, token=0):
    """Draw the projections of self-attention with their numbers: ``X @ W = result``, one
    row of the figure per learned matrix (for instance ``W^Q``, ``W^K``, ``W^V``).

    The same ``X`` opens every row, so the picture reads as one sequence in three roles.
    One token's row is outlined in ``X`` and in every product: row ``i`` of a product is
    row ``i`` of ``X`` times the matrix, and nothing else. Colours follow the book's roles:
    inputs grey, learned matrices yellow, queries blue, keys orange, values green (any
    further product grey).

    Args:
        x: the token vectors, one row per token.
        projections: a list of ``(name, W)`` pairs, e.g. ``[("Q", W_q), ("K", W_k), ("V", W_v)]``;
            each ``W`` has ``d_model`` rows.
        tokens: the ``n`` labels of the rows of ``x``.
        token: the index of the row to outline.

    Shape:
        x: ``(n, d_model)``; each ``W``: ``(d_model, d)``; the products ``(n, d)``.

    Returns:
        matplotlib.figure.Figure: three Axes per projection (``x``, ``W``, the product).

    Raises:
        ValueError: when a matrix does not have ``d_model`` rows, ``tokens`` does not name
            every row, ``token`` is out of range or ``projections`` is empty.

    Paper: "Attention Is All You Need", section 3.2.2 (the projections ``W_i^Q``, ``W_i^K``,
    ``W_i^V``), in the book's row-vector convention.
    """
    x = _squeeze_leading(_to_numpy(x, "x").astype(float), 2, "x")
    n, d_model = x.shape
    tokens = _check_tokens(list(tokens), n, "tokens")
    if not projections:
        raise ValueError("projections must hold at least one (name, W) pair")
    if not 0 <= token < n:
        raise ValueError(f"token must be in 0..{n - 1}, got {token}")
    mats = []
    for name, w in projections:
        w = _to_numpy(w, name).astype(float)
        if w.ndim != 2 or w.shape[0] != d_model:
            raise ValueError(f"W^{name} must have shape (d_model, d) with d_model = {d_model}, got {w.shape}")
        mats.append((str(name), w, x @ w))
    role_maps = {"Q": "Blues", "K": "Oranges", "V": "Greens"}
    widest = max(w.shape[1] for _, w, _ in mats)
    tall = max(n, d_model)
    fs = _STEP_FONTSIZE
    # a cell per number as in the other step pictures (see _cell_inches), and a narrow
    # column for "@" and "="
    cell = _cell_inches([x] + [m for _, w, p in mats for m in (w, p)], fs)
    width = [d_model * cell, 0.35, widest * cell, 0.35, widest * cell]
    # matplotlib on first use (heavy): see _pyplot
    from matplotlib.colors import LinearSegmentedColormap

    parameters = LinearSegmentedColormap.from_list("parameters", _PARAMETERS)
    fig = _pyplot().figure(figsize=(sum(width) + 1.0, len(mats) * (0.3 * tall + 0.8)), layout="constrained")
    grid = fig.add_gridspec(len(mats), len(width), width_ratios=width)
    features = [str(c) for c in range(d_model)]
    for r, (name, w, product) in enumerate(mats):
        # x and the product take n of the tall rows, so every cell of the row has one height
        left = grid[r, 0].subgridspec(2, 1, height_ratios=[n, max(tall - n, 0.001)])
        right = grid[r, 4].subgridspec(2, 1, height_ratios=[n, max(tall - n, 0.001)])
        inner = grid[r, 2].subgridspec(2, 1, height_ratios=[d_model, max(tall - d_model, 0.001)])
        columns = [str(c) for c in range(w.shape[1])]
        panels = ((left[0], x, "Greys", tokens, features, f"X  ({n}, {d_model})"),
                  (inner[0], w, parameters, features, columns, f"$W^{name}$  ({d_model}, {w.shape[1]})"),
                  (right[0], product, role_maps.get(name, "Greys"), tokens, columns,
                   f"{name} = X $W^{name}$  ({n}, {w.shape[1]})"))
        for c, (spec, matrix, cmap, rows, cols, title) in enumerate(panels):
            ax = fig.add_subplot(spec)
            # lighter than the other step pictures: these cells hold small integers, 1 the commonest
            _numbers(ax, matrix, cmap, rows=rows, cols=cols, title=title, strength=2.4, fontsize=fs)
            if c != 1:  # outline the chosen token's row in X and in the product
                ax.add_patch(_pyplot().Rectangle((-0.5, token - 0.5), matrix.shape[1], 1.0, fill=False,
                                                 edgecolor="#1a1a1a", linewidth=2.0, clip_on=False))
        for c, sign in ((1, "@"), (3, "=")):
            ax = fig.add_subplot(grid[r, c])
            ax.text(0.5, 1.0 - 0.5 * n / tall, sign, ha="center", va="center", fontsize=14,
                    transform=ax.transAxes)
            ax.axis("off")
    return fig


def _head_shade(role, head, num_heads):
    """The fill of head ``head``'s cells in a matrix of ``role``: from the role's stroke
    colour (head 0) to its light fill (the last head), so neighbouring heads differ."""
    # matplotlib on first use (heavy): see _pyplot
    from matplotlib.colors import to_rgb

    fill, stroke = (np.array(to_rgb(c)) for c in (ROLES[role].fill, ROLES[role].stroke))
    t = 0.0 if num_heads == 1 else head / (num_heads - 1)
    return tuple(0.35 * fill + 0.65 * stroke + t * 0.65 * (fill - stroke))


def plot_head_blocks(seq_len=3, d_model=9, num_heads=3):
    """Draw multi-head attention as blocks of matrices, one step per row: project, split,
    attend per head, concatenate, project with ``W^O``.

    Every matrix is drawn as its grid of cells, one cell per number, without the numbers:
    the picture is about which block goes where. A cell's colour says its role, as in the
    book's diagrams (queries blue, keys orange, values green, weights purple, ``W^O``
    yellow, activations grey), and its shade says the head it belongs to, darkest for head
    0. Each matrix carries its name and its shape.

    Args:
        seq_len: the number of tokens ``T`` (rows of ``X``).
        d_model: the model width; ``num_heads`` must divide it.
        num_heads: the number of heads ``h``; head ``i`` owns columns ``i d_k`` to
            ``(i + 1) d_k - 1`` of ``Q``, ``K`` and ``V``, and rows ``i d_k`` to
            ``(i + 1) d_k - 1`` of ``W^O``.

    Returns:
        matplotlib.figure.Figure: one Axes, in inches, with one ``Rectangle`` per cell.

    Raises:
        ValueError: when a size is not a positive int or ``num_heads`` does not divide
            ``d_model``, or the picture would not fit the book's column (7 inches).

    Paper: "Attention Is All You Need", section 3.2.2 and its Figure 2 (right).
    """
    for name, value in (("seq_len", seq_len), ("d_model", d_model), ("num_heads", num_heads)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if d_model % num_heads:
        raise ValueError(f"d_model = {d_model} is not divisible by num_heads = {num_heads}")
    d_k = d_model // num_heads
    cell = 0.13  # inches
    label_size, step_size = 10, 10.5
    wide = d_model * cell
    rows_in = seq_len * cell
    # widest row: X, then Q, K and V side by side
    width = 1.15 + wide + 0.45 + 3 * wide + 2 * 0.25 + 0.1
    group = 3 * d_k * cell + 2 * 0.16  # one head: Q_i, K_i, V_i side by side
    width = max(width, 1.15 + num_heads * group + (num_heads - 1) * 0.35 + 0.1)
    if width > 7.0:
        raise ValueError(f"the picture would be {width:.1f} inches wide; the column holds 7")
    heights = [rows_in + 0.95, rows_in + 0.85, rows_in + 0.95, max(rows_in, wide) + 0.75]
    height = sum(heights) + 0.2
    plt = _pyplot()
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)  # y grows downwards, in inches
    ax.axis("off")

    def matrix(x, y, n_rows, n_cols, role, name, head_of=None, title=None, shape=True, blocks=None):
        # One matrix, top-left corner (x, y): its cells, its name (and shape) underneath,
        # an optional title above. head_of(r, c) gives a cell's head (None: one colour);
        # blocks="columns" or "rows" writes each head's number beside its block.
        for r in range(n_rows):
            for c in range(n_cols):
                head = None if head_of is None else head_of(r, c)
                colour = (ROLES[role].fill if head is None else _head_shade(role, head, num_heads))
                ax.add_patch(plt.Rectangle((x + c * cell, y + r * cell), cell, cell, facecolor=colour,
                                           edgecolor="white", linewidth=0.8))
        ax.add_patch(plt.Rectangle((x, y), n_cols * cell, n_rows * cell, fill=False,
                                   edgecolor=ROLES[role].stroke, linewidth=1.0))
        ax.text(x + n_cols * cell / 2, y + n_rows * cell + 0.06,
                f"{name}\n({n_rows} × {n_cols})" if shape else name,
                ha="center", va="top", fontsize=label_size, linespacing=1.1)
        for i in range(num_heads if blocks else 0):
            centre = (i + 0.5) * d_k * cell
            if blocks == "columns":
                ax.text(x + centre, y - 0.04, str(i), ha="center", va="bottom", fontsize=label_size)
            else:
                ax.text(x - 0.05, y + centre, str(i), ha="right", va="center", fontsize=label_size)
        if title:
            ax.text(x + n_cols * cell / 2, y - 0.06, title, ha="center", va="bottom", fontsize=label_size)
        return x + n_cols * cell, y + n_rows * cell / 2  # right edge, middle

    def arrow(x0, y0, x1, y1, text=None):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops=dict(arrowstyle="-|>", color="#333333", lw=1.0, shrinkA=2, shrinkB=2))
        if text:
            ax.text((x0 + x1) / 2, min(y0, y1) - 0.05, text, ha="center", va="bottom", fontsize=label_size)

    def step(y, text):
        ax.text(0.05, y, text, ha="left", va="center", fontsize=step_size, fontweight="bold")

    by_column = lambda r, c: c // d_k  # noqa: E731 - head i owns a block of columns
    by_row = lambda r, c: r // d_k  # noqa: E731 - ... and, in W^O, a block of rows
    left = 1.15

    # 1. project: X -> Q, K, V (each d_model wide, all heads side by side)
    y = 0.35
    step(y + rows_in / 2, "1  project")
    right, middle = matrix(left, y, seq_len, d_model, "other", "X")
    x = right + 0.45
    arrow(right, middle, x, middle)
    for role, letter in (("queries", "Q"), ("keys", "K"), ("values", "V")):
        matrix(x, y, seq_len, d_model, role, f"${letter} = X W^{letter}$", head_of=by_column,
               blocks="columns")
        x += wide + 0.25

    # 2. split: head i takes its block of columns of Q, K and V
    y += heights[0]
    step(y + rows_in / 2, "2  split")
    starts = [left + i * (group + 0.35) for i in range(num_heads)]
    for i, x0 in enumerate(starts):
        x = x0
        for role, letter in (("queries", "Q"), ("keys", "K"), ("values", "V")):
            matrix(x, y, seq_len, d_k, role, f"${letter}_{i}$", head_of=lambda r, c, i=i: i,
                   title=f"head {i}, each {seq_len} × {d_k}" if letter == "K" else None, shape=False)
            x += d_k * cell + 0.16

    # 3. attend, per head: weights_i = softmax(Q_i K_i^T / sqrt(d_k)), head_i = weights_i V_i
    y += heights[1]
    step(y + rows_in / 2, "3  attend,\n    per head")
    for i, x0 in enumerate(starts):
        _, middle = matrix(x0, y, seq_len, seq_len, "scores", f"weights$_{i}$", head_of=lambda r, c, i=i: i)
        x1 = x0 + group - d_k * cell
        arrow(x0 + seq_len * cell, middle, x1, middle, f"$@\\, V_{i}$")
        matrix(x1, y, seq_len, d_k, "other", f"head$_{i}$", head_of=lambda r, c, i=i: i)

    # 4. concatenate the heads, 5. project with W^O
    y += heights[2]
    step(y + rows_in / 2, "4  concat,\n5  project")
    right, middle = matrix(left, y, seq_len, d_model, "other", "concat", head_of=by_column, blocks="columns")
    x = right + 0.6
    arrow(right, middle, x - 0.2, middle, "@")
    right, _ = matrix(x, y, d_model, d_model, "parameters", "$W^O$", head_of=by_row, blocks="rows")
    x = right + 0.55
    arrow(right, middle, x, middle, "=")
    matrix(x, y, seq_len, d_model, "other", "output")
    return fig


def plot_mask(mask, query_tokens=None, key_tokens=None, ax=None, title=None):
    """Draw a boolean attention mask: filled cells may be attended to (True).

    Args:
        mask: boolean mask, numpy array or torch tensor, **True = may attend**
            (the convention of ``torch.nn.functional.scaled_dot_product_attention``).
        query_tokens: optional labels of the rows (one per query).
        key_tokens: optional labels of the columns (one per key).
        ax: optional matplotlib Axes to draw into; a new figure is made otherwise.
        title: optional title.

    Shape:
        mask: ``(T_q, T_k)``; leading axes of size 1 are dropped, so a causal mask
        ``(1, 1, T, T)`` works; a padding mask ``(1, 1, 1, T)`` (or ``(T,)``)
        is drawn as a single row that every query shares.

    Returns:
        matplotlib.axes.Axes: the Axes holding the picture.

    Raises:
        TypeError: when ``mask`` is not boolean.
        ValueError: when ``mask`` is not (or cannot be brought to) two dimensions,
            or the labels do not match its shape.

    Paper: "Attention Is All You Need", section 3.2.3 (masking out illegal
    connections in the decoder).
    """
    m = _to_numpy(mask, "mask")
    if m.dtype != np.bool_:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {m.dtype}")
    if m.ndim == 1:
        m = m[None, :]  # (1, T_k): one row that every query shares
    m = _squeeze_leading(m, 2, "mask")  # (T_q, T_k)
    n_q, n_k = m.shape
    query_tokens = _check_tokens(query_tokens, n_q, "query_tokens")
    key_tokens = _check_tokens(key_tokens, n_k, "key_tokens")
    ax = _map_axes(ax, n_q, n_k, cell=0.4, extra_width=1.6, min_height=2.0)

    # matplotlib on first use (heavy): see _pyplot
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    allowed, blocked = "#2b6cb0", "#f7f7f7"
    ax.imshow(m.astype(float), cmap=ListedColormap([blocked, allowed]), vmin=0, vmax=1,
              aspect="auto", interpolation="nearest")
    # Thin grid lines between cells so single cells can be counted.
    ax.set_xticks(np.arange(-0.5, n_k, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, n_q, 1), minor=True)
    ax.grid(which="minor", color="#bbbbbb", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    _label_axes(ax, n_q, n_k, query_tokens, key_tokens)
    ax.legend(handles=[Patch(facecolor=allowed, edgecolor="#888888", label="True: may attend"),
                       Patch(facecolor=blocked, edgecolor="#888888", label="False: masked")],
              loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)
    if title is not None:
        ax.set_title(title)
    return ax


def show_explorer(build_widget, render_static):
    """Show an interactive explorer, or its default state as a picture in the built book.

    Live in Jupyter the explorer is an ipywidgets widget. The HTML book cannot run
    Python behind a slider, so the book build sets the environment variable
    ``TRANSFORMER_BOOK_STATIC=1`` and the explorer is drawn once, in its default
    state, as a matplotlib figure.

    Args:
        build_widget: callable with no arguments returning an ipywidgets widget
            (called only when not static).
        render_static: callable with no arguments that draws the default state
            with matplotlib and returns the Figure (or returns None after drawing
            into the current figure); called only when static.

    Returns:
        None. The explorer is shown with ``IPython.display.display`` here, so a
        cell may end with ``show_explorer(...)`` without showing it twice.

    Raises:
        TypeError: when an argument is not callable, or ``build_widget`` does not
            return a widget.
    """
    if not callable(build_widget) or not callable(render_static):
        raise TypeError("show_explorer expects two callables: build_widget and render_static")
    # IPython only where an explorer is shown (a notebook)
    from IPython.display import display

    if os.environ.get(STATIC_ENV_VAR) == "1":
        fig = render_static()
        if fig is None:
            fig = _pyplot().gcf()
        elif hasattr(fig, "get_figure") and not hasattr(fig, "savefig"):
            fig = fig.get_figure()  # an Axes was returned
        display(fig)
        _pyplot().close(fig)  # the inline backend would otherwise show it a second time
        return None
    widget = build_widget()
    try:
        # ipywidgets (heavy) only for a live explorer
        from ipywidgets import Widget
    except ImportError as err:  # pragma: no cover - ipywidgets is pinned in requirements.txt
        raise TypeError("show_explorer needs ipywidgets for the live explorer") from err
    if not isinstance(widget, Widget):
        raise TypeError(f"build_widget must return an ipywidgets widget, got {type(widget).__name__}")
    display(widget)
    return None
