"""Output capture: head and tail, byte counts, truncation, raw bytes, bad UTF-8."""

import io

from attempts.core.capture import RawBudget, StreamCapture


def capture(**kw):
    raw = io.BytesIO()
    return StreamCapture(
        head_limit=kw.get("head", 10),
        tail_limit=kw.get("tail", 10),
        raw_file=raw,
        raw_limit=kw.get("raw", 1000),
    ), raw


def test_short_output_is_kept_whole():
    cap, raw = capture()
    assert cap.feed(b"hello") == "hello"
    assert cap.text() == "hello"
    assert cap.summary()["truncated"] is False
    assert raw.getvalue() == b"hello"


def test_long_output_keeps_head_and_tail_and_says_what_was_cut():
    cap, raw = capture()
    for chunk in (b"0123456789abc", b"defghij", b"klmnopqrstuvwxyz"):
        cap.feed(chunk)
    s = cap.summary()
    assert (s["head"], s["tail"], s["bytes"], s["truncated"]) == (
        "0123456789",
        "qrstuvwxyz",
        36,
        True,
    )
    assert s["omitted_bytes"] == 16
    assert "[... 16 bytes omitted ...]" in cap.text()
    assert raw.getvalue() == b"0123456789abcdefghijklmnopqrstuvwxyz"


def test_feed_returns_only_the_head_for_the_live_view():
    cap, _ = capture()
    assert cap.feed(b"01234567") == "01234567"
    assert cap.feed(b"89ABCD") == "89"
    assert cap.feed(b"EFG") == ""


def test_invalid_utf8_is_flagged_and_replaced_never_raised():
    cap, raw = capture(head=100)
    cap.feed(b"ok \xff\xfe end")
    assert cap.summary()["utf8"] is False
    assert cap.head_text() == "ok \ufffd\ufffd end"
    assert raw.getvalue() == b"ok \xff\xfe end"


def test_a_character_split_across_chunks_is_still_valid_utf8():
    cap, _ = capture(head=100)
    data = "héllo".encode()
    assert cap.feed(data[:2]) + cap.feed(data[2:]) == "héllo"
    assert cap.summary()["utf8"] is True


def test_tail_cut_inside_a_character_drops_the_partial_bytes():
    cap, _ = capture(head=2, tail=3)
    cap.feed(b"ab" + "xxxé".encode() + b"z")  # tail bytes: 0xA9 'z' ... cut mid-character
    assert "\ufffd" not in cap.tail_text()


def test_raw_file_is_capped_but_the_count_stays_honest():
    cap, raw = capture(raw=5)
    cap.feed(b"0123456789")
    assert raw.getvalue() == b"01234"
    s = cap.summary()
    assert (s["bytes"], s["raw_bytes"], s["raw_truncated"]) == (10, 5, True)


def test_the_streams_of_a_command_share_what_is_left_of_the_attempts_raw_budget():
    budget = RawBudget(15)
    out, out_raw = capture(raw=10)
    out.raw_budget = budget
    err = StreamCapture(
        head_limit=10, tail_limit=10, raw_file=io.BytesIO(), raw_limit=10, raw_budget=budget
    )
    out.feed(b"a" * 8)
    err.feed(b"b" * 12)  # its own limit would keep 10; the budget has 7 left
    out.feed(b"c" * 8)  # out's own limit has 2 left, the budget none
    assert (out.raw_bytes, err.raw_bytes, budget.left) == (8, 7, 0)
    assert out_raw.getvalue() == b"a" * 8
    assert out.raw_truncated and err.raw_truncated
    assert (out.total_bytes, err.total_bytes) == (16, 12)  # counted whatever is kept
