"""Fuzzing with Hypothesis. Request bodies for every route, from each route's schema and
mutated (types, sizes, unicode, nesting): never a 500, never a block held afterwards. Scenario
files, valid ones mutated: never a traceback, always a ScenarioError naming the file and a line."""

from __future__ import annotations

import pytest

import asyncio
import copy
import json
import re

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from harness.format.scenario import SCENARIOS_DIR
from harness.format.load import ScenarioError, load
from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from tests.asgi import assert_clean, running_service

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

CONFIG = ServiceConfig(engine=EngineConfig(max_batch=4, cache=CacheConfig(num_blocks=64)), max_tokens_budget=48)

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                      st.text(max_size=40), st.text(alphabet=st.characters(min_codepoint=0x2000), max_size=10))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                             st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                          max_leaves=12)

ROUTES = {
    "/v1/stream": {"prompt": "Return the number", "max_new_tokens": 4, "temperature": 0.5, "top_k": 3, "top_p": 0.9,
                   "seed": 1, "stop": ["x"], "ignore_eos": True, "ttft_deadline_ms": 500},
    "/v1/generate": {"prompt": "Return the number", "max_new_tokens": 4, "seed": 2},
    "/v1/completions": {"model": "tiny", "prompt": "Return", "max_tokens": 4, "stream": True,
                        "stream_options": {"include_usage": True}, "temperature": 0, "stop": "x", "n": 1,
                        "top_k": 2, "ignore_eos": True, "return_token_ids": True},
    "/v1/chat/completions": {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                             "stream": False, "seed": 3, "max_completion_tokens": 4},
}


@st.composite
def mutated_bodies(draw, base: dict):
    body = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["replace", "drop", "add", "nest", "huge"]))
        key = draw(st.sampled_from(sorted(body) or ["prompt"]))
        if action == "replace":
            body[key] = draw(json_value)
        elif action == "drop":
            body.pop(key, None)
        elif action == "add":
            body[draw(st.text(min_size=1, max_size=12))] = draw(json_value)
        elif action == "nest":
            body[key] = {"nested": body.get(key), "deeper": [body.get(key)] * 3}
        else:
            body[key] = draw(st.sampled_from(["x" * 70_000, 10**30, -1, [0] * 5000, "\u2028\ud7ff\U0010ffff"]))
    raw = json.dumps(body, allow_nan=True).encode()
    return draw(st.sampled_from([raw, raw, raw, raw[: len(raw) // 2], b"[" + raw + b"]", raw + b"garbage"]))


async def exercise(path: str, raw: bytes) -> None:
    async with running_service(CONFIG, None) as svc:
        reply = await svc.call(path, raw, deadline_s=30)
        assert reply.status is not None and reply.status < 500, (path, raw[:200], reply.status, bytes(reply.body[:300]))
        if reply.status == 200 and reply.events:  # a stream: it ends, and not with an internal error
            last = reply.events[-1]
            assert last.event in ("done", "error") or last.data == "[DONE]", last  # ours, or OpenAI's end
            assert not any("internal_error" in e.data for e in reply.events)
        elif reply.status != 200:
            envelope = json.loads(reply.body)
            assert "error" in envelope  # our envelope or OpenAI's error object, never a bare text
        assert_clean(await svc.settle())


def fuzz_route(path: str):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(raw=mutated_bodies(ROUTES[path]))
    def run(raw):
        asyncio.run(exercise(path, raw))
    return run


test_fuzz_stream = fuzz_route("/v1/stream")
test_fuzz_generate = fuzz_route("/v1/generate")
test_fuzz_completions = fuzz_route("/v1/completions")
test_fuzz_chat = fuzz_route("/v1/chat/completions")


# ---- scenario files ----

SEEDS = ["overlap_4", "bad_requests", "network_latency", "resume_reconnect", "overload_deadline", "engine_fault_step"]
LINE = re.compile(r"\.yaml:\d+: ")


def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, prefix + (i,))


@st.composite
def mutated_scenarios(draw):
    name = draw(st.sampled_from(SEEDS))
    data = yaml.safe_load((SCENARIOS_DIR / f"{name}.yaml").read_text())
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from([p for p in paths(data) if p]))
        parent = data
        for k in where[:-1]:
            parent = parent[k]
        action = draw(st.sampled_from(["replace", "drop", "unknown", "wrap"]))
        try:
            if action == "replace":
                parent[where[-1]] = draw(json_value)
            elif action == "drop":
                del parent[where[-1]]
            elif action == "unknown" and isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=10))] = draw(json_value)
            elif action == "wrap":
                parent[where[-1]] = [parent[where[-1]]]
        except (KeyError, IndexError, TypeError):
            pass
    return name, data


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=mutated_scenarios())
def test_a_mutated_scenario_loads_or_names_the_file_and_line(tmp_path, case):
    name, data = case
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    try:
        load(path)
    except ScenarioError as exc:
        for line in str(exc).splitlines():
            assert LINE.search(line) and str(path) in line, line


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_any_bytes_as_a_scenario_file_give_a_scenario_error(tmp_path, raw):
    path = tmp_path / "junk.yaml"
    path.write_bytes(raw)
    try:
        load(path)
    except ScenarioError as exc:
        assert str(exc).startswith(str(path)), exc
