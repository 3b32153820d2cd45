#!/usr/bin/env bash
# GEMM and the microbenchmarks on an NVIDIA GPU in one go: correctness of the compiled
# kernels on the device (PyTorch and JAX), the tuning sweep against torch.matmul (cuBLAS),
# and every microbenchmark suite checked against its model.
# Usage: scripts/device_gemm_check.sh OUTDIR   (writes OUTDIR/log.txt and OUTDIR/results.tgz)
set -uo pipefail
out=${1:?usage: $0 OUTDIR}
work=$(mktemp -d)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
  python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, torch.cuda.get_device_name())"
  python3 -m pytest tests/test_gemm_nvidia.py -m gpu -q -p no:cacheprovider -rs 2>&1 | tail -25
  python3 -m roofline.cli tune gemm --shapes gemm-llm --out "$work/tune" --budget-s "${TUNE_BUDGET_S:-150}" --rep-ms 40
  timeout 240 python3 -m microbench.selfcheck --require-gpu --out "$work/microbench"
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
} 2>&1 | tee "$work/log.txt"
cp "$work/log.txt" "$out/log.txt"
tar czf "$out/results.tgz" -C "$work" .
