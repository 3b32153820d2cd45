#!/usr/bin/env bash
# The whole check of an NVIDIA GPU machine in one go, for a lease of a few minutes:
#   1. the tests marked `gpu` (compiled kernels against float64 on the device, PyTorch and JAX);
#   2. the GEMM, attention and triangle-attention tuning sweeps (CUDA-graph timing of the statically
#      checked candidates, each checked against float32 first), applied to this tree's config
#      tables so that
#   3. `ceiling device-check` benchmarks the tuned configs against cuBLAS, SDPA/FlashAttention and
#      the AlphaFold baselines, after a correctness pass of every op.
# Usage: scripts/h200_check.sh OUTDIR   -> OUTDIR/log.txt and OUTDIR/results.tgz, refreshed after
# every stage so that a run cut short still returns what it finished.
# Knobs: TEST_BUDGET_S (150), TUNE_BUDGET_S (70), ATTN_TUNE_BUDGET_S (80), TRI_TUNE_BUDGET_S (40),
# CHECK_BUDGET_S (230), MICROBENCH=--microbench. About 8-9 minutes in all.
set -uo pipefail
dest=${1:?usage: $0 OUTDIR}
work=$(mktemp -d)
mkdir -p "$dest"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
save() { cp "$work/log.txt" "$dest/log.txt"; tar czf "$dest/results.tgz" -C "$work" .; }
log() { tee -a "$work/log.txt"; }

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
  python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, torch.cuda.get_device_name())"
} 2>&1 | log
timeout "${TEST_BUDGET_S:-150}" python3 -m pytest tests/test_gemm_nvidia.py tests/test_attention_gpu.py tests/test_triangle.py \
  tests/test_attention_jax_triton.py tests/test_triangle_jax_triton.py \
  -m gpu -q -p no:cacheprovider -rs -o addopts="" --junitxml="$work/gpu-tests.xml" 2>&1 | tail -40 | log
save
python3 -m roofline.cli tune gemm --shapes gemm-llm --out "$work/tune" --budget-s "${TUNE_BUDGET_S:-70}" --rep-ms 25 --apply 2>&1 | log
cp kernels/nvidia/configs/gemm.json "$work/tune/gemm-table-after.json"
save
# Each sweep stops starting candidates at its budget; the timeout only guards against a hang.
a=${ATTN_TUNE_BUDGET_S:-80}
timeout $((a + 90)) python3 -m roofline.cli tune attention --out "$work/tune" --budget-s "$a" --rep-ms 10 --apply 2>&1 | log
cp kernels/nvidia/configs/attention.json "$work/tune/attention-table-after.json"
save
t=${TRI_TUNE_BUDGET_S:-40}
timeout $((t + 90)) python3 -m roofline.cli tune triangle-attention --out "$work/tune" --budget-s "$t" --rep-ms 10 --apply 2>&1 | log
cp kernels/nvidia/configs/triangle_attention.json "$work/tune/triangle-attention-table-after.json"
save
python3 -m roofline.cli device-check --out "$work/device-check" --budget-s "${CHECK_BUDGET_S:-230}" "${MICROBENCH:---no-microbench}" 2>&1 | log
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv 2>&1 | log
save
