#!/usr/bin/env bash
# Recaptioning server: the paper's captioner, LLaVA-NeXT on LLaMA-3-8B, OpenAI-compatible on :8000.
# Run it in vLLM's own environment (vLLM pins torch/fastapi versions that conflict with Prefect):
#   python3 -m venv .venv-vllm && .venv-vllm/bin/pip install vllm && . .venv-vllm/bin/activate
set -euo pipefail
exec vllm serve llava-hf/llama3-llava-next-8b-hf \
  --port "${PORT:-8000}" \
  --revision "${REVISION:-main}" \
  --dtype bfloat16 \
  --max-model-len 8192 \
  --limit-mm-per-prompt '{"image": 1}' \
  --seed 0 \
  "$@"
