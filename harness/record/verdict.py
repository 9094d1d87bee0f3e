"""A check's verdict: what every check returns and the report renders."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CheckResult:
    name: str
    passed: bool | None  # None: not observable on this target (never reported as passed)
    figure: str
    bound: str
    details: list[str] = field(default_factory=list)
    expected_to_fail: bool = False
    compared: int | None = None  # how many things the check compared, where it counts them: 0 is not observable

    @property
    def observed(self) -> bool:
        return self.passed is not None

    @property
    def ok(self) -> bool:
        """A negative control is ok when its check fails; an unobservable check fails nothing."""
        return self.passed is None or self.passed != self.expected_to_fail

    @property
    def verdict(self) -> str:
        if self.passed is None:
            return "not observable"
        return "ok" if self.ok else "FAILED"

    def line(self) -> str:
        if self.passed is None:
            return f"{self.name}: not observable: {self.figure}"
        verdict = self.verdict
        control = " (negative control: must fail)" if self.expected_to_fail else ""
        detail = f" [{'; '.join(self.details[:3])}]" if self.details and not self.passed else ""
        return f"{self.name}{control}: {verdict}: {self.figure} (bound: {self.bound}){detail}"
