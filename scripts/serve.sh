#!/usr/bin/env bash
# Set everything up, fetch the default models, start the server on 127.0.0.1:8080.
# Extra arguments go to `edgerag serve` (see `.venv/bin/edgerag serve --help`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/.venv/bin/edgerag" pull
exec "$ROOT/.venv/bin/edgerag" serve "$@"
