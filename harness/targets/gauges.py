"""A target's load gauges read from its metrics (Prometheus text, or llama.cpp's /slots JSON)
as its profile names them (harness.format.target.Gauges)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from harness.format.profile import Gauges, parse_series


@dataclass(frozen=True)
class GaugeReading:
    running: float | None
    waiting: float | None
    cache_in_use: float | None

    def held(self, idle_at: dict[str, float] | None = None) -> dict[str, float]:
        """The gauges that read above idle (0, or the profile's `idle` value for that gauge)."""
        idle_at = idle_at or {}
        return {g: v for g, v in vars(self).items() if v is not None and v > idle_at.get(g, 0.0)}

    def is_idle(self, idle_at: dict[str, float] | None = None) -> bool | None:
        """Nothing running, waiting or cached; None when no gauge is read at all."""
        if all(v is None for v in vars(self).values()):
            return None
        return not self.held(idle_at)


def read_gauges(body: bytes | str, gauges: Gauges) -> GaugeReading:
    """A metrics or /slots body as the three gauges (a series that is absent reads None)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if gauges.source == "llamacpp_slots":
        slots = json.loads(text)
        if not isinstance(slots, list):
            raise ValueError("/slots: expected a JSON list of slots")
        return GaugeReading(float(sum(1 for s in slots if s.get("is_processing"))), None, None)
    samples = prometheus_samples(text)
    return GaugeReading(*(series_sum(samples, getattr(gauges, g)) for g in ("running", "waiting", "cache_in_use")))


def prometheus_samples(body: bytes | str) -> list:
    from prometheus_client.parser import text_string_to_metric_families

    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def series_sum(samples: list, spec: str | None) -> float | None:
    """The sum of the samples a series spec (harness.format.profile.parse_series) matches; None
    where no sample does (the series is absent) or no spec is given."""
    if not spec:
        return None
    name, labels = parse_series(spec)
    values = [s.value for s in samples
              if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(values) if values else None
