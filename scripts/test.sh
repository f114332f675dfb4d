#!/usr/bin/env bash
# Set everything up and run every check: Rust (fmt, clippy, tests), Python
# (ruff, mypy --strict, stubtest, pytest including the real-model tests).
# Extra arguments: one pytest run with them (serial) instead of the two stages.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup.sh" --dev
VENV="$ROOT/.venv"
export PYO3_PYTHON="$VENV/bin/python"

step() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

step "default models"
"$VENV/bin/edgerag" pull
"$VENV/bin/edgerag" pull --llm qwen2.5-coder-1.5b
step "cargo fmt --check"
cargo fmt --all --check
step "cargo clippy"
cargo clippy --workspace --all-targets --all-features --quiet -- -D warnings
step "cargo test"
cargo test --workspace --quiet
if [[ "$(uname -m)" == "x86_64" ]]; then
    step "simcore for aarch64: clippy, and its tests under qemu-aarch64"
    "$ROOT/scripts/test_aarch64.sh"
fi
step "ruff"
"$VENV/bin/ruff" check flask_app tests benches
"$VENV/bin/ruff" format --check flask_app tests benches
step "mypy --strict"
"$VENV/bin/mypy"
step "stubtest (simcore .pyi)"
"$VENV/bin/python" -m mypy.stubtest flask_app.simcore
run_pytest() {
    set +e
    "$VENV/bin/python" -m pytest "$@"
    local status=$?
    set -e
    if [[ $status -eq 5 ]]; then
        echo "pytest collected no tests" >&2
        status=0
    fi
    return $status
}
if (($#)); then
    step "pytest $*"
    run_pytest "$@"
else
    # The tests that do not load the real models run on one worker per core
    # (each test file on one worker, so its module fixtures are built once);
    # the real-model tests run one at a time after them: two llama.cpp
    # contexts on the same cores would each spin-wait on the other's threads.
    WORKERS="$(nproc)"
    if ((WORKERS > 4)); then WORKERS=4; fi
    step "pytest: the tests without the real models, $WORKERS workers"
    run_pytest -m "not real_model" --numprocesses "$WORKERS" --dist loadfile
    step "pytest: the real-model tests, one at a time"
    run_pytest -m real_model
fi
step "pytest: the three surfaces' contract tests on a 2-node local Ray cluster"
# moorcheh-edge's over-a-socket variant tests waitress's transport, which the
# store behind it does not change: the stage above runs it
run_pytest tests/test_moorcheh_api.py tests/test_lucidworks.py tests/test_engine.py --store cluster \
    -k "not socket"
