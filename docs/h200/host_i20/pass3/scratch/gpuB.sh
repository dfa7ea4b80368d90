set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/machine.txt"
timeout 150 python3 -m tools.bench op --baseline .scratch/basehead --methods gemm,base,ours --phases fwd \
  --sync --rounds 3 --no-grad-check --shapes "256,4096,151936;8192,4096,151936;32768,4096,151936" \
  --out "$OUT/op" 2>&1 | tee "$OUT/op.log" | tail -8
timeout 250 python3 -m tools.bench distill --sync --rounds 3 --ks 8,32 --methods topk_ours,at_ours \
  --phases fwd --baseline .scratch/basehead --shapes 8192,4096,151936 32768,4096,151936 \
  --out "$OUT/distill" 2>&1 | tee "$OUT/distill.log" | grep -E "k=|gemm|Error" | tail -12
PROBE_FNS=topk32 timeout 45 python3 .scratch/probe1.py a > "$OUT/probe_a.txt" 2>&1
timeout 60 python3 .scratch/probe1.py b > "$OUT/probe_b.txt" 2>&1
tail -3 "$OUT/probe_b.txt"
