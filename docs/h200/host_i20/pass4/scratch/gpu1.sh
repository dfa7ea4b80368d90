set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/machine.txt"
timeout 400 python3 .scratch/p4/probe2.py launch 256 8192 > "$OUT/probe2.txt" 2>&1
tail -5 "$OUT/probe2.txt"
