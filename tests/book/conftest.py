"""Fixtures of the book tests: the built web edition of the book."""
import pytest

from book_helpers import ensure_book_built


@pytest.fixture(scope="session")
def built_book():
    """``_build/html`` of the web edition, built first when missing or out of date."""
    return ensure_book_built()
