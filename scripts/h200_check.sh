#!/usr/bin/env bash
# The whole check of an NVIDIA GPU machine in one go, for a lease of a few minutes:
#   1. every test marked `gpu` (compiled kernels against float64 on the device, PyTorch and JAX);
#   2. the GEMM tuning sweep (CUDA-graph timing), applied to this tree's config table so that
#   3. `ceiling device-check` benchmarks the tuned configs against cuBLAS, SDPA/FlashAttention and
#      the AlphaFold baselines, after a correctness pass of every op.
# Usage: scripts/h200_check.sh OUTDIR   -> OUTDIR/log.txt, OUTDIR/results.tgz
# Knobs: TUNE_BUDGET_S (default 80), CHECK_BUDGET_S (default 270), MICROBENCH=--microbench to rerun them.
set -uo pipefail
out=${1:?usage: $0 OUTDIR}
work=$(mktemp -d)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
  python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, torch.cuda.get_device_name())"
  timeout 200 python3 -m pytest tests -m gpu -q -p no:cacheprovider -rs 2>&1 | tail -30
  python3 -m roofline.cli tune gemm --shapes gemm-llm --out "$work/tune" --budget-s "${TUNE_BUDGET_S:-80}" --rep-ms 30 --apply
  cp kernels/nvidia/configs/gemm.json "$work/tune/gemm-table-after.json"
  python3 -m roofline.cli device-check --out "$work/device-check" --budget-s "${CHECK_BUDGET_S:-270}" "${MICROBENCH:---no-microbench}"
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
} 2>&1 | tee "$work/log.txt"
cp "$work/log.txt" "$out/log.txt"
tar czf "$out/results.tgz" -C "$work" .
