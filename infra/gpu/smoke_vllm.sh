#!/usr/bin/env bash
# GPU smoke test of the vLLM offline positives backend: one command, a few minutes on one
# H200 (most of it pip and the model downloads).
#
#   infra/gpu/smoke_vllm.sh                  # the paper's models (LLaVA-NeXT-LLaMA3-8B, Qwen2.5-7B-Instruct)
#   SMALL=1 infra/gpu/smoke_vllm.sh          # 0.5B stand-ins of both families: faster downloads
#
# What it does: vLLM in its own venv (it pins torch/fastapi versions that conflict with
# Prefect and this project's torch); a 16-image synthetic world and its ingest; then the
# positives stage's offline backend (platonic_core/positives/vllm_offline.py) launching
# that venv's python on the runner, 1 recaption (image -> caption) + 1 paraphrase
# (alt-text -> paraphrase) per image; it prints counts, texts/s, tokens/s and a few texts.
# Needs: network (PyPI, the Hugging Face hub), an NVIDIA GPU, this repo installed in the
# python on PATH (or PLATONIC_PYTHON) as the README says.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VLLM_VENV:-$ROOT/.venv-vllm}
PY=${PLATONIC_PYTHON:-python}
N=${N_IMAGES:-16}
if [[ "${SMALL:-0}" == 1 ]]; then
  CAP=${RECAPTION_MODEL:-llava-hf/llava-onevision-qwen2-0.5b-ov-hf}
  PARA=${PARAPHRASE_MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
else
  CAP=${RECAPTION_MODEL:-llava-hf/llama3-llava-next-8b-hf}
  PARA=${PARAPHRASE_MODEL:-Qwen/Qwen2.5-7B-Instruct}
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "== installing vLLM into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "${VLLM_SPEC:-vllm}"
fi
"$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__)"
"$PY" -c "import platonic.core" 2>/dev/null || { echo "platonic is not installed in $PY (see README: Set up)"; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/platonic-vllm-smoke.XXXX")
echo "== work folder $WORK"
"$PY" - "$WORK" "$VENV/bin/python" "$CAP" "$PARA" "$N" <<'PYEOF'
import sys, time
from pathlib import Path
import pyarrow.parquet as pq
from platonic.core.config import IngestConfig, PositivesConfig, WorldConfig
from platonic.core.data.ingest import ingest_world
from platonic.core.positives import generate_corpus
from platonic.core.positives.images import image_source, input_shards
from platonic.core.positives.vllm_offline import VllmOfflineBackend
from platonic.core.world import generate_world

work, vpy, cap, para, n = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
generate_world(WorldConfig(n_train=max(16, n), n_eval=16), work / "world")
(work / "ingest").mkdir()
ingest_world(work / "world", IngestConfig(), work / "ingest")
cfg = PositivesConfig.model_validate({
    "backend": "vllm", "recaptions": 1, "paraphrases": 1, "batch_size": 8, "vllm_python": vpy,
    "models": {"recaption": {"id": cap}, "paraphrase": {"id": para}},
    "vllm_args": {"max_model_len": 4096, "gpu_memory_utilization": 0.85},
})
(work / "out").mkdir()
t0 = time.time()
counts, stats = generate_corpus(input_shards(work / "ingest"), cfg, VllmOfflineBackend(cfg), work / "parts", work / "out",
                                lambda s: image_source(work / "ingest", work / "world", s))
print("counts:", counts)
print(f"texts/s {stats['texts_per_s']:.2f}  tokens/s {stats['tokens_per_s']:.1f}  "
      f"(generation {stats['generation_seconds']:.1f}s incl. model loads; wall {time.time() - t0:.1f}s)")
for r in pq.read_table(work / "out" / "generations.parquet").to_pylist()[:: max(1, n // 3)][:6]:
    print(f"  {r['task']:10s} {r['image_id']}  {r['status']:6s} {(r['text'] or r['reason'])[:140]}")
assert counts["requested"] == counts["generated"] + counts["failed"]
assert counts["generated"] > 0, "nothing was generated"
PYEOF
echo "== smoke passed (outputs in $WORK/out)"
