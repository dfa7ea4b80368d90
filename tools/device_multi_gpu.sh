#!/usr/bin/env bash
# Everything issue 11 runs on 2 GPUs, in one call: for megatron-core 0.19.2 and 0.15.3
# (installed from wheels into separate --target dirs, each patched by the overlay: the
# hook on 0.15.3, the processor-name lookup on 0.19.2), tp_check --device cuda, the 2-GPU
# tests and the schedule-plan check. Full logs and JSON under OUT_DIR (flat: 8 files).
#
#   tools/device_multi_gpu.sh WHEEL_DIR OUT_DIR      # run from the repository root
set -u
WHL=$(cd "$1" && pwd); OUT=$2; mkdir -p "$OUT"
# NVLink multicast stays off (the machine's notes); keep it so in every child process
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export TRITON_CACHE_DIR=/tmp/triton-cache TORCH_EXTENSIONS_DIR=/tmp/torch-ext
{ nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton",
  triton.__version__, "gpus", torch.cuda.device_count())'; } 2>&1 | tee "$OUT/machine.txt"
summary=()
for v in 0.19.2 0.15.3; do
  site=/tmp/site-$v log=$OUT/log-$v.txt
  (
    set -x
    python3 -m pip install -q --no-index --no-deps --no-compile --target $site \
      "$WHL"/megatron_core-$v-*.whl
    export PYTHONPATH=$site:$PWD
    python3 -m megatron_overlay.cli patch --site $site
    python3 -m megatron_overlay.cli status --site $site
    op=$([ $v = 0.19.2 ] || echo --no-op-timing)   # the op does not depend on the core
    timeout 240 python3 tools/tp_check.py --device cuda --out /tmp/tp-$v $op
    cp /tmp/tp-$v/report.json "$OUT/tp_check-$v.json"
    timeout 240 python3 -m pytest -q -s -rs -p no:cacheprovider tests/core/test_multi_gpu.py
    echo "pytest rc=$?"
    timeout 150 python3 tools/schedule_plan_check.py --out /tmp/sp-$v
    cp /tmp/sp-$v/schedule_plan.json "$OUT/schedule_plan-$v.json"
    if [ $v = 0.15.3 ]; then   # past the router's NameError without TE (see the tool's doc)
      timeout 150 python3 tools/schedule_plan_check.py --define-missing-te-names --out /tmp/spt
      cp /tmp/spt/schedule_plan.json "$OUT/schedule_plan-$v-te-names.json"
    fi
  ) > "$log" 2>&1
  summary+=("$v: $(grep -E '^[0-9]+ (passed|failed)|passed|failed' "$log" | tail -1)")
done
grep -hE "^ +0\.|pytest rc|passed|failed|skipped|SKIPPED|Error" "$OUT"/log-*.txt | tail -40
printf '%s\n' "${summary[@]}"
