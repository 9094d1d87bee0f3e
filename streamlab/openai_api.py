"""OpenAI-compatible wire format: request bodies, the chat prompt format, chunks and errors. No routes, no hub.

The routes in app.py use these over the same hub, policies and cleanup as /v1/stream; only
the request's shape and the events' encoding differ from our own routes.

Chat prompt format (GPT-2 has no chat template): each message becomes one line
"<Role>: <content>" (System, User, Assistant; "developer" counts as System), and the prompt
ends with "Assistant:" for the model to continue. Nothing stops generation at the next
"User:" unless the request says so in `stop`.
"""

from __future__ import annotations

import json
import time
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from streamlab import openai_fields
from streamlab.errors import envelope
from streamlab.sampling import SamplingParams

OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/models")
DONE = b"data: [DONE]\n\n"
STOP_LIMIT = 4  # OpenAI's own limit on stop sequences

# Our finish reasons in OpenAI's words: an end-of-sequence token is a natural stop.
FINISH_REASONS = {"length": "length", "eos": "stop", "stop": "stop"}

# OpenAI's error `type` for each status; our own error type goes in `code`.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 409: "invalid_request_error", 413: "invalid_request_error",
               415: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
               503: "server_error"}


def error_object(code: str, message: str, status: int, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"), "param": param,
                      "code": code}}


def is_openai_path(path: str) -> bool:
    return path in OPENAI_PATHS


def error_payload(path: str, error_type: str, message: str, status: int, param: str | None = None) -> dict:
    """A refusal's body on `path`: OpenAI's error object on the OpenAI routes, our envelope elsewhere."""
    return error_object(error_type, message, status, param) if is_openai_path(path) else envelope(error_type, message)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False
    # vLLM's: with include_usage, every chunk carries the usage so far (guidellm sends it).
    continuous_usage_stats: bool = False


class _Common(BaseModel):
    """Fields both endpoints share. The fields OpenAI's schemas and other engines' clients send that
    change nothing here are taken out first, and those at a value we do not implement refused by
    name (streamlab/openai_fields.py, the one table); anything else unknown is refused, so nothing
    is silently ignored."""
    model_config = ConfigDict(extra="forbid", strict=True)
    ROUTE: ClassVar[str]

    model: str = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)  # OpenAI's default
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=1, description="only 1 is supported")
    # vLLM's extensions, under vLLM's names:
    top_k: int = Field(default=0, ge=-1, description="0, or vLLM's -1: no limit")
    ignore_eos: bool = False
    return_token_ids: bool = False
    skip_special_tokens: bool = False  # ours keeps end of text's text unless asked (vLLM's default is true)
    # Ours: the first-token deadline the server's deadline gate holds the request to.
    ttft_deadline_ms: float | None = Field(default=None, gt=0, le=600_000)

    @model_validator(mode="before")
    @classmethod
    def _screen(cls, data):
        return openai_fields.screened(data, cls.ROUTE)

    @model_validator(mode="after")
    def _check(self):
        if self.top_k == -1:
            self.top_k = 0
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options: only allowed when stream is true")
        stops = self.stops
        if len(stops) > STOP_LIMIT:
            raise ValueError(f"stop: at most {STOP_LIMIT} sequences")
        if any(not s for s in stops):
            raise ValueError("stop: stop sequences must not be empty")
        return self

    @property
    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        return self.include_usage and self.stream_options.continuous_usage_stats

    def sampling(self, max_new_tokens: int) -> SamplingParams:
        return SamplingParams.of(self, max_new_tokens=max_new_tokens)


class CompletionRequest(_Common):
    ROUTE = openai_fields.COMPLETIONS
    # One prompt: a string, a list holding one string, or a list of token ids.
    prompt: str | list[str] | list[int]
    max_tokens: int = Field(default=16, ge=1)  # OpenAI's default for completions

    @model_validator(mode="after")
    def _one_prompt(self):
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str) and len(self.prompt) != 1:
            raise ValueError("prompt: one prompt per request (a list of strings must hold exactly one)")
        if self.prompt in ("", []) or self.prompt == [""]:
            raise ValueError("prompt: must not be empty")
        return self

    def prompt_text_or_ids(self) -> str | list[int]:
        if isinstance(self.prompt, str):
            return self.prompt
        return self.prompt[0] if isinstance(self.prompt[0], str) else list(self.prompt)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatCompletionRequest(_Common):
    ROUTE = openai_fields.CHAT
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)  # deprecated by OpenAI, still sent by many clients
    max_completion_tokens: int | None = Field(default=None, ge=1)

    @property
    def requested_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


def chat_prompt(messages: list[ChatMessage]) -> str:
    """The documented prompt format (see the module docstring)."""
    roles = {"system": "System", "developer": "System", "user": "User", "assistant": "Assistant"}
    return "".join(f"{roles[m.role]}: {m.text()}\n" for m in messages) + "Assistant:"


def sse_data(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n\n"


class ChunkWriter:
    """Builds one stream's OpenAI chunks (completion or chat) from hub events' payloads."""

    def __init__(self, chat: bool, request_id: str, model: str, include_usage: bool, token_ids: bool,
                 hidden_ids: frozenset[int] = frozenset(), continuous_usage: bool = False) -> None:
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + request_id
        self.object = "chat.completion.chunk" if chat else "text_completion"
        self.model = model
        self.created = int(time.time())
        self.include_usage = include_usage
        self.token_ids = token_ids
        self.hidden_ids = hidden_ids  # skip_special_tokens: these tokens' text is left out
        self.continuous_usage = continuous_usage  # every chunk carries the usage so far
        self.prompt_tokens = self.completion_tokens = 0

    def _chunk(self, choices: list[dict], **extra) -> bytes:
        if self.continuous_usage and "usage" not in extra:
            extra["usage"] = usage({"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens})
        return sse_data({"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                         "choices": choices, **extra})

    def _choice(self, text: str | None, ids: list[int] | None, finish: str | None, role: bool = False) -> dict:
        if self.chat:
            delta: dict = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        if self.token_ids and ids is not None:
            choice["token_ids"] = ids
        return choice

    def start(self, prompt_ids: list[int] | None) -> bytes:
        """Chat's opening role chunk; for completions only when prompt ids were asked for."""
        self.prompt_tokens = len(prompt_ids or ())
        extra = {"prompt_token_ids": prompt_ids} if self.token_ids and prompt_ids is not None else {}
        if self.chat:
            return self._chunk([self._choice(None, None, None, role=True)], **extra)
        return self._chunk([self._choice("", [], None)], **extra) if extra else b""

    def token(self, payload: dict) -> bytes:
        text = "" if payload["token_id"] in self.hidden_ids else payload["text"]
        self.completion_tokens += 1
        return self._chunk([self._choice(text, [payload["token_id"]], None)])

    def done(self, payload: dict) -> bytes:
        finish = FINISH_REASONS.get(payload["finish_reason"], payload["finish_reason"])
        out = self._chunk([self._choice(None if self.chat else "", [], finish)])
        if self.include_usage:
            out += self._chunk([], usage=usage(payload["usage"]))
        return out + DONE

    def error(self, payload: dict) -> bytes:
        """After the first byte an error can only be a data line (vLLM's form), then [DONE]."""
        err = payload["error"]
        return sse_data(error_object(err["type"], err["message"], 503)) + DONE


def usage(ours: dict) -> dict:
    return {"prompt_tokens": ours["prompt_tokens"], "completion_tokens": ours["completion_tokens"],
            "total_tokens": ours["prompt_tokens"] + ours["completion_tokens"]}


def full_response(chat: bool, request_id: str, model: str, text: str, ids: list[int], done: dict,
                  want_ids: bool, prompt_ids: list[int]) -> dict:
    """The non-streaming body: one choice with all the text."""
    finish = FINISH_REASONS.get(done["finish_reason"], done["finish_reason"])
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    if want_ids:
        choice |= {"token_ids": ids, "prompt_token_ids": prompt_ids}
    return {"id": ("chatcmpl-" if chat else "cmpl-") + request_id,
            "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": model, "choices": [choice], "usage": usage(done["usage"])}


def models_list(name: str, created: int) -> dict:
    return {"object": "list", "data": [{"id": name, "object": "model", "created": created, "owned_by": "streamlab"}]}
