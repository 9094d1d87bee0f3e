"""Request traces read for the `trace` arrival kind (harness/format/arrivals.TraceArrival): rows of
(seconds from the trace's first request, prompt tokens, output tokens) from a CSV or JSONL file.
A shipped excerpt is named by its stem (scenarios/traces/<name>.csv); anything else is a path."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path

TRACES_DIR = Path(__file__).resolve().parents[2] / "scenarios" / "traces"


class TraceFileError(ValueError):
    """A trace that cannot be read as asked: the message names the file, the row and the column."""


def trace_path(name: str) -> Path:
    shipped = TRACES_DIR / f"{name}.csv"
    return shipped if "/" not in name and shipped.exists() else Path(name)


def shipped_traces() -> list[str]:
    return sorted(p.stem for p in TRACES_DIR.glob("*.csv"))


def _seconds(value, where: str) -> float:
    """A timestamp: a number of seconds, or a date and time (the Azure trace's, with up to 7
    fractional digits, which datetime.fromisoformat does not take)."""
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    whole, _, frac = text.partition(".")
    try:
        return datetime.fromisoformat(whole).timestamp() + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise TraceFileError(f"{where}: {text!r} is neither seconds nor a date and time") from None


@lru_cache(maxsize=16)
def read_trace(name: str, time_column: str, prompt_column: str, output_column: str) -> tuple[tuple[float, int, int], ...]:
    path = trace_path(name)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        known = ", ".join(shipped_traces())
        raise TraceFileError(f"{path}: cannot read ({exc.strerror}); a shipped trace is one of {known}, "
                             f"or give a path to a CSV or JSONL file") from None
    if path.suffix == ".jsonl":
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append((n, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise TraceFileError(f"{path}:{n}: not JSON: {exc.msg}") from None
    else:
        records = list(enumerate(csv.DictReader(text.splitlines()), 2))
    rows = []
    for n, record in records:
        where = f"{path}:{n}"
        missing = [c for c in (time_column, prompt_column, output_column) if c not in record]
        if missing:
            raise TraceFileError(f"{where}: no column {missing[0]!r}; it has {sorted(record)}")
        try:
            prompt, output = int(record[prompt_column]), int(record[output_column])
        except (TypeError, ValueError):
            raise TraceFileError(f"{where}: {prompt_column} and {output_column} must be whole numbers of tokens") \
                from None
        rows.append((_seconds(record[time_column], f"{where}: {time_column}"), prompt, output))
    if not rows:
        raise TraceFileError(f"{path}: no requests")
    rows.sort()
    first = rows[0][0]
    return tuple((t - first, p, o) for t, p, o in rows)
