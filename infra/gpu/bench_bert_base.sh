#!/usr/bin/env bash
# BERT-B text JEPA (2 views, SIGReg, projector), bf16 autocast, on one GPU: our trainer vs a
# bare PyTorch loop, tokens/s and MFU against the H200's 989 TFLOP/s dense bf16 and against a
# GEMM measured in the same run. One command, a few minutes (torch.compile warm-up included):
#
#   bash infra/gpu/bench_bert_base.sh                 # defaults below
#   BATCH=256 SEQ=128 COMPILE= bash infra/gpu/bench_bert_base.sh   # no torch.compile
#
# Needs a CUDA build of torch (pip install torch; the CPU wheel pinned for the demo will not
# see the GPU) and `pip install -e .` of this repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
python - <<'PY'
import sys, torch
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} sees no GPU: install a CUDA build of torch first")
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, flush=True)
PY
args=(--preset bert-base --kind "${KIND:-text_jepa}" --device cuda --precision bf16
      --batch "${BATCH:-256}" --views "${VIEWS:-2}" --seq "${SEQ:-128}"
      --steps "${STEPS:-12}" --rounds "${ROUNDS:-3}" --peak-tflops "${PEAK_TFLOPS:-989}")
if [ -n "${COMPILE-1}" ]; then args+=(--compile); fi
exec python benchmarks/bench_trainer.py "${args[@]}" "$@"
