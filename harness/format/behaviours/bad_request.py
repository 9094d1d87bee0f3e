"""bad_request: a request the server must refuse before the first byte, with a stated status and
error type. Its whole exchange is its own: it sends its bad body and reads the refusal."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from harness.format.behaviours.base import READ_DEADLINE_S, BehaviourModel


KEYED = {"missing_key", "wrong_key"}  # sends that need a server with an access key: ours


class BadRequest(BehaviourModel):
    """Sends a malformed or oversized request and expects a refusal."""
    kind: Literal["bad_request"]
    send: Literal["malformed_json", "wrong_type", "unknown_field", "too_many_tokens", "body_too_large",
                  "wrong_content_type", "empty_prompt", "lab_option", "missing_key", "wrong_key"] = Field(
        description="missing_key, wrong_key: a good body with no access key, or another one than the server's")
    # A refusal is the client's error: a 5xx is the server failing, never what a bad request expects.
    expect_status: int = Field(ge=400, le=499)
    expect_error: str
    owns_exchange: ClassVar[bool] = True
    refused: ClassVar[bool] = True

    @property
    def ours_only(self) -> str | None:
        return f"{self.send} needs our server's access key" if self.send in KEYED else None

    def expected_refusal(self, refusals: dict) -> tuple[int, str | None] | None:
        return refusals.get(self.send, (self.expect_status, self.expect_error))

    async def exchange(self, client, budget: int) -> None:
        rec = client.record
        body, headers = client.wire.bad(self.send, rec.prompt, budget)
        conn = await client.open_connection(client.wire.path, body, headers)
        try:
            head = await conn.read_head(READ_DEADLINE_S)
            rec.status, rec.head_at = head.status, client.arrived_at(conn)
            rec.error_type = client.wire.error_type(await client.reply(conn))
        finally:
            conn.close("fin")
