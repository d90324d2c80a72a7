#!/usr/bin/env bash
# Recaptioning server: the paper's captioner, LLaVA-NeXT on LLaMA-3-8B, OpenAI-compatible on :8000.
# Run it in vLLM's own environment (vLLM pins torch/fastapi versions that conflict with Prefect):
#   python3 -m venv .venv-vllm && .venv-vllm/bin/pip install vllm && . .venv-vllm/bin/activate
set -euo pipefail
# every request needs `Authorization: Bearer $VLLM_API_KEY` (the recipe reads the same variable:
# positives.http.api_key_env); loopback only unless HOST says otherwise
: "${VLLM_API_KEY:?export VLLM_API_KEY first: any long random string, which clients send too}"
exec vllm serve llava-hf/llama3-llava-next-8b-hf \
  --host "${HOST:-127.0.0.1}" \
  --port "${PORT:-8000}" \
  --api-key "$VLLM_API_KEY" \
  --revision "${REVISION:-main}" \
  --dtype bfloat16 \
  --max-model-len 8192 \
  --limit-mm-per-prompt '{"image": 1}' \
  --seed 0 \
  "$@"
