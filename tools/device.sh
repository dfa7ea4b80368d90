#!/usr/bin/env bash
# The GPU runs of docs/BENCHMARKS.md, one device call each: tools/device.sh MODE ARGS... OUT
#   verify WHEELS       0.19.2 through the overlay's wheel and the pin (the README's cluster
#                       route): every `gpu` test (VERIFY_TESTS: some), the demo (DEMO=0
#                       skips it; 1 or 2 GPUs)
#   checks WHEELS BASE  the Triton/CUDA-graph/invariance tests, `bench op --baseline BASE`
#   protocols BASE      `bench op --diagnose`, the issue's command twice, two fb variants
#   peers PEER_WHEELS   `bench op --host-profile`; every method, 3 shapes, twice (ROUNDS,
#                       BENCH_ARGS)
#   hybrid WHEELS       per upstream wheel: overlay wheel, status, `bench model --model hybrid`
#   multi-gpu WHEELS    0.19.2 and 0.15.3 patched: the 2-GPU tests (multi_gpu,
#                       tp_matches_tp1, schedule_plan); `bench tp` (2 GPUs)
#   heads               `bench op`: bf16/TF32/fp32 heads and ours, flat/peaked logits, T = 1/0.7,
#                       sampled labels, forward (ROUNDS)
#   modes WHEELS        issue 18's precision modes: their GPU tests (and graphs, no-sync,
#                       invariance), SWEEP="fp32_hidden fp32_weight": the mixed configs' sweep
#                       for those operands, `bench op` of each mode
#                       against the bf16 GEMM (SHAPES, ROUNDS, METHODS; OP=0 skips it, TESTS=0 the
#                       tests)
#   distill WHEELS      issue 20: the top-k / logits-at / invariance / graph GPU tests
#                       (TESTS=0 skips; ~6 min on a fresh machine), `bench distill --sync`
#                       (DISTILL=0 skips; ~4 min; SHAPES="N,H,V ...", METHODS: its --shapes,
#                       --methods; the log-prob op's forward and fwd+bwd are among its
#                       methods), `bench op --sync` of gemm and ours (OP=1
#                       runs it); both protocols (ROUNDS; SYNC_CALLS: its --sync-calls). Tests and benchmark together pass
#                       one call's 10 minutes: run them as two calls. BASE=DIR (holding
#                       megatron_overlay_base, another commit's package): both benchmarks
#                       with --baseline, base beside ours in one process (host times
#                       compare only so)
#   suite WHEELS        every one-GPU `gpu` test, 0.19.2 through the overlay's wheel and the
#                       pin, in four pytest processes at once (~6 min on an H100; one
#                       process passes one call's 10 minutes; PART_TIMEOUT each, default 500 s;
#                       SUITE_A_K: a -k selection of the batch-invariance file's tests)
#   smoke WHEELS        every GPU subcommand of `python -m tools.bench`, tiny, one GPU (~3 min)
# WHEELS holds upstream's megatron_core-<release>-*.whl; PEER_WHEELS the peers' wheels
# (docs/BENCHMARKS.md says how they are made).
# PACK=1 leaves OUT as one tarball (the device tool returns a limited number of files).
set -u
MODE=$1; shift
OUT=${*: -1}; mkdir -p "$OUT"
# NVLink multicast stays off (the machine's notes); keep it so in every child process
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache PYTHONPATH=$PWD
{ nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,power.draw,power.limit \
    --format=csv; python3 -c 'import torch, triton; print("torch", torch.__version__,
  "triton", triton.__version__, "gpus", torch.cuda.device_count())'; } 2>&1 | tee "$OUT/machine.txt"
bench() { python3 -m tools.bench "$@"; }
pytest_for() {  # SECONDS ARGS...: pytest, stopped at SECONDS by SIGINT as on Ctrl-C, so
  # that it still prints the failures so far (a plain TERM leaves only its dots: pass 30,
  # r1); killed 20 s later if it hangs
  local limit=$1; shift
  timeout -s INT -k 20 "$limit" python3 -m pytest "$@"
}
install_upstream() {  # RELEASE WHEELS SITE: upstream's wheel, as it is
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$3" \
    "$2"/megatron_core-"$1"-*.whl
}
install_overlay_wheel() {  # RELEASE WHEELS SITE: the overlay's wheel of it, through the pin
  PYTHONPATH=$PWD python3 -m megatron_overlay.cli wheel "$1" \
    --from "$2"/megatron_core-"$1"-*.whl --out /tmp/wheelhouse-"$1" 2>&1 | tee -a "$OUT/status.txt"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$3" \
    --find-links /tmp/wheelhouse-"$1" "megatron-core==$1" 2>&1 | tee -a "$OUT/status.txt"
  PYTHONPATH=$3:$PWD python3 -m megatron_overlay.cli status --site "$3" 2>&1 |
    tee -a "$OUT/status.txt"
  echo "status rc=${PIPESTATUS[0]}" | tee -a "$OUT/status.txt"
}
SHAPE8K=8192,4096,151936
case $MODE in
verify)
  WHL=$(cd "$1" && pwd); site=/tmp/site-overlay-wheel
  install_overlay_wheel 0.19.2 "$WHL" $site
  export PYTHONPATH=$site:$PWD
  # VERIFY_TESTS: a part of them (153 `gpu` tests take a fresh H100 past one call's 10
  # minutes, 2026-12-05); DEMO=0 skips the demo
  pytest_for "${PYTEST_TIMEOUT:-330}" -q -p no:cacheprovider -rs -m gpu \
    ${VERIFY_TESTS:-tests/ops tests/core/test_multi_gpu.py} 2>&1 | tee "$OUT/pytest.txt" |
    tail -25
  [ "${DEMO:-1}" = 0 ] ||
    timeout 100 python3 -m megatron_overlay.cli demo --repeats 3 2>&1 | tee "$OUT/demo.txt" |
    tail -12
  ;;
checks)
  install_upstream 0.19.2 "$1" /tmp/site || exit 1
  export PYTHONPATH=/tmp/site:$PWD
  CUDA_VISIBLE_DEVICES=${GPUS:-0,1} python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
    tests/ops/test_cuda_graphs.py tests/ops/test_batch_invariance_gpu.py \
    tests/ops/test_triton_gpu.py 2>&1 | tee "$OUT/pytest.txt" | tail -25
  CUDA_VISIBLE_DEVICES=0 bench op --baseline "$2" --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tail -12
  ;;
protocols)
  bench op --diagnose $SHAPE8K --methods gemm,ours --rounds 7 --out "$OUT/diag" 2>&1 | tail -30
  for i in 1 2; do  # the issue's command, as it reads now, twice
    bench op --shapes $SHAPE8K --methods gemm,ours --repeats 5 --no-grad-check \
      --out "$OUT/issue_cmd_$i" 2>&1 | tail -4
  done
  bench op --baseline "$1" --rounds 7 --grad-shape "" \
    --fb-variant b512:BACKWARD_EXTRA_BUDGET_BYTES=536870912 \
    --fb-variant blk4096:BACKWARD_BLOCK_TOKENS=4096 --out "$OUT/vs_base" 2>&1 | tail -12
  ;;
peers)
  SITE=/tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE "$1"/*.whl || exit 1
  PYPATH=$SITE
  if [ -f "$1/cutlass_all.tar.xz" ]; then
    tar -xJf "$1/cutlass_all.tar.xz" -C $SITE &&
      PYPATH=$SITE:$SITE/nvidia_cutlass_dsl/python_packages:$SITE/nvidia_cutlass_dsl/dsl_packages
  fi
  export PYTHONPATH=$PWD:$PYPATH
  bench op --host-profile $SHAPE8K --out "$OUT/host" 2>&1 | tail -3
  for i in 1 2; do
    bench op --out "$OUT/run$i" --rounds ${ROUNDS:-5} ${BENCH_ARGS:-} 2>&1 | tail -30
  done
  ;;
hybrid)
  WHL=$(cd "$1" && pwd)
  for upstream in "$WHL"/megatron_core-*.whl; do
    release=$(basename "$upstream" | cut -d- -f2); site=/tmp/site-$release
    install_overlay_wheel "$release" "$WHL" "$site"
    mkdir -p "$OUT/$release"
    PYTHONPATH=$site:$PWD timeout 240 python3 -m tools.bench model --model hybrid \
      --out "$OUT/$release" > "$OUT/$release/log.txt" 2>&1
    echo "hybrid $release rc=$?" | tee -a "$OUT/status.txt"
    tail -40 "$OUT/$release/log.txt"
  done
  ;;
multi-gpu)
  WHL=$(cd "$1" && pwd); summary=()
  export PYTHONWARNINGS=ignore TORCH_EXTENSIONS_DIR=/tmp/torch-ext
  for v in 0.19.2 0.15.3; do
    site=/tmp/site-$v log=$OUT/log-$v.txt
    (
      set -x
      install_upstream $v "$WHL" $site
      export PYTHONPATH=$site:$PWD
      python3 -m megatron_overlay.cli patch --site $site
      python3 -m megatron_overlay.cli status --site $site
      pytest_for 480 -q -s -rs -p no:cacheprovider tests/core/test_multi_gpu.py \
        tests/core/test_tp_matches_tp1.py tests/core/test_schedule_plan.py
      echo "pytest rc=$?"
      # the op does not depend on the core: one TP timing per machine
      [ $v = 0.15.3 ] || timeout 240 python3 -m tools.bench tp --no-profile --out "$OUT/tp"
    ) > "$log" 2>&1
    summary+=("$v: $(grep -E '^[0-9]+ (passed|failed)|passed|failed' "$log" | tail -1)")
  done
  grep -hE "schedule plan|pytest rc|passed|failed|skipped|SKIPPED|Error|TP=" "$OUT"/log-*.txt |
    tail -40
  printf '%s\n' "${summary[@]}"
  ;;
heads)
  for logits in iid peaked; do for t in 1 0.7; do
    bench op --methods gemm,materialized,tf32_head,fp32_head,ours --logits $logits \
      --labels sampled --temperature $t --phases fwd --rounds ${ROUNDS:-5} --no-grad-check \
      --out "$OUT/$logits-T$t" 2>&1 | tail -7
  done; done
  ;;
modes)
  install_upstream 0.19.2 "$1" /tmp/site || exit 1
  export PYTHONPATH=/tmp/site:$PWD CUDA_VISIBLE_DEVICES=0
  [ "${TESTS:-1}" = 0 ] || pytest_for "${PYTEST_TIMEOUT:-330}" -q -s -rs \
    -p no:cacheprovider -m gpu tests/ops/test_head_precision.py tests/ops/test_cuda_graphs.py \
    tests/ops/test_batch_invariance_gpu.py tests/ops/test_triton_gpu.py \
    tests/ops/test_triton_distill_gpu.py 2>&1 | tee "$OUT/pytest.txt" |
    grep -E "ours|passed|failed|Error|assert" | tail -40
  for operands in ${SWEEP:-}; do  # e.g. SWEEP="fp32_hidden fp32_weight"
    bench op --sweep $SHAPE8K --sweep-operands $operands --out "$OUT/sweep" 2>&1 | tail -16
  done
  [ "${OP:-1}" = 0 ] || bench op ${SHAPES:+--shapes "$SHAPES"} --rounds ${ROUNDS:-3} \
    --no-grad-check --out "$OUT/op" \
    --methods ${METHODS:-gemm,ours,ours_bf16_logits,ours_fp32_hidden,ours_fp32_weight} 2>&1 |
    tail -20
  ;;
distill)
  install_upstream 0.19.2 "$1" /tmp/site || exit 1
  export PYTHONPATH=/tmp/site:$PWD CUDA_VISIBLE_DEVICES=0
  [ "${TESTS:-1}" = 0 ] || pytest_for "${PYTEST_TIMEOUT:-480}" -q -rs \
    -p no:cacheprovider -m gpu tests/ops/test_triton_distill_gpu.py \
    tests/ops/test_batch_invariance_gpu.py tests/ops/test_cuda_graphs.py \
    tests/ops/test_triton_gpu.py 2>&1 | tee "$OUT/pytest.txt" | tail -15
  # shlex-free word splitting on purpose: SHAPES="N,H,V N,H,V ..."
  [ "${DISTILL:-1}" = 0 ] || bench distill --sync --rounds ${ROUNDS:-5} \
    ${SYNC_CALLS:+--sync-calls $SYNC_CALLS} \
    ${SHAPES:+--shapes $SHAPES} ${METHODS:+--methods "$METHODS"} \
    ${BASE:+--baseline "$BASE"} --out "$OUT/distill" 2>&1 |
    grep -E "k=|gemm|logprob|done" | tail -80
  [ -f "$OUT/distill/table.md" ] && cat "$OUT/distill/table.md"  # the run's tables
  [ "${OP:-0}" = 0 ] || bench op --sync --methods gemm,${BASE:+base,}ours \
    --rounds ${ROUNDS:-5} ${BASE:+--baseline "$BASE"} --no-grad-check --out "$OUT/op" 2>&1 |
    tail -12
  ;;
suite)
  WHL=$(cd "$1" && pwd); site=/tmp/site-overlay-wheel
  install_overlay_wheel 0.19.2 "$WHL" $site > /dev/null
  grep -q "status rc=0" "$OUT/status.txt" || { tail -5 "$OUT/status.txt"; exit 1; }
  export PYTHONPATH=$site:$PWD
  part() {  # NAME FILES...: one pytest process, its log OUT/pytest_NAME.txt
    local name=$1; shift
    pytest_for "${PART_TIMEOUT:-500}" -q -p no:cacheprovider -rs -m gpu "$@" \
      > "$OUT/pytest_$name.txt" 2>&1
    echo "part $name rc=$?" >> "$OUT/pytest_$name.txt"
  }
  # the batch-invariance file alone: it took one process to 330-500 s on a fresh H100;
  # SUITE_A_K: a pytest -k expression that runs a part of it (where a call is short)
  part a tests/ops/test_batch_invariance_gpu.py ${SUITE_A_K:+-k "$SUITE_A_K"} &
  part b tests/ops/test_cuda_graphs.py tests/ops/test_head_precision.py &
  part c tests/ops/test_triton_distill_gpu.py &
  part d tests/ops/test_triton_gpu.py tests/core/test_multi_gpu.py &
  wait
  tail -1 "$OUT/status.txt"
  for p in a b c d; do
    echo "== $p"; grep -E "passed|failed|error|FAILED|ERROR|rc=" "$OUT/pytest_$p.txt" | tail -12
  done
  ;;
smoke)
  install_upstream 0.19.2 "$1" /tmp/site || exit 1
  export PYTHONPATH=/tmp/site:$PWD CUDA_VISIBLE_DEVICES=0
  python3 -m megatron_overlay.cli patch --site /tmp/site > "$OUT/status.txt" 2>&1
  quick=(--rounds 2 --burst-ms 20 --heat-s 0)
  mkdir -p /tmp/smoke-base && cp -r megatron_overlay /tmp/smoke-base/megatron_overlay_base
  runs=(
    "op --shapes 2048,1024,32768 --methods gemm,materialized,ours ${quick[*]} --breakdown"
    "op --diagnose 2048,1024,32768 --methods gemm,ours --protocols single,burst,graph --rounds 2"
    "op --sweep 1024,512,16384"
    "op --host-profile 1024,512,16384"
    "distill --shapes 1024,512,16384 --ks 1,8 ${quick[*]} --sweep 1024,512,16384,8 --sweep-splits 1,2"
    "op --baseline /tmp/smoke-base --shapes 2048,1024,32768 --grad-shape 1024,256,4096 --fb-variant b64:BACKWARD_EXTRA_BUDGET_BYTES=67108864 --breakdown ${quick[*]}"
    "model --layers 2 --seq 512 --vocab 32768 --rounds 2"
    "model --model hybrid --seq 512 --vocab 32768 --rounds 2"
    "tp --worlds 1 --shape 2048,1024,32768 --rounds 2"
  )
  for i in "${!runs[@]}"; do
    start=$SECONDS
    timeout 120 python3 -m tools.bench ${runs[$i]} --out "$OUT/$i" > "$OUT/$i.log" 2>&1
    echo "rc=$? $((SECONDS - start))s bench ${runs[$i]}" | tee -a "$OUT/summary.txt"
    [ -f "$OUT/$i.log" ] && tail -3 "$OUT/$i.log"
  done
  ;;
*) echo "unknown mode $MODE (verify, checks, protocols, peers, hybrid, multi-gpu, heads, modes, distill, suite, smoke)"; exit 2 ;;
esac
if [ -n "${PACK:-}" ]; then
  tar -czf "$OUT.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")" && rm -rf "$OUT"
fi
