#!/usr/bin/env bash
# Paraphrasing server (Table 7's text-only paraphraser): Qwen2.5-7B-Instruct, OpenAI-compatible on :8001.
# Same environment as serve_llava.sh; both fit on one 80+ GB GPU with --gpu-memory-utilization 0.45 each.
set -euo pipefail
exec vllm serve Qwen/Qwen2.5-7B-Instruct \
  --port "${PORT:-8001}" \
  --revision "${REVISION:-main}" \
  --dtype bfloat16 \
  --max-model-len 4096 \
  --seed 0 \
  "$@"
