"""The results page's plots (matplotlib, PNG), each from one section's JSON."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.common import PLOTS  # noqa: E402


def _save(fig, name: str) -> Path:
    PLOTS.mkdir(parents=True, exist_ok=True)
    path = PLOTS / name
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _band(ax, levels: list[dict], key: str, label: str, scale: float = 1.0, **style) -> None:
    ns = [lv["n"] for lv in levels]
    med = [lv[key]["median"] * scale for lv in levels]
    lo = [lv[key]["min"] * scale for lv in levels]
    hi = [lv[key]["max"] * scale for lv in levels]
    ax.plot(ns, med, marker="o", label=label, **style)
    ax.fill_between(ns, lo, hi, alpha=0.2, **({"color": style["color"]} if "color" in style else {}))


PEER_COLOURS = {"transformers-serve": "tab:orange", "llamacpp": "tab:purple", "vllm": "tab:red"}


def overlap(ours: dict, peers: dict[str, dict], bound: dict | None) -> Path:
    """Throughput and first tokens by level: ours, each peer's (by target name), the bounds."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    _band(left, ours["levels"], "tokens_per_s", "streamlab over HTTP", color="tab:blue")
    for name, peer in peers.items():
        _band(left, peer["levels"], "tokens_per_s", name, color=PEER_COLOURS.get(name, "tab:brown"))
    if bound:
        left.axhline(bound["bound_tokens_per_s"]["median"], color="tab:gray", ls="--",
                     label="in-process bound (transformers, 32)")
        left.axhline(bound["engine_tokens_per_s"]["median"], color="tab:blue", ls=":",
                     label="our engine in-process (32)")
    left.set(xscale="log", xlabel="simultaneous streams", ylabel="aggregate tokens/s",
             title="Throughput (median, band = min..max)")
    left.set_xticks([1, 2, 4, 8, 16, 32], labels=["1", "2", "4", "8", "16", "32"])
    left.legend(fontsize=8)
    _band(right, ours["levels"], "ttft_p50_s", "streamlab TTFT p50", color="tab:blue")
    _band(right, ours["levels"], "gap_p99_s", "streamlab gap p99", scale=1.0, color="tab:green")
    for name, peer in peers.items():
        _band(right, peer["levels"], "ttft_p50_s", f"{name} TTFT p50", color=PEER_COLOURS.get(name, "tab:brown"))
    right.set(xscale="log", yscale="log", xlabel="simultaneous streams", ylabel="seconds",
              title="Time to first token and gap between tokens")
    right.set_xticks([1, 2, 4, 8, 16, 32], labels=["1", "2", "4", "8", "16", "32"])
    right.legend(fontsize=8)
    return _save(fig, "overlap.png")


def step_cost(step: dict) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = step["rows"]
    b = [r["batch"] for r in rows]
    for key, label, color in (("paged", "streamlab paged step", "tab:blue"),
                              ("contiguous", "transformers contiguous step", "tab:gray")):
        ax.plot(b, [r[f"{key}_ms"] for r in rows], marker="o", color=color, label=label)
        ax.fill_between(b, [r[f"{key}_ms_min"] for r in rows], [r[f"{key}_ms_max"] for r in rows], color=color,
                        alpha=0.2)
    ax.set(xscale="log", xlabel="sequences decoded together", ylabel="ms per decode step",
           title=f"Decode step cost, {step['model']}")
    ax.set_xticks(b, labels=[str(x) for x in b])
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return _save(fig, "step_cost.png")


def slow_readers(result: dict) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    policies = list(dict.fromkeys(r["policy"] for r in result["rows"]))
    for policy in policies:
        rows = [r for r in result["rows"] if r["policy"] == policy]
        ks = [r["slow"] for r in rows]
        left.plot(ks, [r["healthy_completion_max_s"] for r in rows], marker="o", label=policy)
        right.plot(ks, [r["healthy_gap_p99_s"] * 1e3 for r in rows], marker="o", label=policy)
    left.set(yscale="log", xlabel="slow readers among 8", ylabel="seconds",
             title="Healthy streams: slowest completion")
    right.set(yscale="log", xlabel="slow readers among 8", ylabel="ms", title="Healthy streams: gap p99")
    for ax in (left, right):
        ax.set_xticks([0, 1, 2, 4])
        ax.legend(fontsize=8)
    return _save(fig, "slow_readers.png")


def harness_lag(result: dict) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = result["clients"]["rows"]
    ax.plot([r["clients"] for r in rows], [r["lag_p99_ms"] for r in rows], marker="o", label="lag p99")
    ax.plot([r["clients"] for r in rows], [r["lag_p50_ms"] for r in rows], marker="o", label="lag p50")
    ax.axhline(result["clients"]["lag_limit_ms"], color="tab:red", ls="--", label="limit")
    ax.set(xscale="log", xlabel="concurrent streaming clients in one harness process", ylabel="event-loop lag, ms",
           title="Harness event-loop lag")
    ax.legend(fontsize=8)
    return _save(fig, "harness_lag.png")


def prefill(result: dict) -> Path:
    """Gap p99 and TTFT p99 at 32 for each prefill configuration."""
    names = list(result["configs"])
    labels = [n.replace("chunked_", "chunked ").replace("whole_", "whole: ").replace("_", " ") for n in names]
    fig, ax = plt.subplots(figsize=(9, 4))
    x = list(range(len(names)))
    for offset, key, label, color in ((-0.2, "gap_p99_s", "gap p99", "tab:green"),
                                      (0.2, "ttft_p99_s", "TTFT p99", "tab:blue")):
        ax.bar([i + offset for i in x], [result["configs"][n][key]["median"] * 1e3 for n in names], 0.4,
               label=label, color=color)
    ax.plot(x, [2 * result["configs"][n]["gap_p50_s"]["median"] * 1e3 for n in names], "k_", ms=20,
            label="2 x gap p50")
    ax.set_xticks(x, labels=labels, rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="ms (median of bursts)", yscale="log", title="32 streams arriving together: prefill scheduling")
    ax.legend(fontsize=8)
    return _save(fig, "prefill.png")


def overload(result: dict) -> Path:
    """Goodput and the admitted requests' TTFT p99 under the two admission rules, simulated and live."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    runs = [(m, r) for m in ("sim", "live") for r in ("waiting_limit", "deadline")]
    labels = [f"{m}\n{r.replace('_', ' ')}" for m, r in runs]
    colors = ["tab:gray" if r == "waiting_limit" else "tab:blue" for _, r in runs]
    left.bar(labels, [result[m][r]["per_s"] for m, r in runs], color=colors)
    left.set(ylabel="requests/s that met the SLO", title="Goodput")
    right.bar(labels, [result[m][r]["ttft_p99_admitted_s"] * 1e3 for m, r in runs], color=colors)
    right.set(ylabel="ms", title="TTFT p99 of admitted requests")
    return _save(fig, "overload.png")


def soak(result: dict) -> Path:
    """What the server held through the soak, against streams completed."""
    samples = result["samples"]
    done = [s["done"] for s in samples]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    axes[0].plot(done, [s.get("rss_bytes", 0) / 2**20 for s in samples], color="tab:blue")
    axes[0].set(xlabel="streams completed", ylabel="MB", title="Resident memory")
    axes[1].plot(done, [s.get("open_fds", 0) for s in samples], label="open descriptors", color="tab:gray")
    axes[1].plot(done, [s["loop_tasks"] for s in samples], label="event loop tasks", color="tab:orange")
    axes[1].set(xlabel="streams completed", title="Descriptors and tasks")
    axes[1].legend(fontsize=8)
    for key, color in (("ledger_entries", "tab:green"), ("releases", "tab:purple"), ("streams", "tab:red"),
                       ("ended_remembered", "tab:brown")):
        axes[2].plot(done, [s[key] for s in samples], label=key.replace("_", " "), color=color)
    axes[2].axhline(result["history"], color="k", ls=":", label="--history")
    axes[2].set(xlabel="streams completed", title="Per-request records")
    axes[2].legend(fontsize=7)
    return _save(fig, "soak.png")
