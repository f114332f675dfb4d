#!/usr/bin/env bash
# Set everything up, fetch the models, start the server on 127.0.0.1:8080.
# Extra arguments go to `edgerag serve` (see `.venv/bin/edgerag serve --help`);
# `--llm NAME` (or EDGERAG_LLM) also fetches that chat model first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
llm="${EDGERAG_LLM:-}"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        --llm) llm="${args[i + 1]:-}" ;;
        --llm=*) llm="${args[i]#--llm=}" ;;
    esac
done
"$ROOT/.venv/bin/edgerag" pull ${llm:+--llm "$llm"}
exec "$ROOT/.venv/bin/edgerag" serve "$@"
