#!/usr/bin/env bash
# Triangle ops on an NVIDIA GPU in one go: correctness of the compiled kernels on the
# device, then the benchmark against PyTorch eager, torch.compile and cuEquivariance
# (where installed), with peak memory. Usage: scripts/device_triangle_check.sh OUTDIR
set -uo pipefail
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1 PYTHONPATH=.
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  python3 -m pytest tests/test_triangle.py -m gpu -q -p no:cacheprovider 2>&1 | tail -25
  python3 -m kernels.triangle.bench device
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
} 2>&1 | tee "$out/log.txt"
