#!/usr/bin/env bash
# The C/C++ flags llama.cpp is compiled with on a machine of architecture
# ARCH (default: this one's, as `uname -m` names it). x86-64 CPUs may
# advertise AMX while the VM forbids it (SIGILL in tileloadd), so AMX is
# switched off there; other architectures (aarch64 boards) need nothing, and
# their compilers reject the x86 flags. llama.cpp's own detection picks the
# rest (AVX2/AVX-512, or NEON, dotprod, i8mm, fp16).
set -euo pipefail
case "${1:-$(uname -m)}" in
    x86_64 | amd64) echo "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
    *) echo "" ;;
esac
