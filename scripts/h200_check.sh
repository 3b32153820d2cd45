#!/usr/bin/env bash
# The check of an NVIDIA GPU machine, in parts that each fit one command of under ten minutes:
#   main  (default, about 9.5 minutes):
#         1. the tests marked `gpu` (compiled kernels against float64 on the device, PyTorch and JAX);
#         2. the attention, triangle-attention and trimul tuning sweeps (CUDA-graph timing of
#            statically checked candidates, each checked against float32 first), applied to this
#            tree's tuned tables (copies in OUTDIR's tune/*-table-after.json);
#         3. `ceiling device-check` of those three ops with the tables just applied: a correctness
#            pass, then the benchmarks against SDPA/FlashAttention and the AlphaFold baselines.
#   gemm  (about 4 minutes): the skinny-GEMM sweep on the benchmark's own skinny shapes, applied,
#         then `ceiling device-check --op gemm` against cuBLAS (and the FP8 suite against cuBLASLt).
#   gemm-fp8 (about 6.5 minutes, at most 8): 1. the FP8 and small-M GEMM tests marked `gpu` (compiled
#         kernels against float64 of the dequantized inputs, against torch._scaled_mm, poisoned
#         outputs); 2. the FP8 sweep (ceiling tune gemm-fp8: per shape of fp8-device and scaling,
#         every statically valid candidate against torch._scaled_mm / dequantize-then-cuBLAS),
#         applied to kernels/nvidia/tables/H200/gemm_fp8.json; 3. the small-M bf16 sweep on the decode shapes (split-K
#         and stream-K candidates), applied to kernels/nvidia/tables/H200/gemm.json; 4. `ceiling device-check --op gemm`
#         with the tables just applied: the bf16 and FP8 suites, the small-M rows beside their HBM floor.
#   check (about 7 minutes): `ceiling device-check` of every op with the tables in the tree.
#   pair  (about 7.5 minutes): the AlphaFold-3 pair stack. 1. the `gpu` test of a Boltz Pairformer pair
#         stack patched with ceiling.triangle against the unpatched one (float32 to 1e-5, bf16 autocast
#         by the error-ratio rule, outputs and every parameter gradient, a padded tail of tokens);
#         2. short triangle-attention and trimul tuning sweeps, applied; 3. `ceiling bench pair_stack`
#         (one Boltz-2 PairformerLayer pair stack, forward+backward, N = 384 and 768, bf16 autocast:
#         ours patched, and patched under torch.compile, against Boltz eager, compiled and
#         cuEquivariance via use_kernels=True; time and peak memory); 4. the triangle-attention and
#         trimul benchmarks.
#         It needs Boltz and, for the cuEquivariance baseline, cuEquivariance on the machine, which
#         reaches no package index: build the folders here and carry them (`run`'s carry, ignored
#         paths, 64 MiB per call). Boltz (4 MB) goes in one call:
#           pip install --no-deps --target .pair-deps/boltz boltz==2.2.1 einops
#         cuEquivariance's CUDA 13 wheels are about 74 MB, over one call's carry, so they come over two
#         calls into one --target folder (PYVER: the machine's Python, e.g. 3.12; the first wheel set
#         also holds the small dependencies the device's torch lacks):
#           pip download --no-deps --python-version PYVER --only-binary=:all: -d .pair-wheels/1 \
#             cuequivariance==0.13.0 cuequivariance-torch==0.13.0 cuequivariance-ops-cu13==0.13.0 \
#             opt-einsum tqdm platformdirs                                               # ~45 MB
#           pip download --no-deps --python-version PYVER --only-binary=:all: -d .pair-wheels/2 \
#             cuequivariance-ops-torch-cu13==0.13.0                                       # ~29 MB
#         call 1, carry [".pair-deps", ".pair-wheels/1"]:
#           pip install --no-deps --target .pair-deps/cueq .pair-wheels/1/*.whl
#         call 2, carry [".pair-wheels/2"] only (carrying .pair-deps again would replace the folder the
#         first call filled; uncarried ignored paths stay on the machine while it is held):
#           pip install --no-deps --target .pair-deps/cueq .pair-wheels/2/*.whl && scripts/h200_check.sh OUT pair
#         The part puts $PAIR_DEPS/boltz and $PAIR_DEPS/cueq (PAIR_DEPS=.pair-deps) on PYTHONPATH; without
#         Boltz it stops after saying so, without cuEquivariance that baseline is skipped with the reason.
#   attention-gluon (about 7 minutes): the Gluon Hopper attention (kernels/nvidia/gluon):
#         1. its tests marked `gpu` (forward and backward against float64 by the error-ratio rule:
#            odd lengths, GQA/MQA, causal with q_len != k_len, rows that see no key, more tiles
#            than SMs, head dim 256, fp16, the exp2-split and no-ping-pong configs);
#         2. `ceiling bench attention --shapes attention-gluon`: both Hopper implementations
#            against SDPA with its own backend choice and with flash, cuDNN and efficient pinned;
#         3. the Gluon config sweep (ceiling.tuning.attention.gluon --apply) over the statically
#            checked candidates (kernels/spaces/candidates/attention_gluon.sm_90a.json): winners go
#            into the GPU model's table (kernels/nvidia/tables/H200/attention_gluon.json), with
#            provenance, only where correct and faster than the Triton kernels (copy in OUTDIR's
#            tune/attention_gluon-table-after.json).
# A later command starts from the tree as committed, not from what an earlier one applied on the
# machine: commit the tables a run returns before relying on them in another.
# Usage: scripts/h200_check.sh OUTDIR [main|gemm|gemm-fp8|check|pair|attention-gluon]  -> OUTDIR/log.txt and
# OUTDIR/results.tgz, refreshed after every stage so that a run cut short still returns what it finished;
# exit status 2 for an unknown part, 3 on a machine without a GPU (before any stage).
# Knobs: TEST_BUDGET_S (90), ATTN_TUNE_BUDGET_S (100), TRI_TUNE_BUDGET_S (35), TRIMUL_TUNE_BUDGET_S (40),
# GEMM_TUNE_SHAPES (gemm-llm-skinny), TUNE_BUDGET_S (40), FP8_TUNE_BUDGET_S (100), SWEEP_GUARD_S
# (seconds a sweep may run past its budget before it is killed: 90; 30 for gemm-fp8), CHECK_BUDGET_S
# (150 for main, 120 for gemm, 160 for gemm-fp8, 400 for check), MICROBENCH=--microbench (check only);
# for pair: PAIR_DEPS (.pair-deps), PAIR_TEST_BUDGET_S (90), TRI_TUNE_BUDGET_S (40) and TRIMUL_TUNE_BUDGET_S
# (25), PAIR_BENCH_BUDGET_S (140), TRI_BENCH_BUDGET_S (35); for attention-gluon: GLUON_TEST_BUDGET_S (120),
# GLUON_BENCH_BUDGET_S (120), GLUON_TUNE_BUDGET_S (110).
set -uo pipefail
dest=${1:?usage: $0 OUTDIR [main|gemm|gemm-fp8|check|pair|attention-gluon]}
part=${2:-main}
work=$(mktemp -d)
mkdir -p "$dest" "$work/tune"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
save() { cp "$work/log.txt" "$dest/log.txt"; tar czf "$dest/results.tgz" -C "$work" .; }
log() { tee -a "$work/log.txt"; }
# Each sweep stops starting candidates at its budget; the timeout only guards against a hang.
sweep() {  # sweep OP BUDGET_S TABLE [extra args]: TABLE is the table the sweep applies to, under kernels/nvidia/tables/
  local op=$1 budget=$2 table=$3
  shift 3
  timeout $((budget + ${SWEEP_GUARD_S:-90})) python3 -m ceiling.roofline.cli tune "$op" --out "$work/tune" --budget-s "$budget" --apply "$@" 2>&1 | log
  local file="kernels/nvidia/tables/$table"
  cp "$file" "$work/tune/$(basename "${table%.json}")-table-after.json"
  save
}
bench() {  # bench BUDGET_S OP... : `ceiling bench` on the device suite; the timeout only guards against a hang
  local budget=$1
  shift
  timeout $((budget + 150)) python3 -m ceiling.roofline.cli bench "$@" --shapes device --out "$work/bench" --budget-s "$budget" \
    --ceilings "$work/bench/ceilings.json" 2>&1 | log
  save
}
check() {  # check BUDGET_S [device-check args]
  local budget=$1
  shift
  python3 -m ceiling.roofline.cli device-check --out "$work/device-check" --budget-s "$budget" "$@" 2>&1 | log
  save
}

# The import name is `ceiling` (pyproject.toml maps this tree's folders onto it): an editable
# install, offline (--no-deps, no build isolation: setuptools comes with torch on Python 3.12), so the
# sweeps' --apply writes into this tree's tables.
case "$part" in main|gemm|gemm-fp8|check|pair|attention-gluon) ;; *)
  echo "part: expected main, gemm, gemm-fp8, check, pair or attention-gluon, got $part" | log
  exit 2
  ;;
esac
# CEILING_CHECK_INSTALLED=1: this tree is installed already (the CPU test of this script)
[[ ${CEILING_CHECK_INSTALLED:-0} == 1 ]] \
  || python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v "^WARNING: Location" | log
if ! python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>&1 | log; then
  echo "no GPU: part $part needs an NVIDIA GPU (torch.cuda.is_available() is False)" | log
  save
  exit 3
fi
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv
  python3 -c "import torch, triton, jax; print('torch', torch.__version__, 'triton', triton.__version__, 'jax', jax.__version__, torch.cuda.get_device_name())"
} 2>&1 | log
case "$part" in
  main)
    timeout "${TEST_BUDGET_S:-90}" python3 -m pytest tests/test_gemm_nvidia.py tests/test_attention_gpu.py tests/test_triangle.py \
      tests/test_attention_jax_triton.py tests/test_triangle_jax_triton.py \
      -m gpu -q -p no:cacheprovider -rs -o addopts="" --junitxml="$work/gpu-tests.xml" 2>&1 | tail -40 | log
    save
    sweep attention "${ATTN_TUNE_BUDGET_S:-100}" sm_90a/attention.json --rep-ms 10
    sweep triangle-attention "${TRI_TUNE_BUDGET_S:-35}" H200/triangle_attention.json --rep-ms 10
    sweep trimul "${TRIMUL_TUNE_BUDGET_S:-40}" H200/triangle_multiplication.json --rep-ms 50
    check "${CHECK_BUDGET_S:-150}" --no-microbench --op attention --op triangle_attention --op triangle_multiplicative_update
    ;;
  gemm)
    sweep gemm "${TUNE_BUDGET_S:-40}" H200/gemm.json --shapes "${GEMM_TUNE_SHAPES:-gemm-llm-skinny}" --rep-ms 25
    check "${CHECK_BUDGET_S:-120}" --no-microbench --op gemm
    ;;
  gemm-fp8)
    timeout "${TEST_BUDGET_S:-90}" python3 -m pytest tests/test_scaled_gemm.py tests/test_gemm_nvidia.py -m gpu \
      -k "scaled_mm or small_m" -q -p no:cacheprovider -rs -o addopts="" --junitxml="$work/gpu-tests.xml" 2>&1 | tail -40 | log
    save
    export SWEEP_GUARD_S=${SWEEP_GUARD_S:-30}
    sweep gemm-fp8 "${FP8_TUNE_BUDGET_S:-100}" H200/gemm_fp8.json --shapes fp8-device --scalings tensor,block --rep-ms 10
    sweep gemm "${TUNE_BUDGET_S:-40}" H200/gemm.json --shapes gemm-llm-decode --rep-ms 10
    check "${CHECK_BUDGET_S:-160}" --no-microbench --op gemm
    ;;
  check)
    check "${CHECK_BUDGET_S:-400}" "${MICROBENCH:---no-microbench}"
    ;;
  pair)
    deps=$(realpath -m "${PAIR_DEPS:-.pair-deps}")
    export PYTHONPATH="$deps/boltz:$deps/cueq${PYTHONPATH:+:$PYTHONPATH}"
    if ! python3 -c "import boltz.model.layers.pairformer" 2>&1 | log; then
      echo "pair: Boltz is not importable from $deps/boltz; see this script's header for how to bring it" | log
      save
      exit 2
    fi
    python3 -c "import cuequivariance_torch, cuequivariance_ops_torch; print('cuequivariance', cuequivariance_torch.__version__)" 2>&1 | tail -1 | log
    timeout "${PAIR_TEST_BUDGET_S:-90}" python3 -m pytest tests/test_triangle_models.py -m gpu -q -p no:cacheprovider -rs \
      -o addopts="" --junitxml="$work/pair-tests.xml" 2>&1 | tail -30 | log
    save
    # the triangle sweep decides ROWS (fwd_rows), DQ_ATOMIC (bwd_dkdv_dq) and ROW_SPLIT by timing
    # them next to what ships; --apply writes a knob into the table only where it won
    sweep triangle-attention "${TRI_TUNE_BUDGET_S:-40}" H200/triangle_attention.json --rep-ms 10
    sweep trimul "${TRIMUL_TUNE_BUDGET_S:-25}" H200/triangle_multiplication.json --rep-ms 50
    bench "${PAIR_BENCH_BUDGET_S:-140}" pair_stack
    bench "${TRI_BENCH_BUDGET_S:-35}" triangle_attention triangle_multiplicative_update
    ;;
  attention-gluon)
    timeout "${GLUON_TEST_BUDGET_S:-120}" python3 -m pytest tests/test_attention_gluon.py -m gpu -q -p no:cacheprovider -rs \
      -o addopts="" --junitxml="$work/gluon-tests.xml" 2>&1 | tail -40 | log
    save
    budget=${GLUON_BENCH_BUDGET_S:-120}
    timeout $((budget + 60)) python3 -m ceiling.roofline.cli bench attention --shapes attention-gluon --out "$work/bench-gluon" \
      --budget-s "$budget" --tag attention-gluon 2>&1 | log
    save
    budget=${GLUON_TUNE_BUDGET_S:-110}
    mkdir -p "$work/tune"
    timeout $((budget + 90)) python3 -m ceiling.tuning.attention.gluon --out "$work/tune" --budget-s "$budget" \
      --apply 2>&1 | log
    cp kernels/nvidia/tables/H200/attention_gluon.json "$work/tune/attention_gluon-table-after.json" 2>/dev/null \
      || echo "no Gluon config beat the Triton kernels: no H200 Gluon table was written" | log
    save
    ;;
esac
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv 2>&1 | log
save
