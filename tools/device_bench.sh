#!/usr/bin/env bash
# The benchmark runs of docs/BENCHMARKS.md ("Which figures hold", "All methods"), one device
# call each, on one H200. Run from the repository root:
#   tools/device_bench.sh protocols OUT BASE   # timing protocols compared; ours vs base (BASE:
#                                              # a folder with megatron_overlay_base) at 8192
#   tools/device_bench.sh peers OUT WHEELS     # every method, 3 shapes, twice (two processes)
# WHEELS holds the peers' wheels (verl, liger-kernel, cut-cross-entropy) and, optionally,
# cutlass_all.tar.xz: nvidia-cutlass-dsl 4.8.1 and its libs-base/-core/-cu13 wheels unpacked
# and packed as one xz tarball (Liger's SM90 path; the cu13 wheel alone is 92 MB). Made with:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d W verl==0.9.1 liger-kernel==0.8.5 \
#       cut-cross-entropy==25.1.1 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
#       nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1
#   mkdir C && for w in W/nvidia_cutlass_dsl*.whl; do unzip -q -o $w -d C; done && rm W/nvidia_*
#   tar -cf - -C C . | xz -9e --lzma2=preset=9e,dict=256MiB -T1 > W/cutlass_all.tar.xz  # 54 MiB
set -uo pipefail
MODE=$1; OUT=$2; ARG=${3:-}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
    --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' \
    | tee -a "$OUT/gpu.txt"
SHAPE8K=8192,4096,151936
case $MODE in
protocols)
    python3 tools/bench_fused_logprob.py --diagnose $SHAPE8K --methods gemm,ours --rounds 7 \
        --out "$OUT/diag" 2>&1 | tail -30
    for i in 1 2; do  # the issue's command, as it reads now, twice
        python3 tools/bench_fused_logprob.py --shapes $SHAPE8K --methods gemm,ours \
            --repeats 5 --no-grad-check --out "$OUT/issue_cmd_$i" 2>&1 | tail -4
    done
    python3 tools/bench_vs_baseline.py --baseline "$ARG" --rounds 7 --grad-shape "" \
        --fb-variant b512:BACKWARD_EXTRA_BUDGET_BYTES=536870912 \
        --fb-variant blk4096:BACKWARD_BLOCK_TOKENS=4096 --out "$OUT/vs_base" 2>&1 | tail -12
    ;;
peers)
    SITE=/tmp/site
    python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE \
        "$ARG"/*.whl || exit 1
    PYPATH=$SITE
    if [ -f "$ARG/cutlass_all.tar.xz" ]; then
        tar -xJf "$ARG/cutlass_all.tar.xz" -C $SITE && PYPATH=$SITE:$SITE/nvidia_cutlass_dsl/python_packages:$SITE/nvidia_cutlass_dsl/dsl_packages
    fi
    export PYTHONPATH=$PWD:$PYPATH
    python3 tools/bench_fused_logprob.py --host-profile $SHAPE8K --out "$OUT/host" 2>&1 | tail -3
    for i in 1 2; do
        python3 tools/bench_fused_logprob.py --out "$OUT/run$i" --rounds ${ROUNDS:-5} \
            ${BENCH_ARGS:-} 2>&1 | tail -30
    done
    ;;
*) echo "unknown mode $MODE"; exit 2 ;;
esac
# The device tool returns at most 8 files: PACK=1 leaves one tarball instead of the folder.
if [ -n "${PACK:-}" ]; then
    tar -czf "$OUT.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")" && rm -rf "$OUT"
fi
