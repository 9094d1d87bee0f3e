"""`streamlab target probe URL`: ask a running server what it lets the checks see, and write a
profile (harness.format.profile) the user can edit and use.

It asks, in this order, each with a deadline: `/v1/models` (the model to name), a health route
(/health, /healthz, /ready), `/metrics` (which gauge and counter series of the known servers it
exports, by the built-in profiles' names) and llama.cpp's `/slots`; one short greedy stream (does
it return token ids, and with which request field; usage; a finish reason; does it take
`ignore_eos`); then each bad request of the library's bad_requests scenario, the empty prompt
last (it crashes one peer's worker: docs/TARGETS.md). A refusal that differs from what the
scenario expects is written into the profile's refusals, as the built-in ones map their
servers' conventions; a bad request served (2xx) or failed (5xx) is a finding, printed and not
mapped. Every request goes straight to the server, never through Toxiproxy: this is not a load.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from harness.clients.rawhttp import RawExchange
from harness.clients.wire import OpenAIWire, bearer
from harness.format.load import load_by_name
from harness.format.profile import PROFILES, Counters, Fields, Gauges, Profile, parse_series
from harness.machine.reach import Origin
from harness.record.trace import StreamRecord
from harness.targets.gauges import prometheus_samples

DEADLINE_S = 30.0
HEALTH_PATHS = ("/health", "/healthz", "/ready")
PROMPT = "Return the number of items in the container."
TOO_MANY = 1_000_000  # max_tokens past any context: a request that cannot be served
KEYED = {"missing_key", "wrong_key"}  # our server's access key: not a probe of someone else's


@dataclass
class ProbeReport:
    url: str
    api: str
    model: str | None = None
    routes: dict[str, int | None] = field(default_factory=dict)  # path -> status (None: no answer)
    series: dict[str, str] = field(default_factory=dict)  # gauge or counter -> the series found
    stream: dict = field(default_factory=dict)
    refusals: dict[str, tuple[int | None, str | None]] = field(default_factory=dict)  # as answered
    findings: list[str] = field(default_factory=list)
    profile: Profile | None = None


def known_series() -> dict[str, list[str]]:
    """Gauge or counter -> the series names the built-in profiles know, in their order."""
    out: dict[str, list[str]] = {}
    for p in PROFILES.values():
        for kind, block in (("gauges", p.gauges), ("counters", p.counters)):
            if block is None or getattr(block, "source", "prometheus") != "prometheus":
                continue
            for name, value in block.model_dump(exclude={"source", "path", "idle", "finished"}).items():
                if value and value not in out.setdefault(name, []):
                    out[name].append(value)
    return out


# Other places a server's chunks may carry token ids, tried where the usual one (choices[].token_ids) is empty.
IDS_AT = ("choices[].tokens", "tokens", "token_ids")


def known_finished(names: set[str]) -> dict | None:
    """A built-in profile's finished-requests counters whose every series this server exports."""
    for p in PROFILES.values():
        if p.counters is None or not p.counters.finished:
            continue
        specs = [spec for series in p.counters.finished_series().values() for spec in series]
        if all(parse_series(spec)[0] in names for spec in specs):
            return dict(p.counters.finished)
    return None


def library_refusals() -> dict[str, tuple[int, str]]:
    """Each bad request of the library's bad_requests scenario -> the (status, error) it expects."""
    out = {}
    for g in load_by_name("bad_requests").groups:
        expected = g.behaviour.expected_refusal({})  # None: a group that is not refused (its readers)
        if expected is not None:
            out[g.behaviour.send] = expected
    return out


class Prober:
    def __init__(self, url: str, api: str = "openai-completions", model: str | None = None, api_key: str = "",
                 origin: Origin | None = None) -> None:
        parts = urlsplit(url)
        self.origin = origin or Origin(parts.hostname, parts.port or 80)
        self.report = ProbeReport(url, api, model)
        self.api_key = api_key
        self.events: list = []  # the last probe stream's events, to read again for other fields

    async def _send(self, method: str, path: str, body=None, headers: dict | None = None):
        o = self.origin
        return await RawExchange.open(o.host, o.port, method, path, body, origin=o, timeout_s=DEADLINE_S,
                                      headers={**bearer(self.api_key), **(headers or {})})

    async def _get(self, path: str) -> tuple[int | None, bytes]:
        try:
            ex = await self._send("GET", path)
        except (OSError, asyncio.TimeoutError):
            return None, b""
        try:
            head = await ex.read_head(DEADLINE_S)
            return head.status, await ex.read_body(DEADLINE_S)
        except (OSError, asyncio.TimeoutError, ValueError):
            return None, b""
        finally:
            ex.close_fin()

    def _wire(self, extra: dict, ignore_eos: str) -> OpenAIWire:
        return OpenAIWire(self.report.model or "", chat=self.report.api == "openai-chat", extra=extra,
                          ignore_eos=ignore_eos, api_key=self.api_key)

    async def run(self) -> ProbeReport:
        r = self.report
        status, body = await self._get("/v1/models")
        r.routes["/v1/models"] = status
        if r.model is None and status == 200:
            try:
                r.model = json.loads(body)["data"][0]["id"]
            except (ValueError, KeyError, IndexError, TypeError):
                r.findings.append("/v1/models answered 200 without a model in data[0].id")
        health = None
        for path in HEALTH_PATHS:
            r.routes[path] = (await self._get(path))[0]
            if r.routes[path] == 200 and health is None:
                health = path
        gauges, counters = await self._metrics()
        stream = await self._stream()
        await self._refusals(stream["wire"])
        expected = library_refusals()
        mapped = {kind: got for kind, got in r.refusals.items()
                  if got[0] is not None and 400 <= got[0] < 500 and got != expected.get(kind)}
        for kind, (got_status, got_error) in r.refusals.items():
            if got_status is None or not 400 <= got_status < 500:
                r.findings.append(f"bad request {kind}: {'no answer' if got_status is None else got_status} "
                                  f"({got_error}), not a refusal")
        host = self.origin.host
        r.profile = Profile(
            name=f"probed-{host}", description=f"written by `streamlab target probe {r.url}` on "
                                               f"{time.strftime('%Y-%m-%d')}: edit what it could not know",
            gauges=gauges, counters=counters, health_path=health, token_ids=stream["token_ids"],
            fields=stream.get("fields") or Fields(),
            ignore_eos=stream["ignore_eos"], request_extra=stream["extra"], refusals=mapped)
        return r

    async def _metrics(self) -> tuple[Gauges | None, Counters | None]:
        r = self.report
        status, body = await self._get("/metrics")
        r.routes["/metrics"] = status
        found: dict[str, str] = {}
        names: set[str] = set()
        if status == 200:
            try:
                names = {s.name for s in prometheus_samples(body)}
            except ValueError as exc:
                r.findings.append(f"/metrics is not Prometheus text: {exc}")
                names = set()
            for kind, candidates in known_series().items():
                hit = next((c for c in candidates if c in names), None)
                if hit:
                    found[kind] = hit
        r.series = found
        gauges = {k: found[k] for k in ("running", "waiting", "cache_in_use") if k in found}
        counters = {k: found[k] for k in ("generated_tokens",) if k in found}
        finished = known_finished(names)
        if finished:
            counters["finished"] = finished
        slots_status, slots = await self._get("/slots")
        r.routes["/slots"] = slots_status
        if not gauges and slots_status == 200:
            try:
                if isinstance(json.loads(slots), list):
                    r.series["running"] = "/slots is_processing"
                    return Gauges(source="llamacpp_slots", path="/slots", running="is_processing"), None
            except ValueError:
                pass
        return (Gauges(**gauges) if gauges else None), (Counters(**counters) if counters else None)

    async def _one_stream(self, wire: OpenAIWire) -> tuple[int | None, StreamRecord]:
        request = {"max_new_tokens": 4, "temperature": 0.0, "top_p": 1.0, "ignore_eos": True}
        record = StreamRecord("probe", 0, "reader", PROMPT, request)
        self.events = []
        try:
            ex = await self._send("POST", wire.path, wire.body(PROMPT, request), wire.headers)
        except (OSError, asyncio.TimeoutError):
            return None, record
        try:
            head = await ex.read_head(DEADLINE_S)
            if head.status == 200:
                deadline = time.monotonic() + DEADLINE_S
                while not ex.ended and time.monotonic() < deadline:
                    for ev in await ex.read_events(1, DEADLINE_S):
                        self.events.append(ev)
                        wire.note(record, ev, time.monotonic())
            return head.status, record
        except (OSError, asyncio.TimeoutError, ValueError):
            return None, record
        finally:
            ex.close_fin()

    async def _stream(self) -> dict:
        """One short greedy stream, asking for token ids and past end-of-text; what it needed."""
        r = self.report
        tries = [({"return_token_ids": True}, "field"), ({}, "field"), ({}, "none")]
        for extra, ignore_eos in tries:
            wire = self._wire(extra, ignore_eos)
            status, record = await self._one_stream(wire)
            if status == 200:
                break
            r.findings.append(f"a stream with {extra or 'no extra field'} and ignore_eos "
                              f"{'sent' if ignore_eos == 'field' else 'not sent'}: {status}")
        else:
            r.stream = {"status": status, "wire": wire, "token_ids": False, "ignore_eos": "field", "extra": {}}
            return r.stream
        # Where its chunks carry the ids and the usage: the first place that holds them, read again
        # from the same stream's events (the usual place first).
        fields, record = Fields(), self._read_as(wire, Fields())
        for place in IDS_AT:
            if record.token_ids:
                break
            candidate = self._read_as(wire, Fields(token_ids=place))
            if candidate.token_ids:
                fields, record = Fields(token_ids=place), candidate
        if record.usage is None:
            fields = fields.model_copy(update={"usage": None})
            r.findings.append("no usage in its stream (asked with stream_options.include_usage): `usage` "
                              "is not observable")
        ids = bool(record.token_ids)
        r.stream = {"status": status, "wire": wire, "tokens": len(record.token_times), "token_ids": ids,
                    "usage": record.usage is not None, "finish_reason": record.finish, "fields": fields,
                    "ignore_eos": ignore_eos, "extra": extra if ids else {}}
        if ignore_eos == "none":
            r.findings.append("it refuses ignore_eos: say in request_extra how it generates past end-of-text "
                              "(transformers serve: generation_config with eos_token_id -1)")
        return r.stream

    def _read_as(self, wire: OpenAIWire, fields: Fields) -> StreamRecord:
        """The last stream's events read again by a wire that looks for ids and usage at `fields`."""
        again = dataclasses.replace(wire, token_ids_at=fields.token_ids, usage_at=fields.usage)
        record = StreamRecord("probe", 0, "reader", PROMPT, {})
        for ev in self.events:
            again.note(record, ev, 0.0)
        return record

    async def _refusals(self, wire: OpenAIWire) -> None:
        kinds = [kind for kind in library_refusals() if kind not in KEYED]
        kinds.sort(key=lambda k: k == "empty_prompt")  # last: it crashes one peer's worker
        for kind in kinds:
            body, headers = wire.bad(kind, PROMPT, TOO_MANY)
            try:
                ex = await self._send("POST", wire.path, body, headers)
            except (OSError, asyncio.TimeoutError):
                self.report.refusals[kind] = (None, None)
                continue
            try:
                head = await ex.read_head(DEADLINE_S)
                error = None
                if head.status != 200:
                    try:
                        reply = json.loads(await ex.read_body(DEADLINE_S))
                        error = wire.error_type(reply) if isinstance(reply, dict) else None
                    except ValueError:
                        error = None
                self.report.refusals[kind] = (head.status, error)
            except (OSError, asyncio.TimeoutError):
                self.report.refusals[kind] = (None, None)
            finally:
                ex.close_fin()


def profile_yaml(profile: Profile) -> str:
    """The profile as a file `--target-profile` and `target.profile` take (defaults left out)."""
    import yaml

    data = profile.model_dump(mode="json", exclude_defaults=True)
    data = {"name": profile.name, **data}
    return yaml.safe_dump(data, sort_keys=False, width=110)


def probe(url: str, api: str = "openai-completions", model: str | None = None, api_key: str = "",
          origin: Origin | None = None) -> ProbeReport:
    return asyncio.run(Prober(url, api, model, api_key, origin).run())
