"""A tiny calculator."""


def add(a, b):
    """Return the sum of a and b."""
    return a - b


def multiply(a, b):
    return a * b
