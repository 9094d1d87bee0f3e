import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlab.sse import SSEEvent, SSEParser, encode_comment, encode_event, encode_json_event

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def parse(data: bytes) -> list[SSEEvent]:
    p = SSEParser()
    return p.feed(data) + p.close()


def test_writer_splits_multiline_data_and_names_fields():
    raw = encode_event("a\nb\r\nc\rd", event="token", id="7", retry=1500)
    assert raw == b"event: token\nid: 7\nretry: 1500\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
    assert parse(raw) == [SSEEvent("token", "a\nb\nc\nd", "7", 1500)]


def test_writer_refuses_line_breaks_in_single_line_fields():
    with pytest.raises(ValueError):
        encode_event("x", event="a\nb")
    with pytest.raises(ValueError):
        encode_event("x", id="1\r")


def test_writer_is_utf8_and_json_events_are_ascii():
    assert encode_event("héllo") == "data: héllo\n\n".encode()
    raw = encode_json_event("token", {"text": "a\u2028b\u0085c🎉"}, id=3)
    assert raw.isascii()
    (event,) = parse(raw)
    assert event.event == "token" and event.id == "3" and event.json()["text"] == "a\u2028b\u0085c🎉"


def test_comments_are_ignored_and_padding_is_a_comment():
    raw = encode_comment("keep-alive") + b"\n" + encode_json_event("token", {"i": 1}, id=1, padding=1000)
    assert len(raw) > 1000
    assert [e.json() for e in parse(raw)] == [{"type": "token", "i": 1}]


def test_leading_bom_is_stripped_once():
    assert parse(b"\xef\xbb\xbfdata: a\n\n") == [SSEEvent("message", "a", "", None)]
    # A second BOM is not at the start of the stream: it is part of a field name, so ignored.
    assert parse(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n") == []


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(newline):
    raw = b"event: e" + newline + b"data: 1" + newline + b"data: 2" + newline + newline
    assert parse(raw) == [SSEEvent("e", "1\n2", "", None)]


def test_cr_at_the_end_of_one_chunk_and_lf_at_the_start_of_the_next():
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\n\r") == [SSEEvent("message", "a", "", None)]
    assert p.feed(b"\ndata: b\n\n") == [SSEEvent("message", "b", "", None)]


def test_field_without_colon_and_one_leading_space_stripped():
    assert parse(b"data\n\n") == [SSEEvent("message", "", "", None)]
    assert parse(b"data:  two spaces\n\n")[0].data == " two spaces"
    assert parse(b"data:nospace\n\n")[0].data == "nospace"
    assert parse(b"unknown: x\ndata: y\n\n")[0].data == "y"


def test_id_with_nul_is_ignored_and_id_persists():
    events = parse(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\ndata: c\n\n")
    assert [e.id for e in events] == ["1", "1", "1"]


def test_retry_only_ascii_digits():
    events = parse(b"retry: 100\ndata: a\n\nretry: 1x\ndata: b\n\nretry: \xd9\xa3\ndata: c\n\n")
    assert [e.retry for e in events] == [100, 100, 100]


def test_event_without_data_is_not_dispatched_but_its_id_counts():
    p = SSEParser()
    assert p.feed(b"id: 9\nevent: ping\n\n") == []
    assert p.last_event_id == "9"
    assert p.feed(b"data: x\n\n") == [SSEEvent("message", "x", "9", None)]


def test_one_trailing_lf_removed_and_default_type_message():
    assert parse(b"data: a\ndata:\n\n") == [SSEEvent("message", "a\n", "", None)]


def test_close_discards_an_unfinished_event():
    p = SSEParser()
    assert p.feed(b"data: complete\n\ndata: half") == [SSEEvent("message", "complete", "", None)]
    assert p.close() == []


def test_invalid_utf8_is_replaced():
    assert parse(b"data: a\xffb\n\n")[0].data == "a\ufffdb"


fields = st.sampled_from(["data", "event", "id", "retry", ":comment", "other"])
values = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12)
line_ends = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def streams(draw) -> bytes:
    parts = []
    for _ in range(draw(st.integers(0, 12))):
        field, value, end = draw(fields), draw(values), draw(line_ends)
        parts.append(field if field.startswith(":") else f"{field}: {value}")
        parts.append(end)
        if draw(st.booleans()):
            parts.append(draw(line_ends))
    return ("\ufeff" if draw(st.booleans()) else "").encode() + "".join(parts).encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(raw=streams(), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_chunking_never_changes_the_events(raw, cuts):
    whole = parse(raw)
    byte_at_a_time = SSEParser()
    one = [e for i in range(len(raw)) for e in byte_at_a_time.feed(raw[i:i + 1])] + byte_at_a_time.close()
    chunked = SSEParser()
    bounds = sorted({c % (len(raw) + 1) for c in cuts} | {0, len(raw)})
    pieces = [raw[a:b] for a, b in zip(bounds, bounds[1:])]
    many = [e for piece in pieces for e in chunked.feed(piece)] + chunked.close()
    assert whole == one == many


@settings(max_examples=200, deadline=None)
@given(payload=st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=4), event_id=st.integers(1, 10**6))
def test_writer_and_parser_round_trip(payload, event_id):
    (event,) = parse(encode_json_event("token", payload, event_id))
    assert event.id == str(event_id) and json.loads(event.data) == {"type": "token", **payload}


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                        max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(["start", "token", "done", "error"]),
       payload=st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4),
       event_id=st.one_of(st.integers(0, 10**6), st.from_regex(r"req-[0-9]{1,4}:[0-9]{1,4}", fullmatch=True)),
       padding=st.integers(0, 40), retry=st.none() | st.integers(0, 10**5))
def test_the_services_event_bytes_are_the_general_writers(kind, payload, event_id, padding, retry):
    """encode_json_event writes without encode_event's line split; its bytes must not change."""
    body = json.dumps({"type": kind, **payload}, ensure_ascii=True, separators=(",", ":"))
    pad = encode_comment("x" * padding) if padding else b""
    expected = pad + encode_event(body, event=kind, id=str(event_id), retry=retry)
    assert encode_json_event(kind, payload, event_id, padding, retry) == expected


def test_the_services_writer_refuses_what_the_general_writer_refuses():
    for bad in ({"id": "1\n"}, {"id": "a\0"}, {"retry": -1}):
        with pytest.raises(ValueError):
            encode_event("{}", event="token", **{"id": "1", **bad})
        with pytest.raises(ValueError):
            encode_json_event("token", {}, bad.get("id", "1"), retry=bad.get("retry"))
