"""Profiles as files and inline (harness.format.profile): what the checks can see on a server."""

from __future__ import annotations

import pytest

from harness.format.load import ScenarioError, load
from harness.format.profile import FILES, PROFILES, Profile, parse_series
from harness.format.target import Target, resolve_target
from harness.judge.registry import unobservable
from harness.targets.gauges import read_gauges

pytestmark = pytest.mark.shares_cores

METRICS = """\
# TYPE gw_running gauge
gw_running{model="a"} 2
gw_running{model="b"} 5
# TYPE gw_waiting gauge
gw_waiting{model="a"} 0
# TYPE gw_cache gauge
gw_cache{model="a"} 0.02
"""


def test_the_built_in_profiles_are_the_files_and_each_is_named_by_its_file():
    assert sorted(PROFILES) == sorted(p.stem for p in FILES.glob("*.yaml"))
    assert PROFILES["vllm"].gauges.running == "vllm:num_requests_running"
    assert PROFILES["streamlab"].native_books and PROFILES["generic"].health_path is None


def test_a_series_is_a_name_with_label_matchers_and_a_mistake_says_what_was_expected():
    assert parse_series('vllm:num_requests_running{model_name="x", engine="0"}') == (
        "vllm:num_requests_running", {"model_name": "x", "engine": "0"})
    assert parse_series("plain_total") == ("plain_total", {})
    for wrong in ("has space", 'x{model=a}', "x{"):
        with pytest.raises(ValueError, match="expected NAME|label="):
            parse_series(wrong)


def test_gauges_sum_the_samples_their_labels_match_and_idle_reads_at_the_profiles_value():
    profile = Profile.model_validate({"gauges": {"running": 'gw_running{model="a"}', "waiting": "gw_waiting",
                                                 "cache_in_use": "gw_cache", "idle": {"cache_in_use": 0.05}}})
    reading = read_gauges(METRICS, profile.gauges)
    assert (reading.running, reading.waiting, reading.cache_in_use) == (2, 0, 0.02)
    assert read_gauges(METRICS, Profile.model_validate({"gauges": {"running": "gw_running"}}).gauges).running == 7
    assert reading.held(profile.gauges.idle) == {"running": 2}
    idle = read_gauges(METRICS.replace(" 2\n", " 0\n").replace(" 5\n", " 0\n"), profile.gauges)
    assert idle.is_idle(profile.gauges.idle) and not idle.is_idle()  # the cache's 0.02 is idle only by the profile


def test_an_inline_profile_extends_a_built_in_one_and_decides_what_is_observable():
    t = Target.model_validate({"name": "gw", "url": "http://127.0.0.1:9", "api": "openai-completions",
                               "profile": {"extends": "vllm", "gauges": {"running": "gw_running"}}})
    spec = t.profile_spec
    assert spec.name == "vllm (changed)" and spec.gauges.running == "gw_running"
    assert spec.gauges.waiting == "vllm:num_requests_waiting" and spec.token_ids  # the rest is vLLM's
    assert "leak_free" not in unobservable(spec) and "waste" not in unobservable(spec)
    bare = Profile.model_validate({"name": "mine", "gauges": {"running": "r"}})
    assert "waste" in unobservable(bare) and "release_within" not in unobservable(bare)
    assert {"leak_free", "release_within", "waste"} <= set(unobservable(PROFILES["generic"]))
    with pytest.raises(ValueError, match="unknown profile 'vlm'"):
        Profile.model_validate({"extends": "vlm"})


def test_a_scenario_file_with_a_mistaken_inline_profile_names_the_field(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nmodes: [live]\ntarget: {url: 'http://127.0.0.1:9', api: openai-completions,\n"
                    "  profile: {gauges: {running: 'x{model=a}'}}}\n"
                    "groups: [{name: g, behaviour: {kind: reader}}]\n")
    with pytest.raises(ScenarioError, match=r"p.yaml:\d+: target.profile.*label"):
        load(path)


def test_target_profile_may_be_a_file_such_as_the_probe_writes(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\ngauges: {running: gw_running}\nhealth_path: /ready\n")
    t = resolve_target("http://127.0.0.1:9", profile=str(path))
    assert t.profile_spec.name == "mine" and t.health == "/ready"
    with pytest.raises(ValueError, match="cannot read"):
        resolve_target("http://127.0.0.1:9", profile=str(tmp_path / "absent.yaml"))


def _counted_trace(counts: dict, finishes: list[str | None], settled: bool = True):
    """Streams that ended as `finishes` say (None: the client left) and a target's counters over the run."""
    from harness.record.trace import StreamRecord
    from tests.helpers import client_trace

    streams = [StreamRecord("g", i, "reader", "p", {}, status=200, finish=f, closed_at=None if f else 1.0)
               for i, f in enumerate(finishes)]
    trace = client_trace("x", "live", streams)
    trace.target = {"finished": counts, "gauges": {"running": "r"}, "settle_note": None if settled else "not idle"}
    return trace


def test_finished_once_compares_the_servers_own_counts_with_what_its_clients_read():
    from harness.judge.target_checks import finished_once

    ends = ["length", "length", "stop", None]
    whole = {"length": 2, "stop": 1, "client_left": 1, "error": 0}
    held = finished_once(None, _counted_trace(whole, ends))
    assert held.ok and held.compared == 3, held.line()
    never = finished_once(None, _counted_trace({**whole, "client_left": 0}, ends))  # a request never counted
    assert not never.ok and "counted 3 requests finished, its clients had 4 accepted" in never.details[0]
    twice = finished_once(None, _counted_trace({**whole, "length": 3}, ends))  # one counted twice
    assert not twice.ok
    short = finished_once(None, _counted_trace({**whole, "length": 1, "client_left": 2}, ends))
    assert not short.ok and "1 finished by length, its clients read 2" in short.details[0]
    # vLLM's: no count of requests whose client left, so the total is not compared
    partial = finished_once(None, _counted_trace({"length": 2, "stop": 1, "error": 0}, ends))
    assert partial.ok and partial.compared == 2 and "not every reason is counted" in partial.figure
    unsettled = finished_once(None, _counted_trace({**whole, "client_left": 0}, ends, settled=False))
    assert unsettled.ok and "not seen to drain" in unsettled.figure
    unread = finished_once(None, _counted_trace({}, ends))  # none of its series exported: never a pass
    assert unread.passed is None and unread.compared == 0


def test_fields_say_where_a_chunk_carries_ids_and_usage():
    from streamlab.sse import SSEEvent
    from harness.clients.wire import wire_for
    from harness.record.trace import StreamRecord

    profile = Profile.model_validate({"extends": "vllm", "fields": {"token_ids": "meta.ids", "usage": "stats.usage"}})
    wire = wire_for("openai-completions", "m", fields=profile.fields)
    record = StreamRecord("g", 0, "reader", "p", {})
    for data in ('{"choices":[{"text":"a","finish_reason":null}],"meta":{"ids":[7]}}',
                 '{"choices":[{"text":"","finish_reason":"length"}],"stats":{"usage":{"prompt_tokens":3,"completion_tokens":1}}}'):
        wire.note(record, SSEEvent("message", data, "", None), 0.0)
    assert record.token_ids == [7] and record.usage["completion_tokens"] == 1 and record.prompt_tokens == 3
    default = wire_for("openai-completions", "m")  # vLLM's and ours: choices[].token_ids, usage
    record = StreamRecord("g", 0, "reader", "p", {})
    default.note(record, SSEEvent("message", '{"choices":[{"text":"a","token_ids":[5],"finish_reason":null}]}', "", None), 0.0)
    assert record.token_ids == [5]
    with pytest.raises(ValueError, match="dotted path"):
        Profile.model_validate({"fields": {"token_ids": "choices[]..x"}})
