#!/usr/bin/env bash
# simcore benchmarks: every engine on the same data in one run, then the
# report (markdown table, PNG plot, target check) in benches/results/.
# Extra arguments go to pytest (e.g. -k "10000x384").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup.sh" --dev
mkdir -p benches/results
"$ROOT/.venv/bin/python" -m pytest benches/search/test_simcore_bench.py -q -p no:cacheprovider \
    --benchmark-json=benches/results/simcore.json --benchmark-columns=median,iqr,rounds "$@"
"$ROOT/.venv/bin/python" -m benches.search.report_simcore benches/results/simcore.json
