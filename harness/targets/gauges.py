"""A target's load gauges read from its metrics (Prometheus text, or llama.cpp's /slots JSON)
as its profile names them (harness.format.target.Gauges)."""

from __future__ import annotations

import json
from dataclasses import dataclass



from harness.format.target import Gauges


@dataclass(frozen=True)
class GaugeReading:
    running: float | None
    waiting: float | None
    cache_in_use: float | None

    @property
    def idle(self) -> bool | None:
        """Nothing running, waiting or cached; None when no gauge is read at all."""
        values = [v for v in (self.running, self.waiting, self.cache_in_use) if v is not None]
        return None if not values else all(v == 0 for v in values)


def read_gauges(body: bytes | str, gauges: Gauges) -> GaugeReading:
    """A metrics or /slots body as the three gauges (a series that is absent reads None)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if gauges.source == "llamacpp_slots":
        slots = json.loads(text)
        if not isinstance(slots, list):
            raise ValueError("/slots: expected a JSON list of slots")
        return GaugeReading(float(sum(1 for s in slots if s.get("is_processing"))), None, None)
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value

    def one(name: str | None) -> float | None:
        return sums.get(name) if name else None
    return GaugeReading(one(gauges.running), one(gauges.waiting), one(gauges.cache_in_use))
