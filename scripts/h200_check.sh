#!/usr/bin/env bash
# The whole check of an NVIDIA GPU machine, in two parts that each fit one command of a few minutes:
#   tune:  1. the tests marked `gpu` (compiled kernels against float64 on the device, PyTorch and JAX);
#          2. the attention, triangle-attention, trimul and skinny-GEMM tuning sweeps (CUDA-graph timing
#             of statically checked candidates, each checked against float32 first), applied to this
#             tree's config tables (copied to OUTDIR/tune/*-table-after.json);
#   check: 3. `ceiling device-check`: a correctness pass of every op, then the benchmarks of the configs
#             in force against cuBLAS, SDPA/FlashAttention and the AlphaFold baselines.
# Run `tune`, copy the tables it wrote into the tree, then run `check` (or `all` in one go).
# Usage: scripts/h200_check.sh OUTDIR [tune|check|all]  -> OUTDIR/log.txt and OUTDIR/results.tgz,
# refreshed after every stage so that a run cut short still returns what it finished.
# Knobs: TEST_BUDGET_S (100), ATTN_TUNE_BUDGET_S (110), TRI_TUNE_BUDGET_S (40), TRIMUL_TUNE_BUDGET_S (45),
# GEMM_TUNE_SHAPES (gemm-llm-skinny), TUNE_BUDGET_S (40), CHECK_BUDGET_S (230), MICROBENCH=--microbench.
# About 8 minutes for `tune` and 5 for `check`.
set -uo pipefail
dest=${1:?usage: $0 OUTDIR [tune|check|all]}
part=${2:-all}
work=$(mktemp -d)
mkdir -p "$dest"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
save() { cp "$work/log.txt" "$dest/log.txt"; tar czf "$dest/results.tgz" -C "$work" .; }
log() { tee -a "$work/log.txt"; }

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
  python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, torch.cuda.get_device_name())"
} 2>&1 | log
if [ "$part" != check ]; then
  timeout "${TEST_BUDGET_S:-100}" python3 -m pytest tests/test_gemm_nvidia.py tests/test_attention_gpu.py tests/test_triangle.py \
    tests/test_attention_jax_triton.py tests/test_triangle_jax_triton.py \
    -m gpu -q -p no:cacheprovider -rs -o addopts="" --junitxml="$work/gpu-tests.xml" 2>&1 | tail -40 | log
  save
  mkdir -p "$work/tune"
  # Each sweep stops starting candidates at its budget; the timeout only guards against a hang.
  a=${ATTN_TUNE_BUDGET_S:-110}
  timeout $((a + 90)) python3 -m roofline.cli tune attention --out "$work/tune" --budget-s "$a" --rep-ms 10 --apply 2>&1 | log
  cp kernels/nvidia/configs/attention.json "$work/tune/attention-table-after.json"
  save
  t=${TRI_TUNE_BUDGET_S:-40}
  timeout $((t + 90)) python3 -m roofline.cli tune triangle-attention --out "$work/tune" --budget-s "$t" --rep-ms 10 --apply 2>&1 | log
  cp kernels/nvidia/configs/triangle_attention.json "$work/tune/triangle-attention-table-after.json"
  save
  m=${TRIMUL_TUNE_BUDGET_S:-45}
  timeout $((m + 90)) python3 -m roofline.cli tune trimul --out "$work/tune" --budget-s "$m" --rep-ms 50 --apply 2>&1 | log
  cp kernels/nvidia/configs/triangle_multiplication.json "$work/tune/triangle-multiplication-table-after.json"
  save
  g=${TUNE_BUDGET_S:-40}
  timeout $((g + 90)) python3 -m roofline.cli tune gemm --shapes "${GEMM_TUNE_SHAPES:-gemm-llm-skinny}" --out "$work/tune" --budget-s "$g" --rep-ms 25 --apply 2>&1 | log
  cp kernels/nvidia/configs/gemm.json "$work/tune/gemm-table-after.json"
  save
fi
if [ "$part" != tune ]; then
  python3 -m roofline.cli device-check --out "$work/device-check" --budget-s "${CHECK_BUDGET_S:-230}" "${MICROBENCH:---no-microbench}" 2>&1 | log
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv 2>&1 | log
save
