# The prologue every per-pass GPU script sources (from pass 28 on; earlier scripts keep
# their own copy, each the record of its run). Sets R (the run's folder, made), L (the
# call's limit in s, $LIMIT or 400), left() (the seconds to L, less $1), the Triton cache
# and unbuffered Python; writes R/sources.txt (sha1 of the package, tools, tests and
# the given script folders' Python) and R/host.txt (GPU, clocks, power limit, CPU model,
# torch and Triton versions). Give pytest `timeout -s INT`: at the limit it stops as on
# Ctrl-C and still prints the failures so far (a plain TERM leaves only its dots: pass 30,
# r1).
#   . docs/h200/prologue.sh OUT RUN [FOLDER...]      (from the repo root)
OUT=$1; R=$1/$2; shift 2; mkdir -p "$R"; L=${LIMIT:-400}
left() { local s=$(( L - ${1:-0} - SECONDS )); echo $(( s > 10 ? s : 10 )); }
export TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
(LC_ALL=C find megatron_overlay tools tests "$@" -name '*.py' | sort | xargs sha1sum \
  > "$R/sources.txt")
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv
  lscpu | grep "Model name"
  python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
} > "$R/host.txt" 2>&1
