"""The server's options (streamlab/options.py): every `streamlab serve` flag is a scenario field
with the same default, and reaches the configuration in both modes through one mapping."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from harness.live.process import ServerProcess, free_port
from harness.format.scenario import ServerSpec
from streamlab.cli import main
from streamlab.options import SERVE_OPTIONS, service_config
from streamlab.policies import Policy

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

NON_DEFAULT = {"model": "tiny", "policy": Policy.DROP, "queue_limit": 5, "stall_timeout_s": 0.4, "max_batch": 7,
               "max_prefills_per_step": 3, "step_token_budget": 48, "prefill_chunk_tokens": 16, "prefix_caching": True, "decode_attention": "gather", "dtype": "bfloat16", "history": 123, "fault_step": 7, "fault_rate": 0.25, "fault_seed": 3,
               "header_timeout_s": 3.5, "body_timeout_s": 4.5, "max_connections": 3000, "max_head_bytes": 20000, "max_headers": 50, "api_key": "k", "debug": True, "admin_port": free_port(), "first_token": "step", "cache_blocks": 333, "block_size": 8,
               "waiting_limit": 11, "admission": "deadline", "ttft_deadline_ms": 250.0, "max_tokens_budget": 555, "keepalive_s": 2.5, "graceful_timeout_s": 1.5,
               "resume_window_s": 4.5, "resume_buffer_events": 77, "resume_buffer_bytes": 9999, "lab": True, "lab_step_slowdown": 1.5,
               "lab_defect": "stop_across_tokens", "null_step_ms": 20.0}


HARNESS_SIDE = {"proxy"}  # what the harness puts in front of the server, not a server option


def test_every_serve_option_is_a_scenario_field_with_the_same_default():
    assert set(ServerSpec.model_fields) - HARNESS_SIDE == {o.name for o in SERVE_OPTIONS}
    spec = ServerSpec()
    for o in SERVE_OPTIONS:
        value = getattr(spec, o.name)
        assert (value.value if isinstance(value, Policy) else value) == o.default, o.name


def test_each_option_changes_the_configuration():
    """No field is dropped on the way: changing it alone changes the config."""
    assert set(NON_DEFAULT) == set(ServerSpec.model_fields) - HARNESS_SIDE
    for name, value in NON_DEFAULT.items():
        if name == "model":
            continue  # one model ships small enough for tests
        lab = {"lab": True} if name.startswith(("fault_", "lab_")) else {}  # faults are lab-only
        assert ServerSpec(**{name: value, **lab}).service_config() != ServerSpec(**lab).service_config(), name


def test_the_live_servers_parsed_configuration_equals_the_simulated_one():
    spec = ServerSpec(**NON_DEFAULT)

    async def live_config() -> dict:
        async with ServerProcess(spec.serve_args() + ["--log-level", "warning"]) as server:
            return await server.get_json("/debug/config")

    simulated = json.loads(json.dumps(dataclasses.asdict(spec.service_config()), default=str))
    simulated["api_key"] = "(set)"  # /debug/config never shows the key itself
    assert asyncio.run(live_config()) == simulated
    assert service_config({}) == ServerSpec().service_config()  # one set of defaults


def test_serve_lists_every_option_on_its_command_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--help"])
    assert exit_.value.code == 0
    shown = capsys.readouterr().out
    assert [o.flag for o in SERVE_OPTIONS if o.flag not in shown] == []
