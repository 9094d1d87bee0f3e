"""What each request field of the OpenAI routes does here: the one table the request models, the
refusals and docs/SERVING.md's field table are made from (streamlab/openai_api.py reads it).

Every field of OpenAI's completions and chat completions request schemas is known, and the
extensions serving engines' clients send (vLLM's, llama.cpp's). A field is either

    implemented    the request model has it and the engine does what it says;
    neutral        accepted at the values that change nothing (its default, null, an empty list,
                   text as the response format), refused at any other before the first byte with
                   OpenAI's error object naming it: never silently ignored;
    no effect      a hint about the caller (an id, a cache key, a service tier) that cannot change
                   what is generated: accepted at any value of its type.

A field in no row stays an unknown field: a 422 naming it, as OpenAI answers an unrecognized
argument, so a misspelt option is not mistaken for one that took effect.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

COMPLETIONS, CHAT = "completions", "chat"
BOTH = (COMPLETIONS, CHAT)
_MISSING = object()


@dataclass(frozen=True)
class KnownField:
    name: str
    routes: tuple[str, ...]
    origin: str  # whose schema: OpenAI, vLLM, llama.cpp, streamlab
    kind: str  # "implemented", "neutral" or "no effect"
    does: str  # what it does here, for docs/SERVING.md
    neutral: tuple = ()  # "neutral": the values accepted (None is null); the first is the default
    default: Any = _MISSING  # the schema's documented default (what a client sends "at its default")

    @property
    def documented_default(self) -> Any:
        if self.default is not _MISSING:
            return self.default
        return self.neutral[0] if self.neutral else None

    def accepts(self, value: Any) -> bool:
        return self.kind != "neutral" or any(_same(value, v) for v in self.neutral)


def _same(a: Any, b: Any) -> bool:
    """JSON equality that keeps true apart from 1 (Python's True == 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _f(name: str, routes: tuple[str, ...], origin: str, kind: str, does: str, neutral: tuple = (),
       default: Any = _MISSING) -> KnownField:
    return KnownField(name, routes, origin, kind, does, neutral, default)


FIELDS: list[KnownField] = [
    # ---- implemented (openai_api's request models) ----
    _f("model", BOTH, "OpenAI", "implemented", "the served model's name, else 404 model_not_found", default="tiny"),
    _f("prompt", (COMPLETIONS,), "OpenAI", "implemented", "one prompt: a string, a list of one, or token ids",
       default="Hello"),
    _f("messages", (CHAT,), "OpenAI", "implemented", "the chat, in the prompt format below",
       default=[{"role": "user", "content": "Hello"}]),
    _f("max_tokens", BOTH, "OpenAI", "implemented", "tokens to generate (completions: 16; chat: what the "
       "budget leaves)", default=16),
    _f("max_completion_tokens", (CHAT,), "OpenAI", "implemented", "chat's name for max_tokens", default=None),
    _f("temperature", BOTH, "OpenAI", "implemented", "sampling temperature (default 1, as OpenAI's)", default=1),
    _f("top_p", BOTH, "OpenAI", "implemented", "nucleus sampling", default=1),
    _f("seed", BOTH, "OpenAI", "implemented", "a stream's own generator: the same seed, the same tokens",
       default=None),
    _f("stop", BOTH, "OpenAI", "implemented", "up to 4 strings; the text ends before the first", default=None),
    _f("n", BOTH, "OpenAI", "implemented", "choices per request: 1 only", default=1),
    _f("stream", BOTH, "OpenAI", "implemented", "server-sent events, one chunk per token", default=False),
    _f("stream_options", BOTH, "OpenAI", "implemented", "include_usage: a usage chunk before [DONE]; "
       "continuous_usage_stats (vLLM's): the usage so far in every chunk too",
       default=None),
    _f("top_k", BOTH, "vLLM", "implemented", "sample from the k likeliest; 0 or -1 (vLLM's) for all",
       default=-1),
    _f("ignore_eos", BOTH, "vLLM", "implemented", "generate past an end-of-text token", default=False),
    _f("return_token_ids", BOTH, "vLLM", "implemented", "each chunk's token_ids, and the prompt's in the first",
       default=False),
    _f("skip_special_tokens", BOTH, "vLLM", "implemented", "leave special tokens' text (end of text) out of the "
       "text; their ids stay in token_ids", default=True),
    _f("ttft_deadline_ms", BOTH, "streamlab", "implemented", "the first-token deadline the deadline gate holds "
       "the request to", default=None),
    # ---- no effect on what is generated: accepted at any value of its type ----
    _f("user", BOTH, "OpenAI", "no effect", "the caller's own id, for its logs", default=None),
    _f("safety_identifier", (CHAT,), "OpenAI", "no effect", "the caller's own id", default=None),
    _f("prompt_cache_key", (CHAT,), "OpenAI", "no effect", "a cache hint: there is no prompt cache here",
       default=None),
    _f("service_tier", (CHAT,), "OpenAI", "no effect", "one tier here", default="auto"),
    _f("cache_prompt", BOTH, "llama.cpp", "no effect", "a cache hint: there is no prompt cache here",
       default=True),
    # ---- OpenAI's, at the values that change nothing ----
    _f("best_of", (COMPLETIONS,), "OpenAI", "neutral", "one candidate per choice", (None, 1), default=1),
    _f("echo", (COMPLETIONS,), "OpenAI", "neutral", "the prompt is not repeated in the text", (None, False),
       default=False),
    _f("suffix", (COMPLETIONS,), "OpenAI", "neutral", "no insertion after the completion", (None, "")),
    _f("logprobs", (COMPLETIONS,), "OpenAI", "neutral", "no log probabilities (completions: a count)", (None,)),
    _f("logprobs", (CHAT,), "OpenAI", "neutral", "no log probabilities (chat: a boolean)", (None, False),
       default=False),
    _f("frequency_penalty", BOTH, "OpenAI", "neutral", "no penalty", (None, 0, 0.0), default=0),
    _f("presence_penalty", BOTH, "OpenAI", "neutral", "no penalty", (None, 0, 0.0), default=0),
    _f("logit_bias", BOTH, "OpenAI", "neutral", "no bias", (None, {})),
    _f("top_logprobs", (CHAT,), "OpenAI", "neutral", "no log probabilities", (None, 0)),
    _f("response_format", (CHAT,), "OpenAI", "neutral", "text only", (None, {"type": "text"}),
       default={"type": "text"}),
    _f("tools", (CHAT,), "OpenAI", "neutral", "no tools", (None, [])),
    _f("tool_choice", (CHAT,), "OpenAI", "neutral", "with no tools, no tool is called", (None, "none", "auto")),
    _f("parallel_tool_calls", (CHAT,), "OpenAI", "neutral", "with no tools, nothing to call", (None, True, False),
       default=True),
    _f("functions", (CHAT,), "OpenAI", "neutral", "the deprecated tools: none", (None, [])),
    _f("function_call", (CHAT,), "OpenAI", "neutral", "the deprecated tool_choice", (None, "none", "auto")),
    _f("modalities", (CHAT,), "OpenAI", "neutral", "text out", (None, ["text"]), default=["text"]),
    _f("audio", (CHAT,), "OpenAI", "neutral", "no audio out", (None,)),
    _f("prediction", (CHAT,), "OpenAI", "neutral", "no predicted output", (None,)),
    _f("reasoning_effort", (CHAT,), "OpenAI", "neutral", "not a reasoning model", (None,)),
    _f("verbosity", (CHAT,), "OpenAI", "neutral", "its one verbosity", (None, "medium"), default="medium"),
    _f("web_search_options", (CHAT,), "OpenAI", "neutral", "no search", (None,)),
    _f("store", (CHAT,), "OpenAI", "neutral", "nothing is stored", (None, False), default=False),
    _f("metadata", (CHAT,), "OpenAI", "neutral", "only for stored completions: none", (None, {})),
    # ---- other engines' extensions, at the values that change nothing ----
    _f("repetition_penalty", BOTH, "vLLM", "neutral", "no penalty", (None, 1, 1.0), default=1.0),
    _f("min_tokens", BOTH, "vLLM", "neutral", "no minimum", (None, 0), default=0),
    _f("min_p", BOTH, "vLLM", "neutral", "no minimum probability", (None, 0, 0.0), default=0.0),
    _f("include_stop_str_in_output", BOTH, "vLLM", "neutral", "the stop string is not in the text",
       (None, False), default=False),
    _f("stop_token_ids", BOTH, "vLLM", "neutral", "no stop tokens besides end of text", (None, [])),
    _f("spaces_between_special_tokens", BOTH, "vLLM", "neutral", "as vLLM's default", (None, True), default=True),
    _f("n_predict", BOTH, "llama.cpp", "neutral", "llama.cpp's max_tokens: give max_tokens", (None, -1),
       default=-1),
]

def on_route(route: str) -> list[KnownField]:
    return [f for f in FIELDS if route in f.routes]


def field_on(route: str, name: str) -> KnownField | None:
    """The row of `name` on `route` (a name may differ by route: logprobs is a count or a boolean)."""
    return next((f for f in on_route(route) if f.name == name), None)


def _json(value: Any) -> str:
    """A value as the client wrote it (JSON), for refusals and the docs table."""
    return json.dumps(value)


def screened(data: Any, route: str) -> Any:
    """A request body with the fields that change nothing taken out (those at a neutral value, and
    the no-effect hints), so the request model sees only what it implements; a field at a value
    that would change the result is refused here, by name. Anything else is left for the model
    (an unknown field: refused there, by name)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for f in on_route(route):
        if f.kind == "implemented" or f.name not in out:
            continue
        value = out.pop(f.name)
        if not f.accepts(value):
            allowed = " or ".join(_json(v) for v in f.neutral)
            raise ValueError(f"{f.name}: {_json(value)} is not supported here ({f.does}); only {allowed} is accepted")
    return out


def docs_table() -> str:
    """docs/SERVING.md's table of the OpenAI routes' fields (a test keeps the page equal to it)."""
    def values(f: KnownField) -> str:
        if f.kind != "neutral":
            return "any" if f.kind == "no effect" else "as documented"
        return ", ".join("null" if v is None else f"`{_json(v)}`" for v in f.neutral)
    rows = ["| field | routes | from | here | accepted values | what it does here |", "|---|---|---|---|---|---|"]
    for f in FIELDS:
        routes = "both" if f.routes == BOTH else f.routes[0]
        rows.append(f"| `{f.name}` | {routes} | {f.origin} | {f.kind} | {values(f)} | {f.does} |")
    return "\n".join(rows)


if __name__ == "__main__":  # docs/SERVING.md's table, to paste between its markers
    print(docs_table())
