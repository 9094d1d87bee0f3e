"""`streamlab scenario targets-report`: docs/TARGETS.md, from the profiles and from live runs of
the peer scenarios against every target that can run here."""

from __future__ import annotations

import time
from pathlib import Path

from harness.run.runner import RunContext, refused_here, run_scenario
from harness.format.scenario import SCENARIOS_DIR
from harness.format.load import load_by_name
from harness.judge.registry import unobservable
from harness.format.profile import PROFILES
from harness.format.target import TARGETS
from harness.targets.findings import CHECKS, FINDINGS, FRESH_SERVER, ROUTE_SCENARIOS, UNSETTLED

PAGE = Path("docs") / "TARGETS.md"
RUN_HERE = ["streamlab", "streamlab-openai", "transformers-serve", "llamacpp", "vllm"]


def observability_rows() -> list[str]:
    rows = ["| profile | " + " | ".join(CHECKS) + " | run against a real server here |",
            "|---|" + "---|" * (len(CHECKS) + 1)]
    for name, profile in PROFILES.items():
        hidden = unobservable(profile)
        cells = []
        for check in CHECKS:
            if check in hidden:
                cells.append("not observable")
            elif check == "identity":
                cells.append("token ids" if profile.token_ids else "text")
            elif check == "text":  # decoded from the ids it sends (harness.judge.wire_checks)
                cells.append("token ids" if profile.token_ids else "not observable (no token ids)")
            elif check == "finish_agrees" and not profile.token_ids:
                cells.append("length only (no token ids)")
            elif check == "usage" and profile.fields.usage is None:
                cells.append("not observable (no usage in its stream)")
            elif check == "usage" and not profile.token_ids:
                cells.append("at least the chunks read (no token ids)")
            elif check in ("leak_free", "release_within") and not profile.native_books:
                cells.append(f"gauges ({profile.gauges.source})")
            elif check == "waste" and not profile.native_books:
                cells.append(f"counter `{profile.counters.generated_tokens}`")
            elif check == "finished_once":
                cells.append("counters by reason")
            else:
                cells.append("evaluated")
        ran = "yes" if profile.ran_here else "parsed only" if profile.gauges else "only against a test stub"
        rows.append(f"| `{name}` | " + " | ".join(cells) + f" | {ran} |")
    return rows


def scenarios_for(target: str) -> list[str]:
    """What a target is run on: a foreign server the whole library (what of each scenario it can
    run is harness.targets.scope's), our own server on either route the routes' scenarios."""
    if TARGETS[target].own_server:
        return ROUTE_SCENARIOS
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))


def run_rows(say=print) -> tuple[list[str], list[str]]:
    """Each scenario on each target. A target's scenarios run in one session, in the order that
    starts a command target's server once per kind (RunContext.run_order); the table is by scenario."""
    rows = ["| scenario | target | " + " | ".join(CHECKS) + " | wall s |", "|---|---|" + "---|" * (len(CHECKS) + 1)]
    found: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for target in RUN_HERE:
        ctx = RunContext(results_dir=None, target=TARGETS[target])
        try:
            for scenario in ctx.run_order([load_by_name(n) for n in scenarios_for(target)]):
                found[(scenario.name, target)] = _row(scenario, target, ctx, say)
        finally:
            ctx.close()
    notes = []
    for name in sorted({name for name, _ in found}):
        for target in RUN_HERE:
            if (name, target) in found:
                row, row_notes = found[(name, target)]
                rows.append(row)
                notes += row_notes
    return rows, notes


def _row(scenario, target: str, ctx: RunContext, say) -> tuple[str, list[str]]:
    name = scenario.name
    reason = refused_here(scenario, "live", ctx)
    if reason:
        return f"| {name} | {target} | skipped: {reason} |", []
    say(f"{name} on {target}")
    if (target, name) in FRESH_SERVER:
        ctx.close()  # started afresh: FRESH_SERVER says why
    outcome = run_scenario(scenario, "live", ctx)
    got = {c.name: c for c in outcome.checks}
    findings = FINDINGS.get((target, name), {})
    cells, notes = [], [f"- {name} on `{target}`: {w}" for w in outcome.left_out]
    for check in CHECKS:
        c = got.get(check)
        if c is None:
            cells.append("–")
        elif not c.observed:
            cells.append("not observable")
        elif c.passed:
            cells.append("held")
        elif check in UNSETTLED.get((target, name), {}):
            cells.append("failed (unsettled)")
            notes.append(f"- {name} on `{target}`, {check}: {UNSETTLED[(target, name)][check]}. "
                         f"Measured: {c.figure[:300]}")
        else:
            cells.append("**failed (finding)**" if check in findings else "**FAILED**")
            notes.append(f"- {name} on `{target}`, {check}: {findings.get(check, 'unexpected')}. "
                         f"Measured: {c.figure[:300]}")
    if "capacity_restored" in got:
        notes.append(f"- {name} on `{target}`: {got['capacity_restored'].figure}")
    return f"| {name} | {target} | " + " | ".join(cells) + f" | {outcome.trace.wall_s:.0f} |", notes


# The wire contract on each peer, measured here on scenarios/stop_strings.yaml (issue 39).
WIRE_ON_PEERS = [
    "The wire contract's checks (`text`, `usage`, `event_order`, `finish_agrees`: docs/HARNESS.md, \"What a "
    "client reads\") on each peer, from `streamlab scenario run scenarios/stop_strings.yaml --target NAME` (the "
    "library's file with stop strings):",
    "",
    "- `llamacpp`: every wire check holds: usage counts one token per chunk and the same prompt tokens as ours; "
    "text is not observable (no token ids).",
    "- `vllm`: text, usage, order and finish hold. It leaves the end-of-text token's own text out of the stream "
    "wherever it comes (skip_special_tokens, its default), which the text check allows on an OpenAI API. It "
    "refuses more than 4 stop strings (400, OpenAI's limit); stop_strings asks 4. One stopper of 4 runs to its "
    "length (a finding, not vLLM's: stdlib-small's greedy text loops '/CP/CP/...' without a stop string).",
    "- `transformers-serve`: its /v1/completions does not apply `stop` (a finding: 4 of 4 stoppers run to their "
    "length). It bundles several tokens into one chunk (a stream of 48 tokens in 39 chunks, usage 48): without "
    "token ids a client counting chunks as tokens undercounts, so usage is held to at least the chunks read, "
    "and bundling is counted in its figure.",
    "",
]


# Issue 40: profiles as files, inline or probed, and servers elsewhere; measured here.
YOUR_SERVER = [
    "## Your own server: its profile, probed or written, wherever it runs",
    "",
    "The profiles above are files (`harness/format/profiles/*.yaml`). A scenario's `target.profile` may be one "
    "of their names or a profile written inline (Prometheus series with label matchers, `name{label=\"v\"}`, "
    "the matching samples summed; the value at which a gauge reads idle; `extends: NAME` to start from a "
    "built-in one), and `--target-profile` takes a file. `streamlab target probe URL` asks a running server "
    "what it shows (its routes, the known servers' series in its /metrics, llama.cpp's /slots, one stream's "
    "token ids, usage and finish reason, each of the library's bad requests) and writes such a file. "
    "`tests/test_targets.py` probes each peer after its library run: vLLM's and llama-server's probed gauges, "
    "counters and refusal maps come out as the built-in files have them; on transformers serve the probe "
    "finds that it refuses `ignore_eos` (422), serves max_tokens past its context (200) and answers the empty "
    "prompt with a 500 (its worker dies: the finding below).",
    "",
    "`waste` is observed from outside where a profile names a tokens-generated counter (vLLM's "
    "`vllm:generation_tokens_total`, llama-server's `llamacpp:tokens_predicted_total`): the counter over the "
    "run (read after the capacity probe before it, and after the run drained) less what the streams that "
    "stayed were given, over what the abandoned streams read. On `disconnect_rst_mid` (6 clients reset after "
    "100 of 200 tokens, bound 1.3): vLLM 1.01 (606 generated for 600 read), llama-server 1.02 (611/600); "
    "ours, from its own books, 1.01 (606/600). On llama-server's `disconnect_*_waiting` each client that left while "
    "its request waited was still given a slot and one token (4 for 4 that read none): a finding. The run "
    "table below was written before the counters were read: `tests/test_targets.py` judges `waste` on these "
    "peers on every push.",
    "",
    "`finished_once` reads a server's own count of the requests it finished, by how they ended, over the "
    "run (as `waste` reads its counter), against what its clients read: at least as many `length` and `stop` "
    "as they read, and, where every reason is counted and the gauges read idle first, each accepted request "
    "counted once in all (a request never finished in the server's books, or finished twice). Ours counts "
    "every reason (`streamlab_finished_total{reason=...}`) and is judged on all three. vLLM 0.32 labels "
    "`vllm:request_success_total` by `finished_reason`, but a request whose client hung up is not counted "
    "there at all (disconnect_rst_mid: 0 of 6 leavers, 2 of 2 readers), so on vLLM the total is not "
    "compared; llama-server and transformers serve count no finished requests by reason. A profile's "
    "`fields` say where a stream's chunks carry the token ids (`choices[].token_ids`, vLLM's and ours, or a "
    "dotted path from the chunk's top) and the usage (`usage`, or null where none comes back, and `usage` "
    "is then not observable); the probe tries the other places it knows and writes what it found.",
    "",
    "A server on another host is a target when its owner says so: `--allow-remote HOST` (or "
    "`STREAMLAB_ALLOW_REMOTE`); https is verified against the host's name (system CAs, `--ca-file`, or an "
    "explicit `--insecure`), spoken over the clients' own sockets through Toxiproxy. `tests/test_reach.py` "
    "runs our server on 127.0.0.2 over https with a CA of its own, standing in for one.",
    "",
]


def write_page(say=print) -> Path:
    t0 = time.perf_counter()
    rows, notes = run_rows(say)
    text = "\n".join([
        "# Targets",
        "",
        "Written by `streamlab scenario targets-report` (it ran the scenarios below live against every target "
        f"that runs on this machine, in {time.perf_counter() - t0:.0f} s; on every target but "
        "`streamlab` every client goes through Toxiproxy, on `streamlab` only the groups with network "
        "conditions, as in the suite). "
        "`streamlab scenario run FILE --target NAME|URL` runs any scenario against a target.",
        "",
        "## What each profile lets the checks observe",
        "",
        "A check is evaluated or reported *not observable*; it is never passed unseen. `capacity_restored` "
        "(N short requests at once before the run and after it drains; the after-probe's TTFT p50 within "
        "3x + 250 ms of the before-probe's, and all complete) needs nothing from the server and runs on every "
        "target. Gauges are polled every 25 ms straight from the server: that is the resolution of every "
        "release time measured from outside. Profiles marked *parsed only* were tested against metrics "
        "text written from each project's documented format (tests/fixtures/targets/), not against a running "
        "server; a fixture with a version in its name was scraped from that server running here. "
        "llama.cpp's llama-server is built by `scripts/dev setup --targets`; TGI and SGLang do not run on "
        "this machine.",
        "",
        *observability_rows(),
        "",
        *YOUR_SERVER,
        "## Runs",
        "",
        *WIRE_ON_PEERS,
        "`streamlab` is our own server on its own route (`/v1/stream`), `streamlab-openai` the same server "
        "through `/v1/completions` (its verdicts must equal the native route's; tests/test_targets.py asserts "
        "it), `transformers-serve` is `transformers serve --continuous-batching` on `streamlab export tiny` "
        "weights, `llamacpp` is llama.cpp's `llama-server` (b11434) on `streamlab export tiny --format gguf`, "
        "one slot per sequence the scenario's own server batches. A failure that is the peer's real "
        "behaviour is a *finding*, asserted as such by the tests; one that sits at its bound on a peer, "
        "passing in some runs, is *unsettled*: reported with its figures, not asserted.",
        "",
        *rows,
        "",
        "### Findings and figures",
        "",
        *notes,
        "",
    ])
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    return PAGE
