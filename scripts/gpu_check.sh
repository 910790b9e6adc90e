#!/usr/bin/env bash
# The prepared GPU check: on a machine with an NVIDIA GPU (run by hand; CI never requires it), in < 10 minutes.
#   bash scripts/gpu_check.sh [OUT_DIR]
# Installs tileport with the triton extra into a fresh venv (GPU torch wheels from PyPI), runs every operator's
# suite on the GPU with `tileport verify OP --device cuda` (TileLang CUDA and Triton against the float64 golden
# and the same-dtype torch benchmark, the same report as on the CPU), then `tileport bench OP --device cuda`
# with the share of the device's copy bandwidth. Everything lands in OUT_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-gpu-check}}
mkdir -p "$OUT"
start=$(date +%s)
{
  nvidia-smi || true
  python3 -m venv .venv-gpu && . .venv-gpu/bin/activate
  pip install -q --upgrade pip
  pip install -q "torch>=2.4" && pip install -q -e ".[test,triton]"
  python -c "import torch, tilelang, triton; print(torch.__version__, torch.cuda.get_device_name(), tilelang.__version__, triton.__version__)"
  tileport doctor --json > "$OUT/doctor.json"
  for op in $(python -c "from tileport.ops.spec import specs; print(' '.join(specs()))"); do
    timeout 200 tileport verify "$op" --device cuda --level quick --no-perf --out "$OUT/$op-verify"
    echo "verify $op exit code $?"
    timeout 120 tileport bench "$op" --device cuda --threads 1 --mode fwd --mode fwdbwd \
      --shape 32x4096 --shape 4096x4096 --shape 16384x4096 --shape 16384x128 --budget 0.3 \
      --csv "$OUT/bench.csv" --out "$OUT"
    echo "bench $op exit code $?"
  done
  echo "seconds: $(( $(date +%s) - start ))"
} 2>&1 | tee "$OUT/log.txt"
