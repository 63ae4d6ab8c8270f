#!/usr/bin/env bash
# Run on this (networked) machine before tools/gpu_check.sh: copies what a GPU box without
# network lacks into the ignored folder .gpu-deps/ (never committed): nlohmann/json and fmt
# headers (header-only use) and GoogleTest's sources, from the Debian packages installed here.
# Carry .gpu-deps/ to the GPU machine together with the working tree.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEPS=${AMPSCOPE_DEPS_DIR:-$ROOT/.gpu-deps}

need() { [ -e "$1" ] || { echo "gpu_prepare: error: $1 is missing (run tools/install-deps.sh)" >&2; exit 2; }; }
need /usr/include/nlohmann/json.hpp
need /usr/include/fmt/format.h
need /usr/src/googletest/CMakeLists.txt

rm -rf "$DEPS"
mkdir -p "$DEPS/nlohmann/include" "$DEPS/fmt/include"
cp -r /usr/include/nlohmann "$DEPS/nlohmann/include/"
cp -r /usr/include/fmt "$DEPS/fmt/include/"
cp -r /usr/src/googletest "$DEPS/googletest"
echo "gpu_prepare: $(du -sh "$DEPS" | cut -f1) in $DEPS (nlohmann, fmt, googletest)"
