#!/usr/bin/env bash
# One prepared GPU check, one command, one JSON (benchmarks/gpu_check.py: what each part
# measures). On one H100/H200, in under 8 minutes, with nothing installed beyond the README's
# set-up: MFU in bf16 with torch.compile off and on at GPT-2-small shape (d_model 768, 12
# layers, T 1024) for our llama and gpt2 presets and transformers' LlamaForCausalLM and
# GPT2LMHeadModel, in one process; the training loop's host overhead on the device; the
# memory estimate against torch.cuda.max_memory_allocated; the MoE layer's grouped-mm dispatch
# against the per-expert loop; with 2+ GPUs, one run under
# train.parallel=ddp and fsdp on every GPU (skipped with one); a 2-size x 2-budget sweep end to
# end. MFU is against the dense bf16 datasheet peak (989 TFLOP/s; override with PEAK_TFLOPS).
# Writes gpu_check_cuda.json to $OUT if set, else results/benchmarks/. Ran on one H200 on
# 2026-12-04 (results/benchmarks/gpu_check_cuda.json, docs/performance.md, on a GPU).
#
#   bash benchmarks/gpu_check.sh               # on the GPU machine, from anywhere
#   bash benchmarks/gpu_check.sh --cpu-smoke   # CPU: every part at tiny shapes (minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
OUT_DIR=${OUT:-results/benchmarks}
mkdir -p "$OUT_DIR"
# 470 s: the parts' own limits fit in it, and a hang still ends inside the 8 minutes
exec timeout 470 "$PY" -m benchmarks.gpu_check --out "$OUT_DIR" \
  --peak-tflops "${PEAK_TFLOPS:-989}" "$@"
