"""What the load benchmarks read off a running server process: resident memory,
open file descriptors and threads (from /proc), and latency percentiles."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessSample:
    rss_mb: float
    fds: int
    threads: int


def sample(pid: int) -> ProcessSample:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kb = int(fields["VmRSS"].split()[0])
    threads = int(fields["Threads"])
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    return ProcessSample(rss_kb / 1024, fds, threads)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary_ms(values: list[float]) -> dict[str, float]:
    return {
        "count": len(values),
        "p50_ms": round(percentile(values, 50) * 1000, 1),
        "p99_ms": round(percentile(values, 99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1) if values else float("nan"),
        "mean_ms": round(statistics.fmean(values) * 1000, 1) if values else float("nan"),
    }
