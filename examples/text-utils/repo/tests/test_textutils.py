from textutils import slugify, title_case, truncate, word_count


def test_slugify_lowercases():
    assert slugify("Hello, World!") == "hello-world"


def test_word_count_collapses_whitespace():
    assert word_count("one  two three") == 3


def test_title_case():
    assert title_case("the quick fox") == "The Quick Fox"


def test_truncate_short_text_is_unchanged():
    assert truncate("short", 10) == "short"


def test_truncate_fits_width():
    assert truncate("a long sentence here", 10) == "a long ..."
