"""Chapter 1's diagrams: the four shapes of sequence problems, a vanilla RNN unrolled over T steps, one LSTM step, the encoder–decoder with
one fixed context vector beside the one with additive (Bahdanau) attention, and additive
attention beside the scaled dot-product attention of chapter 4.

Both use the book's figure language of :mod:`solutions.figures.diagram` (tensors with their
shapes, operations, arrows, frames, notes); nothing new is needed.

``LAYOUTS`` maps each file written to the function that lays the diagram out, as in
:mod:`solutions.figures.diagram`, which draws the SVG from it.
"""
from __future__ import annotations

from .diagram import GAP, OP_H, Diagram, Layout, Rect

__all__ = ["LAYOUTS"]


def _unrolled_layout() -> Diagram:
    """Chapter 1: h_{-1} = h0 → step 0 → step 1 → … → step T−1, the inputs above, H below."""
    d = Diagram(
        name="unrolled-rnn",
        title="A vanilla RNN unrolled over T time steps",
        desc=("A vanilla recurrent network unrolled over T time steps, drawn left to right. The "
              "initial state h_(-1), the argument h0 of rnn_forward, of shape (d_h,) enters the first step. At every step t an input "
              "row x_t of shape (d_in,) comes in from above, and the step computes h_t = "
              "tanh(x_t W_xh + h_(t-1) W_hh + b_h), a new state of shape (d_h,), which is passed "
              "to the next step and also stacked into the output. The same three parameters, "
              "W_xh of shape (d_in, d_h), W_hh of shape (d_h, d_h) and b_h of shape (d_h,), are "
              "used at every step. Step t cannot start before step t-1 has finished, so the T "
              "steps run one after another. The states h_0 to h_(T-1) are stacked into H of "
              "shape (T, d_h), what rnn_forward returns."),
    )
    columns = [("0", 150), ("1", 262), ("2", 374), ("T−1", 560)]
    x_top = 60
    op_top = x_top + 54 + GAP
    h_top = op_top + OP_H + GAP
    d.note("h_{t} = tanh(x_{t} W_{xh} + h_{t−1} W_{hh} + b_{h}), the same weights at every step",
           x=24, top=8)
    h0 = d.tensor("h_{−1}", "(d_h,)", "other", word="", cx=44, top=h_top)
    previous = h0
    states = []
    for index, (t, cx) in enumerate(columns):
        x = d.tensor(f"x_{{{t}}}", "(d_in,)", "other", word="", cx=cx, top=x_top)
        step = d.operation("tanh", cx=cx, top=op_top, after=x)
        h = d.tensor(f"h_{{{t}}}", "(d_h,)", "other", word="", cx=cx, top=h_top, after=step)
        if index == len(columns) - 1:
            # the elided steps 3 … T−2 sit between the last two columns
            gap_left, gap_right = previous.right + 16, step.left - 40
            mid = (previous.right + gap_left) / 2 + 4
            d.arrow((previous.right, previous.cy), (mid, previous.cy), (mid, step.cy), (gap_left + 24, step.cy))
            d.note("…", x=(gap_left + 24 + gap_right) / 2 + 8, top=step.cy - 10, anchor="middle")
            d.arrow((gap_right + 12, step.cy), (step.left, step.cy))
        else:
            mid = (previous.right + step.left) / 2 if previous is not h0 else (h0.right + step.left) / 2
            d.arrow((previous.right, previous.cy), (mid, previous.cy), (mid, step.cy), (step.left, step.cy))
        previous = h
        states.append(h)
    H = d.tensor("H", "(T, d_h)", "other", word="the states, stacked", cx=(states[0].cx + states[-1].cx) / 2,
                 top=h_top + 54 + GAP + 18, min_width=states[-1].right - states[0].left)
    for h in states:
        d.arrow((h.cx, h.bottom), (h.cx, H.top))
    d.note(["T steps,", "one after", "another"], x=44, top=x_top, anchor="middle")
    return d


def _context_layout() -> Diagram:
    """Chapter 1: encoder → one context vector → decoder, beside encoder → attention per step."""
    d = Diagram(
        name="context-vs-attention",
        title="Encoder–decoder with one context vector, and with additive attention",
        desc=("Two encoder–decoder networks side by side. Both read the source x of shape (T, d_in) "
              "with a GRU encoder into the encoder states H of shape (T, d_h). Left, without "
              "attention: only the last row of H is kept, the context vector c of shape (d_h,), "
              "and every one of the decoder's steps reads that same vector, so the whole source "
              "must fit into d_h numbers. Right, with additive attention: at decoder step i the "
              "previous decoder state s_(i-1) of shape (d_h,) and every row of H are scored by "
              "e_i = tanh(s_(i-1) W_s + H W_h) v, giving T scores e_i of shape (T,); a softmax over "
              "the T source positions turns them into the weights alpha_i of shape (T,); the "
              "context c_i = alpha_i H, a weighted sum of the rows of H of shape (d_h,), is "
              "computed anew for every step and fed, with the previous output token, into the "
              "decoder's GRU cell, which gives the new state s_i of shape (d_h,)."),
    )
    left, right = 130, 450
    # ---- left: one fixed context vector
    top = 20
    x_l = d.tensor("x", "(T, d_in)", "other", word="source", cx=left, top=top)
    enc_l = d.operation("GRU encoder", cx=left, after=x_l)
    H_l = d.tensor("H", "(T, d_h)", "other", word="encoder states", cx=left, after=enc_l)
    last = d.operation("last row only", cx=left, after=H_l)
    c = d.tensor("c", "(d_h,)", "values", word="context", cx=left, after=last)
    dec_l = d.operation("decoder, every step i", cx=left, top=c.bottom + GAP + 60, after=c)
    d.note(["the same c", "at every step"], x=left + 10, top=c.bottom + 14)
    s_l = d.tensor("s_{i}", "(d_h,)", "other", word="decoder state", cx=left, after=dec_l)
    d.frame([x_l, enc_l, H_l, last, c, dec_l, s_l], "without attention", label_at="top")

    # ---- right: additive attention, one context per decoder step
    x_r = d.tensor("x", "(T, d_in)", "other", word="source", cx=right - 80, top=top)
    enc_r = d.operation("GRU encoder", cx=right - 80, after=x_r)
    H_r = d.tensor("H", "(T, d_h)", "other", word="", cx=right - 80, after=enc_r)
    s_prev = d.tensor("s_{i−1}", "(d_h,)", "other", word="", cx=right + 92, top=H_r.top)
    score = d.operation("tanh(s_{i−1} W_{s} + H W_{h}) v", cx=right, top=H_r.bottom + GAP)
    d.arrow((H_r.cx, H_r.bottom), (H_r.cx, score.top))
    d.arrow((s_prev.cx, s_prev.bottom), (s_prev.cx, score.top))
    e = d.tensor("e_{i}", "(T,)", "scores", word="scores", cx=right, after=score)
    soft = d.operation("softmax over the T positions", cx=right, after=e)
    alpha = d.tensor("α_{i}", "(T,)", "scores", word="weights", cx=right, after=soft)
    mix = d.operation("c_{i} = α_{i} H", cx=right, after=alpha)
    route = H_r.left - 14  # the rows of H are what the weights mix
    d.arrow((H_r.left, H_r.cy), (route, H_r.cy), (route, mix.cy), (mix.left, mix.cy))
    c_i = d.tensor("c_{i}", "(d_h,)", "values", word="context", cx=right, after=mix)
    dec_r = d.operation("decoder step i", cx=right, after=c_i)
    s_r = d.tensor("s_{i}", "(d_h,)", "other", word="", cx=right, after=dec_r)
    loop = d.note(["becomes s_{i−1}", "of step i + 1"], x=s_r.right + 12, top=s_r.top + 8)
    d.frame([x_r, enc_r, H_r, s_prev, score, e, soft, alpha, mix, c_i, dec_r, s_r, loop],
            "with additive attention", label_at="top")
    return d


def _scores_layout() -> Diagram:
    """Chapter 1: additive (Bahdanau) attention beside scaled dot-product attention, one query."""
    d = Diagram(
        name="additive-vs-dot-product",
        title="Additive attention beside scaled dot-product attention, for one query",
        desc=("Two attention mechanisms side by side, each for one query. Left, additive attention: "
              "the decoder state s of shape (d_h,) plays the query and the encoder states H of "
              "shape (T, d_h) play both keys and values. The scores come from a small network, "
              "e = tanh(s W_s + H W_h) v, through an attention space of width d_a, giving T scores "
              "e of shape (T,); a softmax over the T positions gives the weights alpha of shape "
              "(T,), and the context alpha H has shape (d_h,). Right, scaled dot-product attention "
              "(chapter 4): a query q of shape (d_k,) and keys K of shape (T, d_k) give the scores "
              "q K^T divided by the square root of d_k, of shape (T,); the same softmax gives the "
              "weights of shape (T,), and the output is the weighted sum of the values V of shape "
              "(T, d_v), of shape (d_v,). Only the scoring step differs; the dot product needs no "
              "hidden layer, so many queries are one matrix product."),
    )
    left, right = 150, 470
    # ---- additive
    additive = _one_query(d, left, ("s", "(d_h,)", "decoder"), ("H", "(T, d_h)", "encoder"),
                          score="tanh(s W_{s} + H W_{h}) v", mix="α H")
    mix_a = additive[-1]
    c = d.tensor("c", "(d_h,)", "other", word="context", cx=left, after=mix_a)
    d.note(["H is keys", "and values"], x=mix_a.right + 12, top=mix_a.top - 2)
    d.frame([*additive, c], "additive (§1.8)", label_at="top")
    # ---- dot product
    dot = _one_query(d, right, ("q", "(d_k,)", "query"), ("K", "(T, d_k)", "keys"),
                     score="q K^T ÷ √d_{k}", mix="α V")
    weights, mix_d = dot[-2:]
    V = d.tensor("V", "(T, d_v)", "values", word="values", cx=right + 110, top=weights.top)
    d.arrow((V.cx, V.bottom), (V.cx, mix_d.cy), (mix_d.right, mix_d.cy))
    out = d.tensor("output", "(d_v,)", "other", word="", cx=right, after=mix_d)
    d.frame([*dot, V, out], "scaled dot-product (chapter 4)", label_at="top")
    return d


def _one_query(d: Diagram, cx: float, query: tuple[str, str, str], key: tuple[str, str, str], *,
               score: str, mix: str) -> list[Rect]:
    """One query's attention, top to bottom: query and keys → ``score`` → e → softmax → α → ``mix``.

    The two mechanisms of :func:`_scores_layout` differ only in ``score`` (and in what
    ``mix`` weighs), so both columns are drawn here.

    Args:
        d: the diagram drawn into.
        cx: the column's horizontal centre; the query sits 62 px left of it, the keys 62 px right.
        query: the query tensor's ``(label, shape, role word)``.
        key: the keys tensor's ``(label, shape, role word)``.
        score: the scoring operation, with markup.
        mix: the operation weighing the rows with α (``"α H"``).

    Returns:
        The query, keys, scoring, scores e, softmax, weights α and mixing rectangles, in that order.
    """
    q = d.tensor(query[0], query[1], "queries", word=query[2], cx=cx - 62, top=20)
    k = d.tensor(key[0], key[1], "keys", word=key[2], cx=cx + 62, top=20)
    scoring = d.operation(score, cx=cx, top=q.bottom + GAP)
    d.arrow((q.cx, q.bottom), (q.cx, scoring.top))
    d.arrow((k.cx, k.bottom), (k.cx, scoring.top))
    e = d.tensor("e", "(T,)", "scores", cx=cx, after=scoring)
    softmax = d.operation("softmax over T", cx=cx, after=e)
    alpha = d.tensor("α", "(T,)", "scores", word="weights", cx=cx, after=softmax)
    return [q, k, scoring, e, softmax, alpha, d.operation(mix, cx=cx, after=alpha)]


#: The rows of the sequence-shapes diagram: (name, task, inputs, outputs, step labels);
#: ``None`` where a step has no input or no output; a ", " in a name breaks its line.
SHAPES = (
    ("one-to-many:", "a caption for an image", ["image", None, None], ["a", "dog", "runs"], ["RNN"] * 3),
    ("many-to-one:", "sentiment of a review", ["so", "very", "good"], [None, None, "positive"], ["RNN"] * 3),
    ("many-to-many, aligned:", "a tag for every word", ["Lucas", "visits", "Rio"], ["PER", "O", "LOC"],
     ["RNN"] * 3),
    ("many-to-many, not aligned:", "translation", ["como", "vai", "você", "<sos>", "how", "are"],
     [None, None, None, "how", "are", "you"], ["enc"] * 3 + ["dec"] * 3),
)


def _shapes_layout() -> Diagram:
    """Chapter 1: the four shapes of sequence problems, each as a small unrolled RNN."""
    d = Diagram(
        name="sequence-shapes",
        title="Four shapes of sequence problems, drawn as unrolled recurrent networks",
        desc=("Four small unrolled recurrent networks, one per row, each a chain of RNN steps passing "
              "its state from left to right. One-to-many, a caption for an image: one input, the "
              "image, enters the first step, and every step emits a word, a, dog, runs. Many-to-one, "
              "the sentiment of a review: the words so, very, good enter one per step and only the "
              "last step emits an output, positive. Many-to-many, aligned, a tag for every word: "
              "Lucas, visits, Rio enter and each step emits its tag, PER, O, LOC. Many-to-many, not "
              "aligned, translation: three encoder steps read como, vai, você and emit nothing; "
              "their last state starts three decoder steps, which read <sos>, how, are and emit "
              "how, are, you, so the output starts only after the whole input has been read."),
    )
    text_x, first_cx, spacing = 12, 230, 74
    top = 0
    for name, task, inputs, outputs, labels in SHAPES:
        out_top = top
        pill_top = out_top + 18 + GAP
        in_top = pill_top + OP_H + GAP
        d.note([*name.split(", "), task], x=text_x, top=pill_top - 13)
        previous = None
        for k, (x_word, y_word, label) in enumerate(zip(inputs, outputs, labels)):
            cx = first_cx + k * spacing
            pill = d.operation(label, cx=cx, top=pill_top)
            if previous is not None:
                d.arrow((previous.right, previous.cy), (pill.left, pill.cy))
            if x_word is not None:
                word = d.note(x_word, x=cx, top=in_top, anchor="middle")
                d.arrow((cx, word.top - 3), (cx, pill.bottom))
            if y_word is not None:
                word = d.note(y_word, x=cx, top=out_top, anchor="middle")
                d.arrow((cx, pill.top), (cx, word.bottom + 3))
            previous = pill
        top = in_top + 18 + 16
    return d


def _lstm_layout() -> Diagram:
    """Chapter 1: one LSTM step, the gates on the left and the additive cell path on the right."""
    d = Diagram(
        name="lstm-cell",
        title="One step of an LSTM",
        desc=("One step of a long short-term memory network. The input x_t of shape (d_in,) and the "
              "previous hidden state h_(t-1) of shape (d_h,) go through one affine map, [x_t, "
              "h_(t-1)] W + b, split into four vectors of shape (d_h,): the output gate o_t, the "
              "forget gate f_t and the input gate i_t, each squashed by a sigmoid into (0, 1), and "
              "the candidate c~_t, squashed by tanh. On the right runs the cell path: the previous "
              "cell state c_(t-1) of shape (d_h,) becomes c_t = f_t * c_(t-1) + i_t * c~_t, "
              "elementwise, an addition with no weight matrix and no tanh on the way. The new "
              "hidden state is h_t = o_t * tanh(c_t), of shape (d_h,). Both c_t and h_t go on to "
              "step t + 1."),
    )
    top = 20
    x = d.tensor("x_{t}", "(d_in,)", "other", word="input", cx=80, top=top)
    h_prev = d.tensor("h_{t−1}", "(d_h,)", "other", word="", cx=228, top=top)
    c_prev = d.tensor("c_{t−1}", "(d_h,)", "values", word="cell", cx=480, top=top)
    gates = d.operation("σ or tanh of [x_{t}, h_{t−1}] W + b", cx=175, top=x.bottom + GAP)
    d.arrow((x.cx, x.bottom), (x.cx, gates.top))
    d.arrow((h_prev.cx, h_prev.bottom), (h_prev.cx, gates.top))
    row = gates.bottom + GAP
    columns = {"o_{t}": 52, "f_{t}": 134, "i_{t}": 216, "c̃_{t}": 298}
    made = {}
    for label, cx in columns.items():
        made[label] = d.tensor(label, "(d_h,)", "other", word="", cx=cx, top=row)
        d.arrow((cx, gates.bottom), (cx, row))
    d.note(["o, f, i: σ, in (0, 1)", "c̃: tanh, candidate"], x=gates.right + 10, top=gates.top - 8)
    update = d.operation("c_{t} = f_{t} ⊙ c_{t−1} + i_{t} ⊙ c̃_{t}", cx=480, top=row + 54 + 46)
    d.arrow((c_prev.cx, c_prev.bottom), (c_prev.cx, update.top))
    for shift, label in ((-9, "f_{t}"), (0, "i_{t}"), (9, "c̃_{t}")):
        t = made[label]
        d.arrow((t.cx, t.bottom), (t.cx, update.cy + shift), (update.left, update.cy + shift))
    c_new = d.tensor("c_{t}", "(d_h,)", "values", word="cell", cx=480, after=update)
    out = d.operation("h_{t} = o_{t} ⊙ tanh(c_{t})", cx=200, top=c_new.cy - OP_H / 2)
    d.arrow((c_new.left, c_new.cy), (out.right, out.cy))
    o = made["o_{t}"]
    d.arrow((o.cx, o.bottom), (o.cx, out.top - 14), (out.cx - 60, out.top - 14), (out.cx - 60, out.top))
    h_new = d.tensor("h_{t}", "(d_h,)", "other", word="", cx=200, after=out)
    d.note(["to step t + 1"], x=c_new.right + 10, top=c_new.top + 18)
    d.note(["to step t + 1 and the output"], x=h_new.right + 10, top=h_new.top + 18)
    d.note(["the cell path:", "no W_{hh}, no tanh"], x=c_prev.cx + 10, top=c_prev.bottom + 30)
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out
#: (:func:`solutions.figures.diagram.registry` draws the SVG from it).
LAYOUTS: dict[str, Layout] = {
    "book/01_rnn_limitations/figures/sequence_shapes.svg": _shapes_layout,
    "book/01_rnn_limitations/figures/unrolled_rnn.svg": _unrolled_layout,
    "book/01_rnn_limitations/figures/lstm_cell.svg": _lstm_layout,
    "book/01_rnn_limitations/figures/context_vs_attention.svg": _context_layout,
    "book/01_rnn_limitations/figures/additive_vs_dot_product.svg": _scores_layout,
}
