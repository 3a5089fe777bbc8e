#!/usr/bin/env bash
# Installs a build into a fresh prefix, checks that the command and the benchmark peers are
# there, then builds and runs a project that finds the package with find_package.
#   consumer.sh BUILD_DIR
set -euo pipefail
build="${1:?build dir}"
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
for f in bin/replicator share/replicator/ddp_train.py share/replicator/compare_engines.sh \
  include/replicator/replicator.h include/replicator/launch/elastic.h \
  include/replicator/rendezvous/store.h include/replicator/train/reporter.h; do
  [ -e "$tmp/prefix/$f" ] || { echo "FAIL: $f was not installed" >&2; exit 1; }
done
"$tmp/prefix/bin/replicator" --help >/dev/null
cmake -S "$here/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/consumer" -j"${JOBS:-2}" >/dev/null
"$tmp/consumer/consumer"
echo "install: package, command and peers installed; a consumer project builds and runs"
