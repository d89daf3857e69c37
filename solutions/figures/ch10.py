"""Chapter 10's diagram: the decoding loop with the key/value cache, with every shape.

Drawn in the book's figure language (:mod:`solutions.figures.diagram`), two columns read
top-down. Left, done once per sentence: the source ids go through the encoder to
``memory``, whose cross-attention keys and values every decoder layer projects once.
Right, done once per generated token: the newest token is embedded at its position,
its query attends over the cached self-attention keys and values (which grow by one
position per step) and over the cached memory keys and values; the output projection
gives the logits of the next token, whose arg-max is fed back in.

``LAYOUTS`` maps each file written to the function that lays the diagram out, as in
:mod:`solutions.figures.diagram`, which draws the SVG from it.
"""
from __future__ import annotations

from .diagram import GAP, Diagram, Layout

__all__ = ["LAYOUTS"]

FILE = "book/10_inference/figures/decoding_loop.svg"

DESC = ("The decoding loop with a key/value cache, drawn in two columns. Left, once per sentence: the "
        "source ids of shape (B, T_src) go through the encoder with the source padding mask and give memory "
        "of shape (B, T_src, d_model); every decoder layer projects memory once into cross-attention keys "
        "and values of shape (B, h, T_src, d_k), which stay in the cache. Right, once per step t: the newest "
        "token y_t of shape (B, 1) is embedded and its positional encoding for position t is added, giving "
        "x of shape (B, 1, d_model). In every decoder layer its projections give one new query, key and "
        "value of shape (B, h, 1, d_k); the key and value are appended to the self-attention cache, which "
        "grows from (B, h, t - 1, d_k) to (B, h, t, d_k); the query attends over the t cached positions (no "
        "causal mask is needed, every cached position is in the past) and then over the cached memory keys "
        "and values. The output projection gives logits of shape (B, V) for the next token; its arg-max (or "
        "the beam search) picks y_t+1, which is fed back in as the next step's input until every sentence "
        "has produced <eos>.")


def _decoding_loop_layout() -> Diagram:
    """Chapter 10: encoder once, cross K/V cached; per step one query, self K/V cache growing."""
    d = Diagram(name="decoding-loop", title="Greedy decoding with a key/value cache", desc=DESC)
    left_x, right_x = 124, 428

    # Left column: once per sentence.
    src = d.tensor("src", "(B, T_src)", "other", word="source ids", cx=left_x, top=20)
    encoder = d.operation("encoder × N, src_mask", cx=left_x, after=src)
    memory = d.tensor("memory", "(B, T_src, d_model)", "other", word="", cx=left_x, after=encoder)
    project_mem = d.operation("W^K, W^V of each layer", cx=left_x, after=memory)
    cross_kv = d.tensor("K_{mem}, V_{mem}", "(B, h, T_src, d_k)", "keys", word="cached",
                        cx=left_x, after=project_mem)
    d.frame([src, encoder, memory, project_mem, cross_kv], "once per sentence")

    # Right column: once per step.
    token = d.tensor("y_{t}", "(B, 1)", "other", word="newest token", cx=right_x, top=20)
    embed = d.operation("embed, + PE[t]", cx=right_x, after=token)
    x = d.tensor("x", "(B, 1, d_model)", "other", word="", cx=right_x, after=embed)
    qkv = d.operation("W^Q, W^K, W^V", cx=right_x, after=x)
    q = d.tensor("q_{t}", "(B, h, 1, d_k)", "queries", word="one query", cx=right_x - 80, top=qkv.bottom + GAP)
    cache = d.tensor("K, V", "(B, h, t, d_k)", "keys", word="cache + k_{t}, v_{t}", cx=right_x + 82,
                     top=qkv.bottom + GAP)
    d.arrow((qkv.cx - 30, qkv.bottom), (q.cx, q.top))
    d.arrow((qkv.cx + 30, qkv.bottom), (cache.cx, cache.top))
    self_attn = d.operation("self-attention over t positions", cx=right_x, top=q.bottom + GAP)
    d.arrow((q.cx, q.bottom), (q.cx, self_attn.top))
    d.arrow((cache.cx, cache.bottom), (cache.cx, self_attn.top))
    cross = d.operation("cross-attention over T_src", cx=right_x, after=self_attn)
    feed_x = cross_kv.right - 18  # down out of the left column, clear of its frame label
    d.arrow((feed_x, cross_kv.bottom), (feed_x, cross.cy), (cross.left, cross.cy))
    ffn = d.operation("feed-forward", cx=right_x, after=cross)
    layers = d.frame([qkv, q, cache, self_attn, cross, ffn], "× N decoder layers", label_at="bottom-right")
    logits = d.tensor("logits", "(B, V)", "scores", word="next token", cx=right_x, top=layers.bottom + GAP)
    d.arrow((right_x, ffn.bottom), (right_x, logits.top))
    pick = d.operation("arg-max → y_{t+1}", cx=right_x, after=logits)
    loop_x = layers.right + 12
    d.arrow((pick.right, pick.cy), (loop_x, pick.cy), (loop_x, token.cy), (token.right, token.cy))
    d.note(["t ← t + 1, until", "every sentence ended"], x=loop_x - 6, top=pick.bottom + 6, anchor="end")
    return d


#: Chapter diagrams: file (relative to the repository) → the function laying it out
#: (:func:`solutions.figures.diagram.registry` draws the SVG from it).
LAYOUTS: dict[str, Layout] = {FILE: _decoding_loop_layout}
