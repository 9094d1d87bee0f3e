"""The clients (harness/clients/client.py): what every client records, how it leaves, the headers it
carries, and launch()'s arrivals and concurrency. Run behind the simulation (the real app, hub
and engine) where a server is needed."""

from __future__ import annotations

import asyncio
import random

from harness.run import once
from harness.clients.client import Client, with_headers
from harness.format.scenario import GroupSpec, Scenario
from harness.record.trace import StreamRecord


def scenario(groups: list[dict], **extra) -> Scenario:
    return Scenario.model_validate({"name": "clients", "seed": 7, "server": {"model": "tiny", "max_batch": 4},
                                    "groups": groups, **extra})


def group(name: str, behaviour: dict, count: int = 2, **extra) -> dict:
    return {"name": name, "count": count, "prompt": {"tokens": [40, 56]},
            "request": {"max_new_tokens": 24}, "behaviour": behaviour, **extra}


def test_a_reader_records_its_head_every_token_and_its_end():
    trace, _ = once.simulate(scenario([group("readers", {"kind": "reader"})]))
    for s in trace.group("readers"):
        assert s.status == 200 and s.sent_at <= s.head_at <= s.token_times[0]
        assert len(s.token_times) == 24 and s.token_times == sorted(s.token_times)
        assert s.finish == "length" and s.ended_at >= s.token_times[-1]
        assert s.closed_at is None  # it did not leave: the stream ended


def test_a_dropper_records_when_and_how_it_left():
    trace, _ = once.simulate(scenario([group("droppers", {"kind": "dropper", "after_tokens": 5, "close": "rst"})]))
    for s in trace.group("droppers"):
        assert s.close_how == "rst" and s.closed_at is not None
        assert len(s.token_times) >= 5 and s.closed_at >= s.token_times[4]


def test_a_mixed_close_is_drawn_from_the_clients_own_seed():
    spec = GroupSpec.model_validate(group("droppers", {"kind": "dropper", "after_tokens": 1, "close": "mixed"}))

    def how(seed: int) -> str:
        return Client(spec, StreamRecord("droppers", 0, "dropper", "p", {}), random.Random(seed), lambda: 0.0).close_how()
    assert [how(s) for s in range(20)] == [how(s) for s in range(20)]  # the same seed leaves the same way
    assert {how(s) for s in range(20)} == {"fin", "rst"}


def test_a_requests_own_header_wins_over_the_extra_ones():
    seen = []

    async def opener(path, body, headers):
        seen.append(headers)
    asyncio.run(with_headers(opener, {"authorization": "Bearer k", "x-a": "1"})("/v1/stream", b"", {"authorization": "no"}))
    assert seen == [{"authorization": "no", "x-a": "1"}]
    assert with_headers(opener, {}) is opener  # nothing to add: the opener itself


def test_joiners_arrive_while_their_group_runs_and_no_more_than_the_cap_at_once():
    s = scenario([group("running", {"kind": "reader"}, count=4),
                  group("joiners", {"kind": "reader"}, arrival={"kind": "join_while", "group": "running",
                                                               "start_s": 0.0, "end_s": 0.05})],
                 max_clients_at_once=3)
    trace, _ = once.simulate(s)
    first_token = min(t for r in trace.group("running") for t in r.token_times[:1])
    assert all(j.sent_at >= first_token for j in trace.group("joiners"))
    spans = [(r.sent_at, r.ended_at) for r in trace.streams]
    most = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert most <= 3


def test_joiners_of_a_group_that_never_made_a_token_go_when_it_ends():
    """A group whose every request is refused has no first token to join at (vLLM refuses a
    request past its context): its joiners are sent when it ends, not held to the run's deadline."""
    s = scenario([group("refused", {"kind": "bad_request", "send": "malformed_json", "expect_status": 400,
                                     "expect_error": "invalid_json"}),
                  group("joiners", {"kind": "reader"}, arrival={"kind": "join_while", "group": "refused",
                                                               "start_s": 0.0, "end_s": 0.05})])
    trace, _ = once.simulate(s)
    refused_end = max(r.head_at for r in trace.group("refused"))  # its answer: a 400
    assert all(not r.token_times for r in trace.group("refused"))
    assert all(j.sent_at >= refused_end and j.finish == "length" for j in trace.group("joiners"))


def test_a_live_event_is_recorded_when_its_bytes_arrived_not_when_a_busy_loop_read_them():
    """A server thread writes a stream's events 60 ms apart, stalling the client's event loop for
    30 ms just before each write (a harness too busy to read at once): each event is still
    recorded at its bytes' arrival (the kernel's receive stamp), within 2 ms of the write, though
    it was read 20 ms or more after it. Recording at read time fails this. (Events that pile up
    in one socket longer than the gap between them share the later one's stamp: the kernel
    stamps a receive queue's merged segments with the last; docs/HARNESS.md.)"""
    import json
    import socket
    import threading
    import time

    from harness.clients.client import raw_opener

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    written: list[float] = []
    read_at: list[float] = []
    loop_box: list[asyncio.AbstractEventLoop] = []

    def chunk(event: str, data: dict) -> bytes:
        body = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
        return b"%x\r\n%s\r\n" % (len(body), body)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            conn.sendall(chunk("start", {"id": "r", "prompt_tokens": 1}))
            for i in range(4):
                time.sleep(0.06)
                loop_box[0].call_soon_threadsafe(time.sleep, 0.03)  # the client's loop is busy...
                time.sleep(0.005)
                before = time.monotonic()
                conn.sendall(chunk("token", {"token_id": i, "text": "x"}))  # ...as this arrives
                written.append((before, time.monotonic()))  # it arrived between the two
            conn.sendall(chunk("done", {"finish_reason": "length"}) + b"0\r\n\r\n")
            conn.recv(1)  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    spec = GroupSpec.model_validate(group("readers", {"kind": "reader"}, count=1))
    record = StreamRecord("readers", 0, "reader", "p", {})

    async def main() -> None:
        loop_box.append(asyncio.get_running_loop())
        thread.start()
        opener = raw_opener(port, spec.behaviour)

        async def timed_opener(path, body, headers):
            ex = await opener(path, body, headers)
            read_events = ex.read_events

            async def read_and_time(*a, **kw):
                got = await read_events(*a, **kw)
                read_at.extend(time.monotonic() for ev in got if ev.event == "token")
                return got
            ex.read_events = read_and_time
            return ex
        await Client(spec, record, random.Random(1), time.monotonic).run(timed_opener, 8)

    try:
        asyncio.run(main())
    finally:
        listener.close()
        thread.join(5)
    assert record.finish == "length" and len(record.token_times) == len(written) == len(read_at) == 4
    recorded = [(before - 0.002 <= got <= after + 0.002) for got, (before, after) in zip(record.token_times, written)]
    read_late = [got - after for got, (_, after) in zip(read_at, written)]
    assert all(recorded), (record.token_times, written)
    assert all(d >= 0.02 for d in read_late), read_late  # the reads themselves were late
