#!/usr/bin/env bash
# The test matrix. Each leg: a venv with one megatron-core release, patched by the overlay
# (tools/env.sh), then the tests. Core-independent tests (ops, kernels under Triton's
# interpreter) run once, in the Python 3.12 leg whose CUDA torch brings Triton.
#   tools/test_matrix.sh                 every leg
#   LEGS="0.13.1" tools/test_matrix.sh   some legs
#   PRUNE_VENVS=1 tools/test_matrix.sh   remove each leg's venv once its tests pass, so the
#                                        disk holds one venv at a time (CI: .ci/run sets it)
set -euo pipefail
cd "$(dirname "$0")/.."
legs="${LEGS:-0.12.3 0.13.1 0.15.3 0.16.1 0.19.2}"
for version in $legs; do
  venv=$(tools/env.sh "$version")
  targets=(tests/core)
  [ "$version" = "0.19.2" ] && targets+=(tests/ops tests/tools)
  echo "=== megatron-core $version: ${targets[*]}"
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${targets[@]}" "$@"
  if [ "${PRUNE_VENVS:-0}" = 1 ]; then rm -rf "$venv"; fi
done
