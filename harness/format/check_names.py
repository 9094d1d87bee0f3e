"""The names of every declared check, in their declaration order: what a scenario may name in
`expect_failure` (the format's CheckName). Declared whole in harness/judge/registry.py, which
checks at import that its declarations and this list agree; the list lives here, below the
judge, so that the format does not import the verdicts."""

NAMES = ("finish_reasons", "healthy", "leak_free", "exactly_once", "identity", "text", "usage",
         "event_order", "finish_agrees", "goodput", "engine_faults",
         "release_within", "waste", "finished_once", "resumption", "arrivals", "capacity_restored", "profile_drift", "latency",
         "regression", "parity")
