"""Incremental detokenizing: push(token_id) -> str, flush(). Holds back partial UTF-8. No SSE.

Byte-level BPE tokens are byte strings; a character can span tokens. The concatenation of
every push() and the final flush() equals decoding all the bytes at once with errors
replaced, for any token sequence.
"""

from __future__ import annotations

import codecs
from functools import lru_cache


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: the printable stand-ins byte-level BPE uses for bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_byte_table(tokenizer, vocab_size: int) -> list[bytes]:
    """The bytes each token id stands for; special tokens are their text, ids past the vocabulary empty."""
    mapping = _unicode_to_byte()
    special = set(tokenizer.all_special_tokens) | set(tokenizer.get_added_vocab())
    n = min(vocab_size, len(tokenizer))
    table = []
    for piece in tokenizer.convert_ids_to_tokens(list(range(n))):
        if piece is None:
            table.append(b"")
        elif piece in special or any(ch not in mapping for ch in piece):
            table.append(piece.encode("utf-8"))
        else:
            table.append(bytes(mapping[ch] for ch in piece))
    return table + [b""] * (vocab_size - n)


class Detokenizer:
    def __init__(self, token_bytes: list[bytes]) -> None:
        self._token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._decoder.decode(self._token_bytes[token_id])

    def flush(self) -> str:
        """Bytes of an unfinished character, as U+FFFD; call once at the end."""
        return self._decoder.decode(b"", final=True)


class StopMatcher:
    """Finds stop strings across deltas; holds back text that could still begin one."""

    def __init__(self, stops: list[str], across_tokens: bool = True, tail_after_stop: bool = False) -> None:
        self._stops = [s for s in stops if s]
        self._pending = ""
        self._across = across_tokens  # False only for a seeded defect (streamlab/defects.py)
        self._tail = tail_after_stop  # True only for a seeded defect

    def push(self, delta: str) -> tuple[str, bool]:
        """(text safe to emit, whether a stop string matched). After a match, emit nothing more."""
        buf = self._pending + delta if self._across else delta
        hits = [i for i in (buf.find(s) for s in self._stops) if i >= 0]
        if hits:
            self._pending = ""
            return (buf if self._tail else buf[:min(hits)]), True
        hold = self._longest_stop_prefix_suffix(buf) if self._across else 0
        self._pending = buf[len(buf) - hold:] if hold else ""
        return buf[:len(buf) - hold], False

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out

    def _longest_stop_prefix_suffix(self, buf: str) -> int:
        best = 0
        for stop in self._stops:
            for k in range(min(len(stop) - 1, len(buf)), best, -1):
                if buf.endswith(stop[:k]):
                    best = k
                    break
        return best


class TextStream:
    """One sequence's text: called by the engine with each token (as its stop check), in order.

    deltas[i] is the text token i adds to the stream; a stop string ends it (the stop string
    and anything after it are never emitted).
    """

    def __init__(self, token_bytes: list[bytes], stops: list[str], across_tokens: bool = True,
                 tail_after_stop: bool = False) -> None:
        self._detok = Detokenizer(token_bytes)
        self._stops = StopMatcher(stops, across_tokens, tail_after_stop)
        self.deltas: list[str] = []
        self.stopped = False

    def __call__(self, token_id: int) -> bool:
        if self.stopped:
            self.deltas.append("")
            return True
        text, self.stopped = self._stops.push(self._detok.push(token_id))
        self.deltas.append(text)
        return self.stopped

    def flush(self) -> str:
        """What is still held back, for a sequence that ended without a stop string."""
        if self.stopped:
            return ""
        return self._stops.push(self._detok.flush())[0] + self._stops.flush()

    @property
    def text(self) -> str:
        return "".join(self.deltas)
