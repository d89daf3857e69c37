"""The reference implementation of the book: every exercise's answer and the full model."""
