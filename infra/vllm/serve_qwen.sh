#!/usr/bin/env bash
# Paraphrasing server (Table 7's text-only paraphraser): Qwen2.5-7B-Instruct, OpenAI-compatible on :8001.
# Same environment as serve_llava.sh; both fit on one 80+ GB GPU with --gpu-memory-utilization 0.45 each.
set -euo pipefail
# every request needs `Authorization: Bearer $VLLM_API_KEY` (the recipe reads the same variable:
# positives.http.api_key_env); loopback only unless HOST says otherwise
: "${VLLM_API_KEY:?export VLLM_API_KEY first: any long random string, which clients send too}"
exec vllm serve Qwen/Qwen2.5-7B-Instruct \
  --host "${HOST:-127.0.0.1}" \
  --port "${PORT:-8001}" \
  --api-key "$VLLM_API_KEY" \
  --revision "${REVISION:-main}" \
  --dtype bfloat16 \
  --max-model-len 4096 \
  --seed 0 \
  "$@"
