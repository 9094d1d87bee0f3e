"""Prometheus metrics for one app: a registry of its own (no module globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from streamlab.hub import Hub

RELEASE_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _HubCollector:
    """Reads the hub's and the engine's counters at scrape time."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def collect(self):
        stats = self.hub.stats()
        ledger = self.hub.engine.blocks.ledger
        for name in ("blocks_total", "blocks_free", "blocks_reserved", "blocks_cached", "blocks_evictable", "waiting",
                     "running", "paused", "streams_registered"):
            yield GaugeMetricFamily(f"streamlab_{name}", name.replace("_", " "), value=stats[name])
        for name, value in (("blocks_allocated", ledger.blocks_allocated), ("blocks_released", ledger.blocks_released),
                            ("releases", stats["releases"]), ("steps", stats["steps"]),
                            ("tokens_generated", stats["tokens_generated"]),
                            ("requests_accepted", stats["requests_accepted"]),
                            ("requests_refused", stats["requests_refused"]),
                            ("late_events_dropped", stats["late_events_dropped"]),
                            ("double_release_attempts", stats["double_release_attempts"]),
                            ("prefix_hit_blocks", stats["prefix_hit_blocks"]),
                            ("prefix_queried_blocks", stats["prefix_queried_blocks"]),
                            ("prefix_evictions", stats["prefix_evictions"])):
            yield CounterMetricFamily(f"streamlab_{name}", name.replace("_", " "), value=value)
        cancellations = CounterMetricFamily("streamlab_cancellations", "streams cancelled, by reason",
                                            labels=["reason"])
        for reason, count in stats["cancellations"].items():
            cancellations.add_metric([reason], count)
        yield cancellations
        finished = CounterMetricFamily("streamlab_finished", "sequences finished, by reason", labels=["reason"])
        for reason, count in stats["finished_by_reason"].items():
            finished.add_metric([reason], count)
        yield finished


class Metrics:
    def __init__(self, hub: Hub) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_HubCollector(hub))
        self.release_delay = Histogram("streamlab_release_delay_seconds",
                                       "from a stream's early close to its sequence's release",
                                       buckets=RELEASE_BUCKETS_S, registry=self.registry)
        hub.books.on_release_delay = self.release_delay.observe

    def render(self) -> bytes:
        return generate_latest(self.registry)
