"""The wire contract: what a client reads agrees with itself. Its text is the decoding of the
token ids it read (cut at the first stop string), its usage counts what it read, its token events
come in order with nothing after the end, and its finish reason agrees with what it read.

Decoded here from the token ids, independently of the server's own detokenizer: a server whose
detokenizer or delivery drops, repeats or adds text fails `text` even where its solo runs carry
the same fault. Needs the model's tokenizer: every preset of ours shares the shipped one; a
server we did not start (a target's url) serves a model whose tokenizer we do not know, and
there `text` and the text half of `finish_agrees` are not observable.
"""

from __future__ import annotations

from functools import lru_cache

from harness.format.scenario import Scenario
from harness.judge.registry import implements
from harness.record.trace import NORMAL_FINISHES, StreamRecord, Trace
from harness.record.verdict import CheckResult

# What a stream that ended early may lack of its tokens' text: the bytes of an unfinished
# character (up to 3, each read back as one U+FFFD at most) and the start of a stop string held
# back in case the next token completes it (streamlab/detokenizer.py StopMatcher).
HELD_CHARACTER = 3


@lru_cache(maxsize=1)
def _tokenizer():
    # Read once: reading the file is 8 ms, and a 2,000-stream run's usage check read it for each
    # distinct prompt (10.4 of its 44 seconds under cProfile).
    from streamlab.tokenizer import shipped_tokenizer

    return shipped_tokenizer()


@lru_cache(maxsize=1)
def _shipped() -> tuple[list[bytes], int]:
    from streamlab.detokenizer import token_byte_table
    from streamlab.presets import VOCAB

    tokenizer = _tokenizer()
    return token_byte_table(tokenizer, VOCAB), tokenizer.eos_token_id


@lru_cache(maxsize=4096)
def _prompt_tokens(prompt: str) -> int:
    return len(_tokenizer().encode(prompt))


def tokenizer_known(scenario: Scenario, trace: Trace) -> str | None:
    """None where the run's model uses the shipped tokenizer; otherwise why the text is not decoded."""
    from streamlab.presets import PRESETS

    if trace.target is not None and not trace.target.get("model_known", True):
        return "a server the harness did not start: its tokenizer is not known here"
    if scenario.server.model not in PRESETS:
        return f"model {scenario.server.model!r} is not a preset: its tokenizer is not the shipped one"
    return None


def _decoded(ids: list[int], special: bool = True) -> str:
    """The ids' text; special=False: without the end-of-text token's own text (an OpenAI server's
    skip_special_tokens, vLLM's default, leaves it out wherever it comes)."""
    table, eos = _shipped()
    return b"".join(table[t] if 0 <= t < len(table) and (special or t != eos) else b""
                    for t in ids).decode("utf-8", errors="replace")


def _stop_at(text: str, stops: list[str]) -> int | None:
    hits = [i for i in (text.find(w) for w in stops if w) if i >= 0]
    return min(hits) if hits else None


def _cut(text: str, stops: list[str]) -> str:
    """The text a stream with these stop strings sends: up to the first one."""
    at = _stop_at(text, stops)
    return text if at is None else text[:at]


def _streams_read(trace: Trace) -> list[StreamRecord]:
    return [s for s in trace.streams if s.status == 200 and s.token_times]


def _who(s: StreamRecord) -> str:
    return f"{s.group}#{s.index}"


@implements("text")
def text(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    bound = "the stream's text is its token ids decoded, cut at the first stop string (a stream that ended early: " \
            f"a prefix, short by a held-back stop prefix and at most {HELD_CHARACTER} characters)"
    unknown = tokenizer_known(scenario, trace)
    if unknown:
        return CheckResult("text", True, f"not decoded: {unknown}", bound, compared=0)
    problems, compared = [], 0
    for s in _streams_read(trace):
        if not s.token_ids:
            continue  # a target that gives no ids: nothing to decode
        compared += 1
        stops = [w for w in s.request.get("stop") or [] if w]
        expected = _cut(_decoded(s.token_ids), stops)
        # An OpenAI server may leave the end-of-text token's own text out (skip_special_tokens).
        allowed = {expected} | ({_cut(_decoded(s.token_ids, special=False), stops)} if trace.openai_api else set())
        if s.finish in NORMAL_FINISHES:
            if s.text not in allowed:
                k = next((j for j, (a, b) in enumerate(zip(expected, s.text)) if a != b),
                         min(len(expected), len(s.text)))
                problems.append(f"{_who(s)}: text differs from its tokens' at character {k}: read "
                                f"{s.text[max(0, k - 8):k + 12]!r}, decoded {expected[max(0, k - 8):k + 12]!r}")
            continue
        slack = max((len(w) - 1 for w in stops), default=0) + HELD_CHARACTER
        if not any(a.startswith(s.text) and len(a) - len(s.text) <= slack for a in allowed):
            problems.append(f"{_who(s)} (ended {s.outcome}): read {len(s.text)} characters, not a prefix of its "
                            f"tokens' {len(expected)} within {slack}")
    return CheckResult("text", not problems, f"{compared - len(problems)}/{compared} streams read their tokens' text",
                       bound, problems, compared=compared)


@implements("usage")
def usage(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    unknown = tokenizer_known(scenario, trace)
    # A chat route's prompt is its template around the message: its count is the server's to say.
    chat = trace.target is not None and trace.target.get("api") == "openai-chat"
    problems, compared, bundled = [], 0, 0
    for s in _streams_read(trace):
        if s.usage is None or s.finish not in NORMAL_FINISHES:
            continue
        compared += 1
        said = s.usage.get("completion_tokens")
        if s.token_ids and said != len(s.token_ids):
            problems.append(f"{_who(s)}: usage says {said} completion tokens, the client read {len(s.token_ids)}")
        elif not s.token_ids and (said is None or said < len(s.token_times)):
            # Without ids a client counts chunks, each at least one token: fewer tokens than chunks
            # cannot be. More is a server that bundles tokens into a chunk (counted in the figure).
            problems.append(f"{_who(s)}: usage says {said} completion tokens, the client read {len(s.token_times)} "
                            "chunks with text")
        bundled += not s.token_ids and said is not None and said > len(s.token_times)
        prompt = s.usage.get("prompt_tokens")
        counted = None if unknown or chat else _prompt_tokens(s.prompt)
        if counted is not None and prompt != counted:
            problems.append(f"{_who(s)}: usage says {prompt} prompt tokens, its prompt is {counted}")
        elif s.prompt_tokens is not None and prompt != s.prompt_tokens:
            problems.append(f"{_who(s)}: usage says {prompt} prompt tokens, its start said {s.prompt_tokens}")
    prompts = "its prompt's " + ("start event" if unknown or chat else "token count")
    more = f"; {bundled} carried more tokens than chunks (no token ids: bundled)" if bundled else ""
    return CheckResult("usage", not problems,
                       f"{compared - len(problems)}/{compared} finished streams' usage agrees{more}",
                       f"completion tokens = tokens read (no token ids: at least the chunks read), prompt tokens = "
                       f"{prompts}", problems, compared=compared)


@implements("event_order")
def event_order(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    problems, compared = [], 0
    for s in _streams_read(trace):
        compared += 1
        if s.after_end:
            problems.append(f"{_who(s)}: {s.after_end} token event(s) after its end event")
        if s.token_indices and s.token_indices != list(range(len(s.token_indices))):
            k = next(j for j, i in enumerate(s.token_indices) if i != j)
            problems.append(f"{_who(s)}: token event {k} carries index {s.token_indices[k]}")
    return CheckResult("event_order", not problems, f"{compared - len(problems)}/{compared} streams in order",
                       "token indices 0..n-1 once each (where the API numbers them), nothing after the end",
                       problems, compared=compared)


@implements("finish_agrees")
def finish_agrees(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """length: max tokens read; a stop string ends the stream at once (`stop`); eos: the last token
    is the end of text. On an OpenAI API `stop` is also the end of text."""
    openai = trace.openai_api
    decodes = tokenizer_known(scenario, trace) is None
    eos = _shipped()[1] if decodes else None
    problems, compared = [], 0
    for s in _streams_read(trace):
        if s.finish not in NORMAL_FINISHES:
            continue
        compared += 1
        # tokens read: the ids, or where the API gives none its usage (a chunk may carry several)
        read = len(s.token_ids) or (s.usage or {}).get("completion_tokens") or len(s.token_times)
        most = s.request.get("max_new_tokens")
        if s.finish == "length" and read != most:
            problems.append(f"{_who(s)}: ended with 'length' after {read} of {most} tokens")
        if not (decodes and s.token_ids):
            continue
        stops = [w for w in s.request.get("stop") or [] if w]
        cut = _stop_at(_decoded(s.token_ids), stops)
        ends_text = s.token_ids[-1] == eos
        if cut is not None and s.finish != "stop":
            problems.append(f"{_who(s)}: a stop string is in its tokens' text and it ended with {s.finish!r}")
        elif s.finish == "stop" and cut is None and not (openai and ends_text):
            problems.append(f"{_who(s)}: ended with 'stop' and no stop string is in its tokens' text")
        elif s.finish == "stop" and cut is not None and _stop_at(_decoded(s.token_ids[:-1]), stops) is not None:
            problems.append(f"{_who(s)}: its stop string was complete a token before it ended")
        elif s.finish == "eos" and not ends_text:
            problems.append(f"{_who(s)}: ended with 'eos' on token {s.token_ids[-1]}, not the end of text")
    return CheckResult("finish_agrees", not problems,
                       f"{compared - len(problems)}/{compared} finish reasons agree with what was read",
                       "length: max tokens read; stop: at the first stop string; eos: the last token is end of text",
                       problems, compared=compared)
