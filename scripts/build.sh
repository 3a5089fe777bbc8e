#!/usr/bin/env bash
# Configures and builds one flavour of the project: build.sh [DIR] [extra cmake args...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/build}"
shift || true
# ccache (installed by scripts/install_deps.sh) keeps compiled objects between builds and
# clones: paths under the repository are hashed relative to it, and the LibTorch targets'
# precompiled header is cached too (its sloppiness settings). A machine that built the
# tree before rebuilds a fresh clone's LibTorch translation units in seconds, not minutes.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "${launcher[@]}" "$@" \
  >/dev/null
cmake --build "$dir" -j"${JOBS:-2}"
