"""Chapter 2's diagrams: from text to the ``(B, T, d_model)`` tensor every later chapter
starts from (text → tokens → ids → one-hot × embedding matrix → vectors × √d_model),
and the CBOW network that learns an embedding table from the company words keep.

It uses only the book's figure language of :mod:`solutions.figures.diagram` (tensors with
their shapes, operations, arrows, frames and notes). A worked example runs down the
right-hand side: the sentence "the cat sat" with the ids of a small vocabulary.

``LAYOUTS`` maps each file written to the function that lays the diagram out, as in
:mod:`solutions.figures.diagram`, which draws the SVG from it. (Nothing here is named after a graded
exercise: the grading sandbox withholds the modules that define those names.)
"""
from __future__ import annotations

from .diagram import GAP, Diagram, Layout

__all__ = ["LAYOUTS"]

#: The worked example drawn beside the flow: tokens and their ids in the vocabulary that
#: chapter 2's §2.2 builds from "the cat sat" and "the dog sat on the mat" (specials 0-3,
#: then by count: the = 4, sat = 5, cat = 6), so the figure and the chapter's cells agree.
EXAMPLE_TOKENS = ("the", "cat", "sat")
EXAMPLE_IDS = (4, 6, 5)


def _text_to_vectors_layout() -> Diagram:
    """Chapter 2: text → tokens → ids → one-hot X → X @ E (a row lookup) → × √d_model."""
    tokens = ", ".join(f'"{t}"' for t in EXAMPLE_TOKENS)
    ids = ", ".join(str(i) for i in EXAMPLE_IDS)
    d = Diagram(
        name="text-to-vectors",
        title="From text to vectors: tokens, ids and the embedding layer",
        desc=("A top-to-bottom flow diagram of how text becomes the input of a Transformer. "
              "A batch of B sentences is split into tokens by a tokeniser (words, characters or "
              "BPE subwords), giving tokens of shape (B, T). Looking each token up in the "
              "vocabulary gives integer ids of shape (B, T), unknown tokens becoming <unk>. "
              "Each id can be written as a one-hot row X of shape (B, T, |V|); multiplying it by "
              "the learned embedding matrix E of shape (|V|, d_model) selects one row of E per "
              "token, so X @ E equals E[ids] and is computed as a lookup, never as a product. "
              "The vectors are multiplied by the square root of d_model, giving the embeddings "
              "of shape (B, T, d_model) that the positional encoding is added to. Beside the "
              f"flow, the example sentence the cat sat becomes the tokens {tokens}, the ids "
              f"{ids}, and three rows of E."),
    )
    cx = 200
    note_x = 392

    text = d.tensor("text", "B sentences", "other", word="strings", cx=cx, top=20)
    d.note('"the cat sat"', x=note_x, top=text.top + 18, mono=True)

    split = d.operation("tokenise: words, characters or BPE", cx=cx, after=text)

    toks = d.tensor("tokens", "(B, T)", "other", word="strings", cx=cx, after=split)
    d.note(tokens, x=note_x, top=toks.top + 18, mono=True)

    lookup = d.operation("vocabulary lookup, unknown → <unk>", cx=cx, after=toks)

    id_box = d.tensor("ids", "(B, T)", "other", word="LongTensor", cx=cx, after=lookup)
    d.note(f"[{ids}]", x=note_x, top=id_box.top + 18, mono=True)

    onehot = d.operation("one-hot", cx=cx, after=id_box, dashed=True)

    x_box = d.tensor("X", "(B, T, |V|)", "other", word="one-hot rows", cx=cx, after=onehot,
                     dashed=True)
    d.note(["a single 1 per row, at", "column id; never built"], x=note_x, top=x_box.top + 8)

    product = d.operation("X @ E = E[ids]", cx=cx, after=x_box)
    table = d.tensor("E", "(|V|, d_model)", "parameters", word="embedding matrix", cx=note_x + 92,
                     top=product.top - 11)
    d.arrow((table.left, product.cy), (product.right, product.cy))
    lookup_frame = d.frame([onehot, x_box, product], "in code: a row lookup",
                           label_at="bottom")

    scale = d.operation("× √d_{model}", cx=cx, top=lookup_frame.bottom + GAP)
    d.arrow((cx, lookup_frame.bottom), (cx, scale.top))
    d.note(["the scale of the", "positional encoding", "(chapter 3)"], x=note_x, top=scale.top - 4)

    out = d.tensor("embeddings", "(B, T, d_model)", "other", word="", cx=cx, after=scale)
    d.note(["three rows of E,", "each × √d_{model}"], x=note_x, top=out.top + 8)
    return d


def _cbow_layout() -> Diagram:
    """Chapter 2: the CBOW network that learns an embedding table from the company words keep."""
    d = Diagram(
        name="cbow",
        title="CBOW: predict a word from the mean of its neighbours' vectors",
        desc=("A top-to-bottom flow diagram of the CBOW network of word2vec, as the chapter trains "
              "it. For each of N positions of the corpus, the ids of the 2w neighbouring words (w = 2 "
              "on each side) form a tensor of shape (N, 2w); in the example the neighbours of dog in "
              "the old dog sees a are the, old, sees and a. Looking them up in the embedding matrix E "
              "of shape (|V|, d) gives context vectors of shape (N, 2w, d). Their mean over the "
              "neighbours, padding left out, has shape (N, d). A linear layer with weights W_out of "
              "shape (d, |V|) turns it into scores over the vocabulary, shape (N, |V|), and the "
              "cross-entropy compares them with the id of the centre word, shape (N,). Training "
              "moves the rows of E so that words used in the same contexts get similar vectors; E "
              "is what is kept. Skip-gram reverses the direction: the centre word predicts each "
              "neighbour."),
    )
    cx, side_x = 190, 470
    ctx = d.tensor("context ids", "(N, 2w)", "other", word="neighbours", cx=cx, top=20)
    d.note(['"the old _ sees a"', "→ the, old, sees, a"], x=side_x - 110, top=ctx.top + 8)

    look = d.operation("lookup: E[context ids]", cx=cx, after=ctx)
    table = d.tensor("E", "(|V|, d)", "parameters", word="embedding matrix", cx=side_x, top=look.top - 11)
    d.arrow((table.left, look.cy), (look.right, look.cy))

    vecs = d.tensor("context vectors", "(N, 2w, d)", "other", word="", cx=cx, after=look)
    mean = d.operation("mean over the neighbours", cx=cx, after=vecs)
    h = d.tensor("h", "(N, d)", "other", word="context summary", cx=cx, after=mean)

    out = d.operation("h @ W_{out} + b", cx=cx, after=h)
    w_out = d.tensor("W_{out}", "(d, |V|)", "parameters", word="output layer", cx=side_x, top=out.top - 11)
    d.arrow((w_out.left, out.cy), (out.right, out.cy))

    logits = d.tensor("scores", "(N, |V|)", "scores", word="", cx=cx, after=out)
    loss = d.operation("cross-entropy with the centre word", cx=cx, after=logits)
    centre = d.tensor("centre ids", "(N,)", "other", word="targets", cx=side_x + 30, top=loss.top - 11)
    d.arrow((centre.left, loss.cy), (loss.right, loss.cy))
    d.note(["training moves the rows of E; E is what is kept.",
            "Skip-gram reverses it: the centre word predicts each neighbour."],
           x=cx - 150, top=loss.bottom + 16)
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out
#: (:func:`solutions.figures.diagram.registry` draws the SVG from it).
LAYOUTS: dict[str, Layout] = {
    "book/02_tokens_and_embeddings/figures/text_to_vectors.svg": _text_to_vectors_layout,
    "book/02_tokens_and_embeddings/figures/cbow.svg": _cbow_layout,
}
