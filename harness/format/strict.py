"""The base of every model in the scenario format (and a target's): unknown fields are refused.
Its own module, so the behaviours, the targets and the scenario can all build on it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FieldProblem(ValueError):
    """A mistake that involves two fields, raised with the path of the one to point at."""

    def __init__(self, loc: tuple, message: str) -> None:
        super().__init__(message)
        self.loc = loc


class FieldProblems(ValueError):
    """Every cross-field mistake of one file, raised together so the loader reports them at once."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems
