import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlab.detokenizer import Detokenizer, StopMatcher, TextStream, token_byte_table

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


@pytest.fixture(scope="module")
def table(tiny):
    return token_byte_table(tiny.tokenizer, tiny.model.shape.vocab_size)


MULTIBYTE = ["🎉", "世界", "e\u0301", "ü", "\u2028", "\u0085", "日本語のテキスト", "👩‍👩‍👧", "ß", "ﷺ", "a"]


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.sampled_from(MULTIBYTE) | st.text(max_size=6), max_size=12))
def test_deltas_concatenate_to_the_full_decode_of_real_text(tiny, table, parts):
    text = "".join(parts)
    ids = tiny.tokenizer.encode(text)
    detok = Detokenizer(table)
    deltas = [detok.push(i) for i in ids] + [detok.flush()]
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)  # no character was ever cut in half


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, 8191), max_size=40))
def test_any_token_sequence_matches_decoding_all_bytes_at_once(table, ids):
    detok = Detokenizer(table)
    streamed = "".join(detok.push(i) for i in ids) + detok.flush()
    assert streamed == b"".join(table[i] for i in ids).decode("utf-8", errors="replace")


def test_token_bytes_agree_with_the_tokenizer(tiny, table):
    for text in ["hello world", "naïve café", "🎉 done"]:
        ids = tiny.tokenizer.encode(text)
        assert b"".join(table[i] for i in ids).decode() == tiny.tokenizer.decode(ids)
    assert table[tiny.tokenizer.eos_token_id] == b"<|endoftext|>"


def feed(matcher: StopMatcher, pieces: list[str]) -> tuple[str, bool]:
    out = []
    for piece in pieces:
        text, hit = matcher.push(piece)
        out.append(text)
        if hit:
            return "".join(out), True
    return "".join(out) + matcher.flush(), False


@pytest.mark.parametrize("pieces,stops,expected", [
    (["Hello", " wor", "ld!"], ["world"], ("Hello ", True)),
    (["ab", "c", "d"], ["cd"], ("ab", True)),
    (["x", "EN", "D", "more"], ["END"], ("x", True)),
    (["abc"], ["zzz"], ("abc", False)),
    (["ab", "x"], ["abc"], ("abx", False)),  # a held-back prefix that did not become a stop string
    (["one\n", "\ntwo"], ["\n\n", "two"], ("one", True)),  # the earliest match wins
])
def test_stop_strings_across_pieces(pieces, stops, expected):
    assert feed(StopMatcher(stops), pieces) == expected


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="abc", max_size=30), stop=st.text(alphabet="abc", min_size=1, max_size=3),
       cuts=st.lists(st.integers(0, 30), max_size=8))
def test_stop_matching_does_not_depend_on_how_text_is_cut(text, stop, cuts):
    bounds = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    pieces = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    index = text.find(stop)
    expected = (text[:index], True) if index >= 0 else (text, False)
    assert feed(StopMatcher([stop]), pieces) == expected


def test_text_stream_stops_at_the_token_and_never_emits_the_stop_string(tiny, table):
    ids = tiny.tokenizer.encode("first line. STOP here and more")
    stream = TextStream(table, ["STOP"])
    results = [stream(i) for i in ids]
    stop_at = results.index(True)
    assert results[stop_at + 1:] == [True] * (len(ids) - stop_at - 1)
    assert stream.text == "first line. " and stream.flush() == ""
    plain = TextStream(table, [])
    assert not any(plain(i) for i in ids)
    assert plain.text + plain.flush() == "first line. STOP here and more"
