"""Small text helpers."""

import re


def slugify(text):
    """'Hello, World!' -> 'hello-world'"""
    text = re.sub(r"[^a-z0-9]+", "-", text)
    return text.strip("-")


def word_count(text):
    """Number of words separated by whitespace."""
    return len(text.split(" "))


def title_case(text):
    """'the quick fox' -> 'The Quick Fox'"""
    return " ".join(word.capitalize() for word in text.split())


def truncate(text, width):
    """Cut text to at most width characters, ending with '...' when cut."""
    if len(text) <= width:
        return text
    return text[:width] + "..."
