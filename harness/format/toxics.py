"""Network toxics, one class each: its fields in the scenario format and the attributes
Toxiproxy's API takes for it (https://github.com/Shopify/toxiproxy#toxics), together. Live runs
set them on a real toxiproxy-server (harness/live/toxiproxy.py); the simulation models latency and
bandwidth on its own links (harness/sim/backend.py) and leaves the rest to live runs."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field

from harness.format.strict import Strict


class Toxic(Strict):
    simulated: ClassVar[bool] = False  # the simulation models it on its own links (harness/sim/backend.py)
    stream: Literal["upstream", "downstream"] = "downstream"
    toxicity: float = Field(1.0, ge=0, le=1)

    def attributes(self) -> dict:
        """Toxiproxy's attributes for this toxic."""
        raise NotImplementedError


class LatencyToxic(Toxic):
    type: Literal["latency"]
    simulated: ClassVar[bool] = True
    latency_ms: int = Field(ge=0)
    jitter_ms: int = Field(0, ge=0)

    def attributes(self) -> dict:
        return {"latency": self.latency_ms, "jitter": self.jitter_ms}


class BandwidthToxic(Toxic):
    type: Literal["bandwidth"]
    simulated: ClassVar[bool] = True
    rate_kbps: int = Field(ge=1, description="KB/s, as Toxiproxy counts it")

    def attributes(self) -> dict:
        return {"rate": self.rate_kbps}


class SlowCloseToxic(Toxic):
    type: Literal["slow_close"]
    delay_ms: int = Field(ge=0)

    def attributes(self) -> dict:
        return {"delay": self.delay_ms}


class TimeoutToxic(Toxic):
    type: Literal["timeout"]
    timeout_ms: int = Field(ge=0)

    def attributes(self) -> dict:
        return {"timeout": self.timeout_ms}


class ResetPeerToxic(Toxic):
    type: Literal["reset_peer"]
    timeout_ms: int = Field(0, ge=0)

    def attributes(self) -> dict:
        return {"timeout": self.timeout_ms}


class SlicerToxic(Toxic):
    type: Literal["slicer"]
    average_size: int = Field(ge=1)
    size_variation: int = Field(0, ge=0)
    delay_us: int = Field(0, ge=0)

    def attributes(self) -> dict:
        return {"average_size": self.average_size, "size_variation": self.size_variation, "delay": self.delay_us}


class LimitDataToxic(Toxic):
    type: Literal["limit_data"]
    bytes: int = Field(ge=0)

    def attributes(self) -> dict:
        return {"bytes": self.bytes}


ToxicSpec = Annotated[Union[LatencyToxic, BandwidthToxic, SlowCloseToxic, TimeoutToxic, ResetPeerToxic,
                            SlicerToxic, LimitDataToxic], Field(discriminator="type")]
