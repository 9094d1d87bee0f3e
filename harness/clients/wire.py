"""How a client speaks to a target's API: the request it sends, the bad requests it can send,
and what each event it reads means for its record. No sockets, no judging.

    Wire
    ├── StreamlabWire        our /v1/stream: start, token {token_id, text}, done, error events
    └── OpenAIWire           /v1/completions or /v1/chat/completions, streamed chunks and [DONE]

A scenario's request (max_new_tokens, temperature, top_k, top_p, seed, stop, ignore_eos) is
the same for every target; each wire spells it its own way, and a target profile may add
fields its server needs (transformers serve, for one, refuses `ignore_eos` and takes an eos id
of -1 in its `generation_config` instead).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Protocol

from harness.record.trace import StreamRecord
from streamlab.sse import SSEEvent

JSON = {"content-type": "application/json"}


class Wire(Protocol):
    name: str
    path: str
    headers: dict[str, str]  # sent with every request (the access key, where one is needed)

    def body(self, prompt: str, request: dict) -> dict: ...
    def bad(self, kind: str, prompt: str, budget: int) -> tuple[bytes, dict[str, str]]: ...
    def error_type(self, reply: dict) -> str | None: ...  # a refusal's error type, from its JSON body
    def on_head(self, rec: StreamRecord, headers: dict[str, str], now: float) -> None: ...
    def note(self, rec: StreamRecord, ev: SSEEvent, now: float) -> bool: ...  # True: this event was a token


def _bad(kind: str, good: dict, wrong_type: dict, too_many: dict, empty: dict, lab: dict) -> tuple[bytes, dict]:
    bodies = {
        "malformed_json": (b'{"prompt": "unterminated', JSON),
        "wrong_type": (json.dumps(wrong_type).encode(), JSON),
        "unknown_field": (json.dumps({**good, "surprise": True}).encode(), JSON),
        "too_many_tokens": (json.dumps(too_many).encode(), JSON),
        "body_too_large": (json.dumps({**good, "prompt": "x" * 70_000}).encode(), JSON),
        "wrong_content_type": (json.dumps(good).encode(), {"content-type": "text/plain"}),
        "empty_prompt": (json.dumps(empty).encode(), JSON),
        "lab_option": (json.dumps(lab).encode(), JSON),
        # An empty Authorization header, or another key: the access key the harness adds does not replace them.
        "missing_key": (json.dumps(good).encode(), {**JSON, "authorization": ""}),
        "wrong_key": (json.dumps(good).encode(), {**JSON, "authorization": "Bearer not-the-key"}),
    }
    return bodies[kind]


def bearer(api_key: str) -> dict[str, str]:
    """The header every /v1 request carries when the server wants a key."""
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


@dataclass(frozen=True)
class StreamlabWire:
    name: str = "streamlab"
    path: str = "/v1/stream"
    api_key: str = field(default="", repr=False)

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.api_key)

    def body(self, prompt: str, request: dict) -> dict:
        return {"prompt": prompt, **request}

    def bad(self, kind: str, prompt: str, budget: int) -> tuple[bytes, dict[str, str]]:
        good = {"prompt": prompt}
        return _bad(kind, good, {**good, "max_new_tokens": "many"}, {**good, "max_new_tokens": budget},
                    {"prompt": ""}, {**good, "pad_bytes": 1024})

    def error_type(self, reply: dict) -> str | None:
        return reply.get("error", {}).get("type")

    def on_head(self, rec: StreamRecord, headers: dict[str, str], now: float) -> None:
        rec.request_id = headers.get("x-request-id")

    def note(self, rec: StreamRecord, ev: SSEEvent, now: float) -> bool:
        data = ev.json() if ev.data.startswith("{") else {}
        if ev.id:
            rec.event_ids.append(ev.id)
        if ev.event == "start":
            rec.start_at, rec.request_id, rec.prompt_tokens = now, data.get("id"), data.get("prompt_tokens")
        elif ev.event == "token":
            if rec.ended_at is not None:
                rec.after_end += 1
            rec.token_times.append(now)
            rec.token_ids.append(data["token_id"])
            rec.token_indices.append(data.get("index", -1))
            rec.text += data["text"]
            return True
        elif ev.event == "done":
            rec.finish, rec.ended_at, rec.usage = data["finish_reason"], now, data.get("usage")
        elif ev.event == "error":
            rec.finish, rec.ended_at = data["error"]["type"], now
        return False


@dataclass(frozen=True)
class OpenAIWire:
    """OpenAI's streaming completions (chat=False) or chat completions (chat=True).

    One chunk with a choice is one token (vLLM, TGI, llama.cpp, transformers serve and ours all
    stream per token; a chunk's text may be empty while a character is incomplete). Token ids
    are read when the target sends them (vLLM's `return_token_ids`); otherwise identity is
    judged on text. Finish reasons are the target's words (`stop` for an end of text).
    """
    model: str
    chat: bool = False
    extra: dict = field(default_factory=dict)  # fields the target's profile adds to every request
    ignore_eos: str = "field"  # "field": send ignore_eos; "none": the profile's `extra` says it
    api_key: str = field(default="", repr=False)
    # Where a chunk carries token ids and usage (the profile's `fields`: choices[].NAME or a dotted path).
    token_ids_at: str = "choices[].token_ids"
    usage_at: str | None = "usage"

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.api_key)

    @property
    def name(self) -> str:
        return "openai-chat" if self.chat else "openai-completions"

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.chat else "/v1/completions"

    def _base(self, prompt) -> dict:
        if self.chat:
            return {"model": self.model, "messages": [{"role": "user", "content": prompt}]}
        return {"model": self.model, "prompt": prompt}

    def body(self, prompt: str, request: dict) -> dict:
        out = {**self._base(prompt), "max_tokens": request["max_new_tokens"], "temperature": request["temperature"],
               "top_p": request["top_p"], "stream": True, "stream_options": {"include_usage": True}}
        if request.get("top_k"):
            out["top_k"] = request["top_k"]
        if request.get("seed") is not None:
            out["seed"] = request["seed"]
        if request.get("stop"):
            out["stop"] = request["stop"]
        if request.get("ttft_deadline_ms") is not None:
            out["ttft_deadline_ms"] = request["ttft_deadline_ms"]
        if request.get("ignore_eos") and self.ignore_eos == "field":
            out["ignore_eos"] = True
        return {**out, **self.extra}

    def bad(self, kind: str, prompt: str, budget: int) -> tuple[bytes, dict[str, str]]:
        good = {**self._base(prompt), "max_tokens": 4, "stream": True}
        return _bad(kind, good, {**good, "max_tokens": "many"}, {**good, "max_tokens": budget},
                    self._base(""), {**good, "pad_bytes": 1024})

    def error_type(self, reply: dict) -> str | None:
        err = reply.get("error")
        if isinstance(err, dict):  # OpenAI's code is a string; llama.cpp puts the HTTP status there
            return err["code"] if isinstance(err.get("code"), str) else err.get("type")
        if isinstance(err, str):
            return err
        return "detail" if "detail" in reply else None  # FastAPI's own validation body: {"detail": [...]}

    def on_head(self, rec: StreamRecord, headers: dict[str, str], now: float) -> None:
        rec.request_id = headers.get("x-request-id")  # ours sends it; most targets do not
        rec.start_at = now  # a stream opens when its head arrives: there is no start event

    def note(self, rec: StreamRecord, ev: SSEEvent, now: float) -> bool:
        if ev.data.strip() == "[DONE]" or not ev.data.startswith("{"):
            return False
        data = ev.json()
        if "error" in data:
            err = data["error"]
            rec.finish = (err.get("code") or err.get("type") or "error") if isinstance(err, dict) else "error"
            rec.ended_at = now
            return False
        usage = at(data, None, self.usage_at)
        if isinstance(usage, dict) and usage:
            rec.prompt_tokens, rec.usage = usage.get("prompt_tokens"), usage
        if rec.request_id is None and data.get("id"):
            rec.request_id = data["id"]
        token = False
        ended = rec.ended_at is not None
        for choice in data.get("choices") or []:
            text = (choice.get("delta") or {}).get("content") if self.chat else choice.get("text")
            ids = at(data, choice, self.token_ids_at) or []
            role_only = self.chat and "role" in (choice.get("delta") or {}) and not text
            if choice.get("finish_reason"):
                rec.finish, rec.ended_at = choice["finish_reason"], now
                rec.text += text or ""
                rec.token_ids.extend(ids)
                if text or ids:  # a last token carried with the finish reason
                    rec.token_times.append(now)
                    token = True
            elif not role_only and text is not None:
                rec.token_times.append(now)
                rec.token_ids.extend(ids)
                rec.text += text
                token = True
        if token and ended:
            rec.after_end += 1
        return token


def at(chunk: dict, choice: dict | None, path: str | None):
    """The value at `path` in a chunk: `choices[].NAME` in the choice, else a dotted path from the
    chunk's top; None where it is absent (or no path is given)."""
    if path is None:
        return None
    value, keys = (choice, path[len("choices[]."):]) if path.startswith("choices[].") else (chunk, path)
    for key in keys.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def wire_for(api: str, model: str, extra: dict | None = None, ignore_eos: str = "field",
             api_key: str = "", fields=None) -> Wire:
    """`fields`: the target profile's (harness.format.profile.Fields), where its chunks carry ids and usage."""
    if api == "streamlab":
        return StreamlabWire(api_key=api_key)
    if api in ("openai-completions", "openai-chat"):
        where = {"token_ids_at": fields.token_ids, "usage_at": fields.usage} if fields is not None else {}
        return OpenAIWire(model, chat=api == "openai-chat", extra=extra or {}, ignore_eos=ignore_eos,
                          api_key=api_key, **where)
    raise ValueError(f"unknown api {api!r}; expected streamlab, openai-completions or openai-chat")
