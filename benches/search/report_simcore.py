"""Turn a pytest-benchmark JSON of benches/search/test_simcore_bench.py into a
markdown table, a PNG plot and a target check.

    .venv/bin/python benches/search/report_simcore.py RESULTS.json [--out benches/results]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ENGINES = ["simcore-f32", "simcore-int8", "numpy", "faiss", "read-1t", "read-2t"]


def load(path: Path) -> dict[tuple[int, int, int], dict[str, dict[str, Any]]]:
    raw = json.loads(path.read_text())
    table: dict[tuple[int, int, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    for bench in raw["benchmarks"]:
        info = bench["extra_info"]
        key = (info["n"], info["d"], info["queries"])
        table[key][info["engine"]] = {"median": bench["stats"]["median"], **info}
    return table


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.3f}" if ms < 1 else f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def markdown(table: dict[tuple[int, int, int], dict[str, dict[str, Any]]]) -> str:
    lines = [
        "| N × d | queries | simcore f32 ms | simcore int8 ms | numpy ms | FAISS ms "
        "| read 1t / 2t ms | f32 GB/s | f32 vs read | FAISS ÷ f32 | FAISS ÷ int8 "
        "| recall@10 int8 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (n, d, q), row in sorted(table.items()):
        f32, i8 = row["simcore-f32"]["median"], row["simcore-int8"]["median"]
        faiss = row["faiss"]["median"]
        f32_bytes = row["simcore-f32"]["f32_bytes"]
        if q == 1:
            reads = table[(n, d, 1)]
            read1, read2 = reads["read-1t"]["median"], reads["read-2t"]["median"]
            read = f"{fmt_ms(read1)} / {fmt_ms(read2)}"
            vs_read = f"{f32 / min(read1, read2):.2f}×"
            gbs = f"{f32_bytes / f32 / 1e9:.1f}"
            recall = f"{row['simcore-int8'].get('recall_at_10', float('nan')):.3f}"
        else:
            read = vs_read = recall = "—"
            gbs = f"{q * f32_bytes / f32 / 1e9:.1f}"
        lines.append(
            f"| {n:,} × {d} | {q} | {fmt_ms(f32)} | {fmt_ms(i8)} "
            f"| {fmt_ms(row['numpy']['median'])} "
            f"| {fmt_ms(faiss)} | {read} | {gbs} | {vs_read} | {faiss / f32:.1f}× "
            f"| {faiss / i8:.1f}× | {recall} |"
        )
    return "\n".join(lines)


def targets(
    table: dict[tuple[int, int, int], dict[str, dict[str, Any]]],
) -> list[tuple[str, bool, str]]:
    out = []
    one = table.get((1_000_000, 384, 1))
    if one:
        f32 = one["simcore-f32"]["median"]
        read = min(one["read-1t"]["median"], one["read-2t"]["median"])
        out.append(("f32 1M×384 ≤ 1.15 × read baseline", f32 <= 1.15 * read, f"{f32 / read:.2f}×"))
        faster = f32 < one["numpy"]["median"] and f32 < one["faiss"]["median"]
        out.append(
            (
                "f32 1M×384 faster than numpy and FAISS",
                faster,
                f"{one['numpy']['median'] / f32:.1f}× numpy, "
                f"{one['faiss']['median'] / f32:.1f}× FAISS",
            )
        )
        i8 = one["simcore-int8"]["median"]
        recall = one["simcore-int8"].get("recall_at_10", 0.0)
        out.append(
            (
                "int8 1M×384 ≥ 3.5× faster than FAISS, recall ≥ 0.99",
                one["faiss"]["median"] / i8 >= 3.5 and recall >= 0.99,
                f"{one['faiss']['median'] / i8:.1f}×, recall {recall:.3f}",
            )
        )
    batch = table.get((1_000_000, 384, 64))
    if batch:
        ratio = batch["faiss"]["median"] / batch["simcore-f32"]["median"]
        out.append(("batch of 64 (f32) throughput ≥ FAISS", ratio >= 1.0, f"{ratio:.1f}×"))
    small = table.get((10_000, 384, 1))
    if small:
        ms = small["simcore-f32"]["median"] * 1000
        out.append(("10k×384 single query ≤ 0.3 ms (f32)", ms <= 0.3, f"{ms:.3f} ms"))
    return out


def plot(table: dict[tuple[int, int, int], dict[str, dict[str, Any]]], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, q in zip(axes, (1, 64), strict=True):
        keys = sorted(k for k in table if k[2] == q)
        engines = [e for e in ENGINES if all(e in table[k] for k in keys)]
        width = 0.8 / len(engines)
        for i, engine in enumerate(engines):
            ax.bar(
                [x + i * width for x in range(len(keys))],
                [table[k][engine]["median"] * 1000 for k in keys],
                width,
                label=engine,
            )
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(keys))])
        ax.set_xticklabels([f"{n // 1000}k×{d}" for n, d, _ in keys])
        ax.set_yscale("log")
        ax.set_ylabel("median ms (log)")
        ax.set_title("one query, k=10" if q == 1 else "batch of 64 queries, k=10")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("--out", type=Path, default=Path("benches/results"))
    args = parser.parse_args()
    table = load(args.results)
    args.out.mkdir(parents=True, exist_ok=True)
    md = markdown(table)
    checks = targets(table)
    check_md = "\n".join(
        f"- {'PASS' if ok else 'MISS'} — {name}: {value}" for name, ok, value in checks
    )
    (args.out / "simcore.md").write_text(md + "\n\nTargets:\n\n" + check_md + "\n")
    plot(table, args.out / "simcore.png")
    print(md)
    print()
    print(check_md)


if __name__ == "__main__":
    main()
