#!/usr/bin/env bash
# One prepared GPU check: the throughput benchmark in bf16 autocast with SDPA flash
# attention and torch.compile, at a GPT-2-small-like shape (12 layers, d_model 768, 12 heads,
# seq 1024, vocab 50304 = GPT-2 padded; VOCAB=4096 for the CPU vocab), ours vs transformers (LlamaForCausalLM, GPT2LMHeadModel).
# MFU is against the H200 dense bf16 datasheet peak (989 TFLOP/s; override with PEAK_TFLOPS).
# Budget: under 8 minutes of machine time (4 compiled models, ~1 min to compile each, then
# 5 interleaved repetitions of 5 steps). Results: $OUT (if set) else results/benchmarks/,
# files throughput_gpu.{json,md} plus gpu_check.log.
#
#   bash benchmarks/gpu_check.sh              # on the GPU machine, from the repository root
#   DRY_RUN=1 bash benchmarks/gpu_check.sh    # CPU: same code path at a tiny shape, fp32 eager
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
OUT_DIR=${OUT:-results/benchmarks}
mkdir -p "$OUT_DIR"

if [ "${DRY_RUN:-0}" = "1" ]; then
  exec "$PY" -m benchmarks.throughput --device cpu --dtype fp32 --compile eager \
    --d-models 64 --layers 2 --seq 64 --batch 2 --vocab 512 --reps 1 --steps 1 --warmup 1 \
    --no-memory --out "$OUT_DIR" --name gpu_check_dryrun
fi

"$PY" - <<'EOF' 2>&1 | tee "$OUT_DIR/gpu_check.log"
import torch
assert torch.cuda.is_available(), "no CUDA device: run with DRY_RUN=1 on CPU"
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__,
      "| flash SDPA enabled:", torch.backends.cuda.flash_sdp_enabled())
EOF

# --sdpa flash restricts SDPA to the flash kernel for both implementations: a silent fallback
# to the math kernel would fail loudly instead of skewing the numbers.
timeout 450 "$PY" -m benchmarks.throughput --device cuda --dtype bf16 --compile compiled \
  --sdpa flash --d-models 768 --layers 12 --seq 1024 --batch 8 --vocab "${VOCAB:-50304}" \
  --reps 5 --steps 5 --warmup 3 --peak-tflops "${PEAK_TFLOPS:-989}" \
  --out "$OUT_DIR" --name throughput_gpu 2>&1 | tee -a "$OUT_DIR/gpu_check.log"
