#!/usr/bin/env bash
# Create (or reuse) .venv/core-<VERSION>: torch, megatron-core==<VERSION>, this project
# (editable), and the overlay's patch applied to that core. Prints the venv path last.
#   tools/env.sh [VERSION]        VERSION defaults to $MEGATRON_CORE_VERSION, then 0.13.1
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-${MEGATRON_CORE_VERSION:-0.13.1}}"
venv=".venv/core-$version"
minor=$(echo "$version" | cut -d. -f2)
if [ "$minor" -ge 17 ]; then  # megatron-core >= 0.17 needs Python >= 3.12
  python="${PYTHON312:-$(pyenv root 2>/dev/null)/versions/3.12.1/bin/python}"
  [ -x "$python" ] || python=python3.12
else
  python="${PYTHON311:-python3.11}"
fi
stamp="$venv/.overlay-ready"
if [ ! -f "$stamp" ] || [ setup.py -nt "$stamp" ]; then
  echo "setting up $venv (megatron-core $version, $($python --version))" >&2
  "$python" -m venv "$venv"
  pip=("$venv/bin/python" -m pip -q --disable-pip-version-check)
  # torch 2.13.0: a local CPU wheel on Python 3.11; the registry's CUDA build on 3.12
  # (it runs on CPU). megatron-core 0.13.x forgets to declare `packaging`.
  "${pip[@]}" install torch==2.13.0 "megatron-core==$version" packaging
  "${pip[@]}" install -e ".[test]"
  touch "$stamp"
fi
# Idempotent: a no-op when the core is already patched.
"$venv/bin/megatron-overlay" patch >&2
echo "$venv"
