"""Client behaviours, one module each: its model in the scenario format, how its client reads a
stream, and its one-line description, together. Registered here by `kind`; the scenario format
takes any of them (Behaviour), and scenarios/README.md's field reference lists each one's fields.
A new behaviour is a module here and one line in BEHAVIOURS."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from harness.format.behaviours.bad_request import BadRequest
from harness.format.behaviours.base import READ_DEADLINE_S, BehaviourModel
from harness.format.behaviours.dropper import Dropper
from harness.format.behaviours.reader import Reader
from harness.format.behaviours.reconnector import Reconnector
from harness.format.behaviours.sleeper import Sleeper
from harness.format.behaviours.stalled import Stalled

BEHAVIOURS: dict[str, type[BehaviourModel]] = {
    "reader": Reader, "sleeper": Sleeper, "stalled": Stalled, "dropper": Dropper, "reconnector": Reconnector,
    "bad_request": BadRequest,
}
Behaviour = Annotated[Union[tuple(BEHAVIOURS.values())], Field(discriminator="kind")]  # every one registered

__all__ = ["BEHAVIOURS", "READ_DEADLINE_S", "BadRequest", "Behaviour", "BehaviourModel", "Dropper", "Reader",
           "Reconnector", "Sleeper", "Stalled"]
