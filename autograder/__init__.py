"""Checks, trusted grading and nbgrader wiring for the book's exercises."""
