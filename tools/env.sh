#!/usr/bin/env bash
# Create (or reuse) .venv/core-<VERSION>: torch, megatron-core==<VERSION> installed through
# the overlay's own wheel (the cluster route of the README), this project (editable).
# Prints the venv path last.
#   tools/env.sh [VERSION]        VERSION defaults to $MEGATRON_CORE_VERSION, then 0.13.1
#   VENV_ROOT=DIR tools/env.sh    venvs under DIR instead of .venv
# Wheels: .venv/wheelhouse/upstream holds upstream's wheel of each release set up here (the
# tests build from it too), .venv/wheelhouse the overlay's.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-${MEGATRON_CORE_VERSION:-0.13.1}}"
# A release the overlay serves (its own patch set, or a yanked one with the same files:
# docs/compatibility.json), checked before any venv or download exists
if ! [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
   { [ ! -f "patches/$version/manifest.json" ] &&
     ! grep -qF "\"release\": \"$version\"" docs/compatibility.json; }; then
  echo "tools/env.sh: megatron-core $version is not a release the overlay serves; these are:" \
    $(grep -o '"release": "[0-9.]*"' docs/compatibility.json | cut -d'"' -f4 | sort -V) >&2
  exit 2
fi
venv="${VENV_ROOT:-.venv}/core-$version"
wheelhouse=".venv/wheelhouse"
minor=$(echo "$version" | cut -d. -f2)
if [ "$minor" -ge 17 ]; then  # megatron-core >= 0.17 needs Python >= 3.12
  python="${PYTHON312:-$(pyenv root 2>/dev/null)/versions/3.12.1/bin/python}"
  [ -x "$python" ] || python=python3.12
else
  python="${PYTHON311:-python3.11}"
fi
stamp="$venv/.overlay-ready"
# Disk a set-up needs at its peak (GiB): the venv, plus on 3.12 the CUDA torch wheels pip
# downloads into $TMPDIR before unpacking them (measured: 1.1 GiB venv on 3.11; 4.8 GiB
# venv and a 6.8 GiB peak on 3.12). pip's cache is off: it would keep a second copy.
if [ "$minor" -ge 17 ]; then need_gib=8; else need_gib=2; fi
free_gib() { mkdir -p "$1" && df -Pk "$1" | awk 'NR==2 {printf "%d", $4 / 1048576}'; }
if [ ! -f "$stamp" ] || [ setup.py -nt "$stamp" ] || [ "patches/$version/manifest.json" -nt "$stamp" ]; then
  echo "setting up $venv (megatron-core $version, $($python --version))" >&2
  have_gib=$(free_gib "$(dirname "$venv")")
  if [ "$have_gib" -lt "$need_gib" ]; then
    echo "tools/env.sh: setting up $venv needs about $need_gib GiB free on its disk;" \
      "$have_gib GiB are free. Free some (old venvs under ${VENV_ROOT:-.venv}, clones of" \
      "this repo) or set VENV_ROOT and TMPDIR to a larger disk." >&2
    exit 1
  fi
  "$python" -m venv "$venv"
  pip=("$venv/bin/python" -m pip -q --disable-pip-version-check --no-cache-dir)
  # 1. the overlay's wheel of this release, from upstream's (the README's cluster route)
  mkdir -p "$wheelhouse/upstream"
  ls "$wheelhouse/upstream/megatron_core-$version-"*.whl >/dev/null 2>&1 ||
    "${pip[@]}" download --no-deps --only-binary=:all: -d "$wheelhouse/upstream" \
      "megatron-core==$version"
  upstream=$(ls "$wheelhouse/upstream/megatron_core-$version-"*.whl | head -n 1)
  PYTHONPATH=. "$venv/bin/python" -m megatron_overlay.cli wheel "$version" --from "$upstream" \
    --out "$wheelhouse" >&2
  # 2. torch 2.13.0: a local CPU wheel on Python 3.11; the registry's CUDA build on 3.12
  # (it runs on CPU). megatron-core 0.13.x forgets to declare `packaging`. The pin
  # megatron-core==X selects X+overlay.2 from the wheelhouse; --force-reinstall replaces a
  # core an earlier set-up left here.
  "${pip[@]}" install torch==2.13.0 packaging --find-links "$wheelhouse" "megatron-core==$version"
  "${pip[@]}" install --no-deps --force-reinstall --find-links "$wheelhouse" \
    "megatron-core==$version"
  "${pip[@]}" install -e ".[test]"
  touch "$stamp"
fi
# The core must be ready (patched, or native with the name lookup); exit code 1 if not.
"$venv/bin/megatron-overlay" status >&2
echo "$venv"
