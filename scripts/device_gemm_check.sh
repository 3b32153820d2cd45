#!/usr/bin/env bash
# GEMM on an NVIDIA GPU in one go: correctness of the compiled kernel on the device,
# then the tuning sweep against torch.matmul (cuBLAS). Usage: scripts/device_gemm_check.sh OUTDIR
set -uo pipefail
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  python3 -m pytest tests/test_gemm_nvidia.py -m gpu -q -p no:cacheprovider 2>&1 | tail -25
  python3 -m roofline.cli tune gemm --shapes gemm-llm --out "$out/tune" --budget-s "${TUNE_BUDGET_S:-200}" --rep-ms 50
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
} 2>&1 | tee "$out/log.txt"
