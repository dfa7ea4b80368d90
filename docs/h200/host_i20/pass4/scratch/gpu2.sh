set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/machine.txt"
git log --oneline -1 >> "$OUT/machine.txt" 2>/dev/null; git status --short >> "$OUT/machine.txt" 2>/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .venv/wheelhouse/upstream/megatron_core-0.19.2-*.whl
timeout 330 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/test_triton_gpu.py \
  tests/ops/test_triton_distill_gpu.py tests/ops/test_cuda_graphs.py tests/ops/test_batch_invariance_gpu.py 2>&1 | tee "$OUT/pytest.txt" | tail -6
timeout 150 python3 .scratch/p4/probe3.py .scratch/base619 > "$OUT/probe3.txt" 2>&1; grep -A6 "== N" "$OUT/probe3.txt"
timeout 100 python3 -m tools.bench op --baseline .scratch/base619 --methods gemm,base,ours --phases fwd \
  --sync --rounds 3 --no-grad-check --shapes "256,4096,151936;8192,4096,151936" \
  --out "$OUT/op" 2>&1 | tee "$OUT/op.log" | tail -6
