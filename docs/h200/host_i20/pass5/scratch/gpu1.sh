set -u
OUT=$1; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/tc CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/machine.txt"
lscpu | grep -E "Model name|^CPU\(s\)|MHz" >> "$OUT/machine.txt"
timeout 200 python3 .scratch/p5/probe5.py 256 > "$OUT/probe5_256.txt" 2>&1; sed -n 1,12p "$OUT/probe5_256.txt"
timeout 100 python3 .scratch/p5/probe5.py 8192 > "$OUT/probe5_8192.txt" 2>&1; sed -n 1,12p "$OUT/probe5_8192.txt"
