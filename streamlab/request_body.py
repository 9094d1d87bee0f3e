"""A request body: what /v1/stream and /v1/generate accept (GenerateRequest), how any route's
JSON body is read (size, media type and time limits), GET /v1/stream's query read as a body, and
the refusal each mistake gets, before the first byte. The routes are streamlab/app.py's."""

from __future__ import annotations

import asyncio
import json
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from streamlab.config import ServiceConfig
from streamlab.errors import (BodyTimeout, BodyTooLarge, InvalidJSON, InvalidRequest, NotAllowed,
                              UnsupportedMediaType, envelope)


class GenerateRequest(BaseModel):
    """The request body of /v1/stream and /v1/generate. Unknown fields are refused."""
    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: str = Field(min_length=1, max_length=32_768)
    max_new_tokens: int = Field(default=16, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=10.0)
    top_k: int = Field(default=0, ge=0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    stop: list[str] = Field(default_factory=list, max_length=8)
    ignore_eos: bool = False
    ttft_deadline_ms: float | None = Field(default=None, gt=0, le=600_000)  # for the deadline gate
    # Lab only (--lab): the chapter's padding device and the response that never listens.
    pad_bytes: int = Field(default=0, ge=0)
    response_class: Literal["starlette", "write_only"] = "starlette"


Body = TypeVar("Body", bound=BaseModel)


def error_response(error_type: str, message: str, status: int, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(envelope(error_type, message), status_code=status, headers=headers)


def _validation_problem(exc: ValidationError) -> tuple[str, str | None]:
    """(message, the field at fault) for a body that failed its schema."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or None
    message = first["msg"].removeprefix("Value error, ")
    text = (message if where is None or message.startswith(f"{where}:") else f"{where}: {message}")
    more = len(exc.errors()) - 1
    param = where or (message.split(":")[0] if ": " in message else None)
    return text + (f" ({more} more)" if more else ""), param


async def read_json(request: Request, config: ServiceConfig) -> dict:
    """The body as a JSON object, or a refusal (media type, size, syntax) before anything else."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType(f"content-type must be application/json, got {media_type or 'none'!r}")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > config.max_body_bytes:
        raise BodyTooLarge(f"the body is {declared} bytes; the limit is {config.max_body_bytes}")
    body = bytearray()
    try:
        async with asyncio.timeout(config.body_timeout_s):  # a body slower than its Content-Length
            async for chunk in request.stream():
                body += chunk
                if len(body) > config.max_body_bytes:
                    raise BodyTooLarge(f"the body is over the limit of {config.max_body_bytes} bytes")
    except TimeoutError:
        raise BodyTimeout(f"the body did not arrive within {config.body_timeout_s:g} s") from None
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidJSON(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object")
    return data


def parse_body(schema: type[Body], data: dict) -> Body:
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        message, param = _validation_problem(exc)
        raise InvalidRequest(message, param) from None


def query_body(request: Request) -> dict:
    """GET /v1/stream's query (what EventSource can send) as a body: each field in its schema type."""
    fields = GenerateRequest.model_fields
    out: dict = {}
    for key, value in request.query_params.multi_items():
        field = fields.get(key)
        if field is None:
            out[key] = value  # refused below as an unknown field, by name
            continue
        kind = field.annotation
        try:
            if key == "stop":
                out.setdefault("stop", []).append(value)
            elif kind is int:
                out[key] = int(value)
            elif kind is float:
                out[key] = float(value)
            elif kind is bool:
                out[key] = {"true": True, "1": True, "false": False, "0": False}[value.lower()]
            elif key == "seed":
                out[key] = int(value) if value else None
            else:
                out[key] = value
        except (ValueError, KeyError):
            raise InvalidRequest(f"{key}: {value[:40]!r} is not a valid {getattr(kind, '__name__', kind)}",
                                 key) from None
    return out


async def read_request(request: Request, config: ServiceConfig) -> GenerateRequest:
    data = query_body(request) if request.method == "GET" else await read_json(request, config)
    req = parse_body(GenerateRequest, data)
    if not config.lab and (req.pad_bytes or req.response_class != "starlette"):
        raise NotAllowed("pad_bytes and response_class are lab options; start the server with --lab")
    if req.pad_bytes > config.max_pad_bytes:
        raise InvalidRequest(f"pad_bytes: at most {config.max_pad_bytes}", "pad_bytes")
    if any(not s for s in req.stop):
        raise InvalidRequest("stop: stop strings must not be empty", "stop")
    return req
