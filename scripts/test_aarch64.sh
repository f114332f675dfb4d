#!/usr/bin/env bash
# simcore for aarch64 without ARM hardware: cross-built with Debian's rustc
# (rustc-web, whose std for arm64 comes as a package), linted with its clippy,
# and its Rust tests run under qemu-aarch64 (release build: emulation is
# 10-50x slower). Linked statically: thread creation in a dynamically
# linked aarch64 binary hangs under qemu-user here. `scripts/setup.sh --dev`
# installs the packages.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET=aarch64-unknown-linux-gnu
for tool in /usr/bin/rustc /usr/bin/cargo-clippy aarch64-linux-gnu-gcc qemu-aarch64; do
    command -v "$tool" >/dev/null || { echo "missing $tool: run scripts/setup.sh --dev" >&2; exit 1; }
done
export RUSTC=/usr/bin/rustc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
args=(-p simcore --target "$TARGET" --target-dir target/aarch64)
/usr/bin/cargo-clippy clippy "${args[@]}" --all-targets --quiet -- -D warnings
# the library's and the integration tests (doctests need a rustdoc for the target)
cargo test "${args[@]}" --release --lib --tests --quiet
