"""The swarm's generator: Hypothesis strategies that draw whole scenarios from a seed.

Swarm testing (Groce et al., ISSTA 2012): each draw first picks which features it may use and
leaves the rest out, so a run is not every feature at once at low intensity, and rare
combinations come up. Every draw is validated by harness/format/scenario.Scenario: the scenario
models and their schema are this generator's contract, and a draw that does not validate is a
bug here.

Shrinking is Hypothesis's, and it shrinks toward the left of every choice: fewer features,
fewer and smaller groups, the first choice of each list. So each choice puts the simple case
first: a reader, arrival at once, the server's defaults.
"""

from __future__ import annotations

from hypothesis import strategies as st

from harness.format.behaviours import BEHAVIOURS as BEHAVIOUR_CLASSES, BehaviourModel
from harness.format.scenario import Scenario

# What a draw may use. A feature left out of a draw is not used anywhere in it.
BEHAVIOURS = ("dropper", "sleeper", "stalled", "reconnector", "bad_request")  # Hypothesis favours the first
ARRIVALS = ("uniform", "poisson", "offsets", "join_while", "trace")
NETWORK = ("latency", "bandwidth")
SERVER = ("policy", "limits", "small_batch", "small_cache", "resume", "whole_prefill", "chunk", "deadline",
          "faults")
# padding: events padded (lab) so that a slow client's socket fills and its stream is paused;
# without it a client that never reads absorbs the simulated socket's 4 MB first (scenarios/README.md).
REQUESTS = ("stops", "sampling", "padding")
FEATURES = BEHAVIOURS + ARRIVALS + NETWORK + SERVER + REQUESTS

# Sizes kept small: the swarm's worth is in how many runs it makes (about one a second here).
MAX_GROUPS = 3
MAX_COUNT = 4
MAX_NEW_TOKENS = 40
MAX_PROMPT_TOKENS = 48
BLOCK_SIZE = 16

# A bad request and what our server answers to it (scenarios/bad_requests.yaml); the keyless
# two need an access key and lab_option a server without --lab, so they are not drawn.
BAD_REQUESTS = {
    "malformed_json": (400, "invalid_json"), "wrong_type": (422, "invalid_request"),
    "unknown_field": (422, "invalid_request"), "too_many_tokens": (422, "request_too_large"),
    "body_too_large": (413, "body_too_large"), "wrong_content_type": (415, "unsupported_media_type"),
    "empty_prompt": (422, "invalid_request"),
}

# Stop strings likely in the tiny model's text, some one token and some across two.
STOPS = ("e", "th", " a", "in", "re", ".", "\n", "er ")

# The Azure LLM inference trace excerpts shipped with the library (harness/format/trace_arrivals.py).
TRACES = ("azure_code", "azure_conversation")


def _floats(lo: float, hi: float, places: int = 2):
    """A float in [lo, hi], rounded so the written YAML reads cleanly; shrinks toward lo."""
    scale = 10 ** places
    return st.integers(round(lo * scale), round(hi * scale)).map(lambda n: n / scale)


# Every value below is drawn whether or not its feature is on, and used only where it is: so
# when the shrinker turns a feature off, the choices after it keep their meaning and the failure
# usually survives (drawn only where used, a feature turned off shifted every later choice).

def _traits(group: dict) -> type[BehaviourModel]:
    """A drawn group's behaviour class, whose traits say what it does (the draw is a dict until
    it is validated as a whole)."""
    return BEHAVIOUR_CLASSES[group["behaviour"]["kind"]]


@st.composite
def _behaviour(draw, features: frozenset, resume_window_s: float, max_new_tokens: int, padded: bool) -> dict:
    kind = draw(st.sampled_from(("reader",) + BEHAVIOURS))
    sleeper = {"kind": "sleeper", "read_bytes": draw(st.integers(256, 4096)), "sleep_s": draw(_floats(0.5, 2.0))}
    if padded:  # a read takes a few padded events
        sleeper["read_bytes"] = 1024 * 1024
    stalled = {"kind": "stalled", "give_up_s": draw(_floats(1.0, 4.0))}
    trigger = draw(st.sampled_from(["after_tokens", "after_s", "while_waiting"]))
    dropper = {"kind": "dropper", "close": draw(st.sampled_from(["fin", "rst", "mixed"]))}
    after_tokens, after_s = draw(st.integers(1, 24)), draw(_floats(0.0, 0.1, 3))  # a tiny token: ~1 ms here
    slow_leaver, read_pause_s = draw(st.booleans()), draw(_floats(0.02, 0.5))
    if trigger == "after_tokens":
        dropper["after_tokens"] = after_tokens
    elif trigger == "after_s":
        dropper["after_s"] = after_s
    else:
        dropper["while_waiting"] = True
    if trigger != "while_waiting" and slow_leaver:
        dropper["read_pause_s"] = read_pause_s  # a slow reader that leaves
    reconnects, leave_at, gap = draw(st.integers(1, 3)), draw(st.integers(1, 24)), draw(st.integers(0, 100))
    # A reconnector must leave before its stream ends and come back inside the window, or the
    # resumption check rightly says its run proved nothing.
    reconnector = {"kind": "reconnector", "after_tokens": max(1, min(leave_at, (max_new_tokens - 1) // reconnects)),
                   "gap_s": round(resume_window_s * gap / 200, 3), "reconnects": reconnects}
    send = draw(st.sampled_from(sorted(BAD_REQUESTS)))
    bad = {"kind": "bad_request", "send": send, "expect_status": BAD_REQUESTS[send][0],
           "expect_error": BAD_REQUESTS[send][1]}
    usable = kind in features and (not BEHAVIOUR_CLASSES[kind].resumes or (resume_window_s and max_new_tokens >= 2))
    return {"sleeper": sleeper, "stalled": stalled, "dropper": dropper, "reconnector": reconnector,
            "bad_request": bad}.get(kind, {"kind": "reader"}) if usable else {"kind": "reader"}


@st.composite
def _arrival(draw, features: frozenset, anchors: list[str]) -> dict:
    """`anchors`: the groups drawn before that a join_while may name (long readers)."""
    kind = draw(st.sampled_from(("at_once",) + ARRIVALS))
    at = draw(_floats(0.0, 0.5))
    choices = {
        "at_once": {"kind": "at_once", **({"at_s": at} if at else {})},
        "uniform": {"kind": "uniform", "end_s": draw(_floats(0.001, 0.5, 3))},
        "poisson": {"kind": "poisson", "rate_per_s": draw(_floats(10.0, 500.0, 0))},
        "offsets": {"kind": "offsets", "offsets_s": draw(st.lists(_floats(0.0, 0.2, 3), min_size=1, max_size=4))},
        "join_while": {"kind": "join_while", "group": anchors[draw(st.integers(0, 2)) % len(anchors)] if anchors
                       else "", "start_s": 0.0, "end_s": draw(_floats(0.001, 0.02, 3))},
        "trace": {"kind": "trace", "trace": draw(st.sampled_from(TRACES)), "start_s": draw(st.integers(0, 280)),
                  "speedup": draw(_floats(1.0, 20.0, 1))},
    }
    usable = kind in features and (kind != "join_while" or anchors)
    return choices[kind] if usable else choices["at_once"]


@st.composite
def _group(draw, features: frozenset, index: int, earlier: list[dict], resume_window_s: float,
           deadline_on: bool) -> dict:
    anchors = [g["name"] for g in earlier if _traits(g).reads_at_full_speed and g["request"]["max_new_tokens"] >= 24
               and "ttft_deadline_ms" not in g["request"] and g["arrival"]["kind"] != "trace"]
    group = {"name": f"g{index}", "count": draw(st.integers(1, MAX_COUNT)), "arrival": draw(_arrival(features, anchors))}
    lo = draw(st.integers(1, MAX_PROMPT_TOKENS))
    hi = draw(st.integers(lo, MAX_PROMPT_TOKENS))
    if (lo, hi) != (16, 64):
        group["prompt"] = {"corpus": True, "tokens": [lo, hi]}
    request: dict = {"max_new_tokens": draw(st.integers(1, MAX_NEW_TOKENS))}
    stops, stop = draw(st.booleans()), draw(st.lists(st.sampled_from(STOPS), min_size=1, max_size=2, unique=True))
    sampled, temperature = draw(st.booleans()), draw(_floats(0.5, 1.5))
    top_k, seed = draw(st.sampled_from([0, 5, 50])), draw(st.integers(0, 1000))
    if "stops" in features and stops:
        request["stop"] = stop
    if "sampling" in features and sampled:
        request.update(temperature=temperature, top_k=top_k, seed=seed)
    padded, pad_bytes = draw(st.booleans()), draw(st.integers(64, 256))
    if "padding" in features and padded:
        request["pad_bytes"] = pad_bytes * 1024
    traced = group["arrival"]["kind"] == "trace"  # its lengths are the trace's: no reconnector can count on them
    group["behaviour"] = draw(_behaviour(features, resume_window_s, 0 if traced else request["max_new_tokens"],
                                         "pad_bytes" in request))
    gated, deadline = draw(st.booleans()), draw(_floats(0.5, 20.0, 1))  # a first token takes about 1-5 ms here
    if deadline_on and not _traits(group).resumes and gated:
        request["ttft_deadline_ms"] = deadline
    group["request"] = request
    delayed, latency_ms = draw(st.booleans()), draw(st.integers(1, 200))
    narrow, rate_kbps = draw(st.booleans()), draw(st.integers(1, 64))
    toxics = []
    if "latency" in features and delayed:
        toxics.append({"type": "latency", "latency_ms": latency_ms})
    if "bandwidth" in features and narrow and not _traits(group).resumes \
            and "pad_bytes" not in request:  # 256 KB events at 64 KB/s would outlast the run
        toxics.append({"type": "bandwidth", "rate_kbps": rate_kbps})
    if toxics:
        group["network"] = {"toxics": toxics}
    return group


@st.composite
def _server(draw, features: frozenset, defect: str) -> dict:
    values = {
        "policy": {"policy": draw(st.sampled_from(["pause", "drop", "pause_then_drop", "unbounded"]))},
        "limits": {"queue_limit": draw(st.integers(1, 16)), "stall_timeout_s": draw(_floats(0.05, 1.0))},
        "small_batch": {"max_batch": draw(st.integers(1, 4))},
        "resume": {"resume_window_s": draw(_floats(0.1, 2.0))},
        "whole_prefill": {"step_token_budget": 0},
        "chunk": {"prefill_chunk_tokens": draw(st.integers(1, 32)), "step_token_budget": draw(st.integers(8, 128))},
        "deadline": {"admission": "deadline"},
        # one failed step: a rate could fail three in a row and break the engine, a false finding
        "faults": {"lab": True, "fault_step": draw(st.integers(1, 30))},
    }
    on = set(features) | ({"resume"} if "reconnector" in features else set())  # reconnectors need a window
    if "whole_prefill" in on:
        on.discard("chunk")
    server: dict = {}
    for feature, value in values.items():  # small_cache is drawn after the groups (it must fit them)
        if feature in on:
            server.update(value)
    if defect:
        server.update(lab=True, lab_defect=defect)
    if "padding" in features:
        server["lab"] = True  # pad_bytes is a lab option
    return server


# What a draw for another server may use: no server options (the target has its own), nothing
# only ours does (resumption, lab padding), and greedy requests (a target's seeded sampling is its own).
TARGET_FEATURES = tuple(f for f in FEATURES if f not in SERVER + ("reconnector", "sampling", "padding"))


@st.composite
def scenarios(draw, defect: str = "", model: str = "tiny", for_target: bool = False) -> Scenario:
    """One drawn scenario, valid by construction (Scenario validates it here). `defect`: the
    lab's seeded defect every draw's server runs with (streamlab/defects.py), not drawn.
    for_target: only what a run against another server can use (TARGET_FEATURES)."""
    pool = TARGET_FEATURES if for_target else FEATURES
    # Each feature in or out with even odds (swarm testing's coin per feature); shrinks to none.
    features = frozenset(f for f, used in zip(pool, draw(st.lists(st.booleans(), min_size=len(pool),
                                                                   max_size=len(pool)))) if used)
    server = _server(features, defect)
    server = {**draw(server), **({"model": model} if model != "tiny" else {})}
    groups: list[dict] = []
    for i in range(draw(st.integers(1, MAX_GROUPS))):
        groups.append(draw(_group(features, i, groups, server.get("resume_window_s", 0.0),
                                  server.get("admission") == "deadline")))
    # A reconnector comes back after its link's round trip: the window must outlast it (on a
    # 100 ms window a 99 ms link's reconnect came too late, and rightly got 410). A slow link
    # is not drawn for reconnectors for the same reason (the tail it had not read yet).
    latency = max((t["latency_ms"] for g in groups if _traits(g).resumes
                   for t in g.get("network", {}).get("toxics", []) if t["type"] == "latency"), default=0)
    if latency and server.get("resume_window_s", 0) < 4 * latency / 1000 + 0.2:
        server["resume_window_s"] = round(4 * latency / 1000 + 0.2, 3)
    # Drawn after every other choice, so each keeps its place: a padded slow leaver's small receive
    # buffer, so its backpressure reaches the server live as in simulation and its stream is paused
    # (a slow leaver on unpadded events, or on the kernel's default buffer, never was).
    for g in groups:
        small, rcvbuf = draw(st.booleans()), draw(st.sampled_from([16384, 65536]))
        lingers, linger_s = draw(st.booleans()), draw(_floats(0.05, 0.5))
        b = g["behaviour"]
        slow_leaver = b["kind"] == "dropper" and bool(b.get("read_pause_s"))
        # Only a leaver: a sleeper reading 16 KiB of 64-256 KiB events every 0.5-2 s outlasts any run
        # deadline (the first swarm with it found that, and nothing else, from 3 of 4 seeds).
        if slow_leaver and "pad_bytes" in g["request"] and small:
            b["recv_buffer_bytes"] = rcvbuf
        if slow_leaver and lingers:  # it stops reading before it hangs up: paused when it leaves
            b["linger_s"] = linger_s
    data = {"name": "swarm", "description": f"drawn by the swarm; features: {', '.join(sorted(features)) or 'none'}",
            "modes": ["sim", "live"], "server": server, "groups": groups, "drain_s": 10.0}
    leaving = [g["name"] for g in groups if _traits(g).leaves_early]
    if leaving:  # checked where clients leave (harness.swarm.search drops it when none did)
        data["expect"] = {"release_within": {"steps": 1, "seconds": 0.25}}
    scenario = Scenario.model_validate(data)
    if "small_cache" in features:
        need = -(-max(g.longest_tokens() for g in scenario.groups) // BLOCK_SIZE)  # the longest must fit alone
        server["cache_blocks"] = draw(st.integers(need, need * 3))
        scenario = Scenario.model_validate(data)
    return scenario
