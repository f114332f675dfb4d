#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv:
#   scripts/setup.sh          runtime only
#   scripts/setup.sh --dev    plus test and lint tools
# Idempotent; steps whose inputs did not change are skipped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
CACHE="${EDGERAG_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgerag}"
LLAMA_VERSION="0.3.36"
ARCH="$(uname -m)"
# Compiler flags per architecture (AMX off on x86-64, nothing elsewhere:
# scripts/llama_flags.sh); the multimodal part is not needed.
LLAMA_FLAGS="$("$ROOT/scripts/llama_flags.sh" "$ARCH")"
LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=OFF"
if [[ -n "$LLAMA_FLAGS" ]]; then
    LLAMA_CMAKE_ARGS+=" -DCMAKE_C_FLAGS='$LLAMA_FLAGS' -DCMAKE_CXX_FLAGS='$LLAMA_FLAGS'"
fi
if [[ "$ARCH" == "x86_64" ]]; then
    WHEEL_DIR="$CACHE/wheels/llama-cpp-python-noamx"
else
    WHEEL_DIR="$CACHE/wheels/llama-cpp-python-$ARCH"
fi
EXTRAS=""
[[ "${1:-}" == "--dev" ]] && EXTRAS="[dev]"
[[ "${1:-}" == "--cluster" ]] && EXTRAS="[cluster]"  # adds Ray (edgerag serve --ray-address)

say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating virtual environment $VENV"
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

installed_version() {
    "$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true
}

# 1. llama-cpp-python from a wheel built once and cached.
if [[ "$(installed_version llama-cpp-python)" != "$LLAMA_VERSION" ]]; then
    wheel="$(ls "$WHEEL_DIR"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
    if [[ -z "$wheel" ]]; then
        say "building llama-cpp-python $LLAMA_VERSION (compiles llama.cpp, several minutes)"
        mkdir -p "$WHEEL_DIR"
        tmp="$(mktemp -d)"
        CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
            "${PIP[@]}" wheel --no-cache-dir --no-deps -w "$tmp" "llama-cpp-python==$LLAMA_VERSION"
        mv "$tmp"/llama_cpp_python-*.whl "$WHEEL_DIR"/
        rm -rf "$tmp"
        wheel="$(ls "$WHEEL_DIR"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n1)"
    fi
    say "installing $(basename "$wheel")"
    "${PIP[@]}" install "$wheel"
fi

# 2. Python dependencies and the simcore extension (release build), when their inputs changed.
stamp="$VENV/.edgerag-build$EXTRAS"
inputs_hash="$(cd "$ROOT" && cat pyproject.toml Cargo.toml Cargo.lock simcore/Cargo.toml \
    $(find simcore/src -type f | sort) 2>/dev/null | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$inputs_hash" ]] \
        || ! "$VENV/bin/python" -c "import flask_app.simcore" 2>/dev/null; then
    say "installing dependencies and building simcore"
    "${PIP[@]}" install "maturin==1.16.0"
    "${PIP[@]}" install --no-build-isolation -e "$ROOT$EXTRAS"
    echo "$inputs_hash" > "$stamp"
fi
# 3. For the browser tests (--dev): Debian's Chromium and its WebDriver, driven by
#    selenium with explicit paths (selenium never downloads a driver).
if [[ -n "$EXTRAS" ]] && ! command -v chromedriver >/dev/null; then
    say "installing chromium and chromium-driver (Debian packages, for the browser tests)"
    SUDO=""
    [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# 4. For the aarch64 checks (--dev, on x86-64 Debian): a cross toolchain and an
#    emulator from Debian's packages (rustup cannot fetch targets here): simcore
#    is cross-built, linted and its tests run under qemu-aarch64.
ARM_PACKAGES=(rustc-web rust-web-clippy libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu
    libc6-dev-arm64-cross qemu-user)
if [[ "$EXTRAS" == "[dev]" && "$ARCH" == "x86_64" ]] && command -v apt-get >/dev/null \
        && ! { command -v qemu-aarch64 && command -v aarch64-linux-gnu-gcc \
               && [[ -d /usr/lib/rustlib/aarch64-unknown-linux-gnu ]] \
               && [[ -x /usr/bin/clippy-driver ]]; } >/dev/null; then
    say "installing the aarch64 cross toolchain and qemu-user (Debian packages)"
    SUDO=""
    [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
    $SUDO dpkg --add-architecture arm64
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${ARM_PACKAGES[@]}" >/dev/null
fi
# 5. For the API conformance test (--dev): schemathesis in its own environment,
#    since its hypothesis pin clashes with the test suite's.
SCHEMATHESIS_VERSION="4.32.5"
ST_VENV="$ROOT/.venv-schemathesis"
if [[ -n "$EXTRAS" ]] && [[ "$("$ST_VENV/bin/schemathesis" --version 2>/dev/null | awk '{print $NF}')" != "$SCHEMATHESIS_VERSION" ]]; then
    say "installing schemathesis $SCHEMATHESIS_VERSION in $ST_VENV (API conformance test)"
    "$PY" -m venv "$ST_VENV"
    "$ST_VENV/bin/python" -m pip --disable-pip-version-check -q install "schemathesis==$SCHEMATHESIS_VERSION"
fi
say "environment ready: $VENV"
