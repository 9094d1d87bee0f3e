"""What a target run observes from outside the server: a capacity probe before and after,
its load gauges polled through the run, its health afterwards, and identity references run
alone through the same target. Records only; harness.judge.checks judges.

The poller reads the profile's gauges every POLL_S straight from the server (not through
Toxiproxy): that is the resolution of every release time measured this way.
"""

from __future__ import annotations

import asyncio
import json
import math
import time

from harness.record.trace import Probe, TargetObservation, NORMAL_FINISHES, StreamRecord, percentile
from harness.targets.gauges import GaugeReading, prometheus_samples, read_gauges, series_sum

POLL_S = 0.025
PROBE_PROMPT = "Return the number of items in the container."
PROBE_TOKENS = 4
PROBE_DEADLINE_S = 60.0
SOLO_DEADLINE_S = 120.0


class TargetWatch:
    def __init__(self, server) -> None:  # a harness.live.backend.LiveServer
        self.server = server
        self.profile = server.target.profile_spec
        self.samples: list[tuple[float, float | None, float | None, float | None]] = []
        self.poll_errors = 0
        self.poller: asyncio.Task | None = None
        self.probes: dict[str, dict] = {}
        self.probe_size = 1
        self.settle_note: str | None = None
        self.counted_before: dict[str, float | None] = {}
        self.counter_note: str | None = None

    # ---- before the clients ----

    async def begin(self, scenario) -> None:
        self.probe_size = self.server.target.probe_clients or scenario.server.max_batch
        await self.probe("warm_up")  # a fresh server's first requests pay for its warm-up
        self.probes["before"] = await self.probe("before")
        self.counted_before = await self.count()  # after the probes: the count is the run's alone
        if self.profile.gauges is not None:
            self.poller = asyncio.get_running_loop().create_task(self._poll())

    async def probe(self, label: str) -> Probe:
        """N short greedy requests at once, straight to the server: their TTFT p50 and outcomes."""
        body = self.server.wire.body(PROBE_PROMPT, {"max_new_tokens": PROBE_TOKENS, "temperature": 0.0,
                                                    "top_k": 0, "top_p": 1.0, "stop": [], "ignore_eos": True})
        results = await asyncio.gather(*(self._one_probe(body) for _ in range(self.probe_size)))
        ttfts = [t for t, ok in results if ok and t is not None]
        return {"label": label, "clients": self.probe_size, "completed": sum(1 for _, ok in results if ok),
                "ttft_p50_s": percentile(ttfts, 50)}

    async def _one_probe(self, body: dict) -> tuple[float | None, bool]:
        alone, complete = await self._alone(body, PROBE_DEADLINE_S)
        first = alone.token_times[0] - alone.sent_at if alone.token_times else None
        return first, alone.finish is not None and complete

    async def _alone(self, body: dict, deadline_s: float) -> tuple[StreamRecord, bool]:
        """One request straight to the server (not through Toxiproxy), read to its end within
        deadline_s, as the wire reads it: what probes and identity references both need. The
        record, and whether the response ended (not cut off by the deadline or an error)."""
        wire = self.server.wire
        record = StreamRecord("alone", 0, "reader", "", body, sent_at=time.monotonic())
        try:
            ex = await self.server.endpoint.request("POST", wire.path, body, headers=wire.headers)
        except OSError:
            return record, False
        complete = False
        try:
            if (await ex.read_head(deadline_s)).status != 200:
                return record, False
            while not ex.ended and time.monotonic() < record.sent_at + deadline_s:
                for ev in await ex.read_events(1, timeout_s=deadline_s):
                    wire.note(record, ev, time.monotonic() - ex.arrived_ago())
            complete = ex.ended
        except (OSError, asyncio.TimeoutError, ValueError):
            pass
        finally:
            ex.close_fin()
        return record, complete

    async def count(self) -> dict[str, float | None]:
        """The profile's counters now: "generated_tokens", and "finished:REASON" for each reason it
        maps (a value None: absent, or it could not be read; {}: it maps none)."""
        counters = self.profile.counters
        if counters is None or not (counters.generated_tokens or counters.finished):
            return {}
        wanted = {"generated_tokens": [counters.generated_tokens] if counters.generated_tokens else []}
        wanted |= {f"finished:{reason}": specs for reason, specs in counters.finished_series().items()}
        try:
            samples = prometheus_samples(await self.server.endpoint.get_body(counters.path))
        except (OSError, asyncio.TimeoutError, ValueError) as exc:
            self.counter_note = f"the counters could not be read: {exc}"
            return dict.fromkeys(wanted)
        out = {}
        for key, specs in wanted.items():
            values = [series_sum(samples, spec) for spec in specs]
            out[key] = sum(v for v in values if v is not None) if specs and any(v is not None for v in values) else None
        return out

    # ---- through the run ----

    async def read(self) -> GaugeReading | None:
        gauges = self.profile.gauges
        if gauges is None:
            return None
        return read_gauges(await self.server.endpoint.get_body(gauges.path), gauges)

    async def sample(self) -> GaugeReading:
        """A reading of the gauges, kept as a sample of the run: the poller's, and settle's too
        (the poller is stopped once settle reads idle, and that last reading is the release the
        polls before it had not yet seen: on vLLM three droppers read still running without it)."""
        r = await self.read()
        self.samples.append((self.server.clock(), r.running, r.waiting, r.cache_in_use))
        return r

    async def _poll(self) -> None:
        while True:
            try:
                await self.sample()
            except (OSError, asyncio.TimeoutError, ValueError):
                self.poll_errors += 1
            await asyncio.sleep(POLL_S)

    async def settle(self, drain_s: float) -> None:
        """Until the gauges read idle (bounded); without gauges there is nothing to wait on."""
        if self.profile.gauges is None:
            self.settle_note = "no load gauges on this target: the run was not waited on to drain"
            return
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline:
            try:
                if (await self.sample()).is_idle(self.profile.gauges.idle):
                    return
            except (OSError, asyncio.TimeoutError, ValueError):
                pass
            await asyncio.sleep(POLL_S)
        self.settle_note = f"the gauges did not read idle within {drain_s:g}s"

    def cancel(self) -> None:
        if self.poller is not None:
            self.poller.cancel()

    # ---- after the run ----

    async def finish(self) -> TargetObservation:
        self.cancel()
        counted_after = await self.count()  # before the probe after: its tokens are not the run's
        over_run = {k: counted_after[k] - v for k, v in self.counted_before.items()
                    if v is not None and counted_after.get(k) is not None}
        generated = over_run.get("generated_tokens")
        finished = {k.removeprefix("finished:"): v for k, v in over_run.items() if k.startswith("finished:")}
        final = None
        try:
            final = await self.read()
        except (OSError, asyncio.TimeoutError, ValueError) as exc:
            self.settle_note = f"the gauges could not be read after the run: {exc}"
        # The capacity probe first, then the health route: a peer can learn of its own crash a second
        # or two late (transformers serve marks its engine dead when its output thread's 1 s read times
        # out), and a health read at the run's last byte read ok in 2 of 3 runs here after the crash.
        # After the probe, the run's last requests, the route says what a next client would meet.
        self.probes["after"] = await self.probe("after")
        health = None
        if self.server.target.health is not None:
            try:
                health = await self.server.endpoint.is_healthy()
            except (OSError, asyncio.TimeoutError, ValueError):
                health = False
        health = health if self.server.endpoint.alive() else False
        t = self.server.target
        return {"name": t.name, "profile": self.profile.model_dump(mode="json"), "api": t.api,
                "native_books": self.profile.native_books, "generated_tokens": generated,
                "finished": finished or None,
                "counter_note": self.counter_note,
                "gauges": self.profile.gauges.model_dump() if self.profile.gauges else None,
                "token_ids": self.profile.token_ids, "model_known": t.url is None,  # we started it with our export
                "refusals": {k: list(v) for k, v in self.profile.refusals.items()},
                "poll_s": POLL_S, "poll_errors": self.poll_errors, "samples": self.samples,
                "final": None if final is None else vars(final), "health_after": health,
                "probe_before": self.probes.get("before"), "probe_after": self.probes["after"],
                "settle_note": self.settle_note}

    async def solo(self, planned, records) -> dict[int, list[int] | str | None]:
        """Each greedy stream's request run alone through the same target (once per distinct request):
        its token ids where the API gives them, its text otherwise; None where the target could not
        run it (identity then says so instead of comparing).

        Where every stream of a request carried token ids, its solo run goes one token past the
        longest of them, never past its max_tokens (as harness.run.references does for our engine): a
        greedy run's first tokens do not depend on where it is cut, and most of the library's
        streams leave early: on vLLM disconnect_fin_early's solo runs took 4.4 s before, 1.0 s cut,
        and leak_300's whole run 62 s before, 31 s cut. Text is compared whole, so a text-only
        target runs each request to its end."""
        wire = self.server.wire
        runs = [(i, pc) for i, pc in enumerate(planned)
                if not pc.group.behaviour.refused and pc.request["temperature"] == 0 and records[i].token_times]
        key = {i: json.dumps([pc.prompt, pc.request], sort_keys=True) for i, pc in runs}
        needed: dict[str, float] = {}  # a request's solo length; inf: to its end (a stream without ids)
        for i, _ in runs:
            ids = records[i].token_ids if self.profile.token_ids else []
            needed[key[i]] = max(needed.get(key[i], 0), len(ids) + 1 if ids else math.inf)
        out: dict[int, list[int] | str | None] = {}
        done: dict[str, list[int] | str | None] = {}
        for i, pc in runs:
            if key[i] not in done:
                request = pc.request
                if needed[key[i]] < request["max_new_tokens"]:
                    request = {**request, "max_new_tokens": int(needed[key[i]])}
                alone, _ = await self._alone(wire.body(pc.prompt, request), SOLO_DEADLINE_S)
                if alone.finish not in NORMAL_FINISHES:
                    done[key[i]] = None  # the target could not run it alone (refused, or broken by then)
                else:
                    done[key[i]] = alone.token_ids if self.profile.token_ids and alone.token_ids else alone.text
            out[i] = done[key[i]]
        return out
