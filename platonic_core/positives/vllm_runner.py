"""The vLLM offline runner: run by `positives.vllm_python` (vLLM's own environment), never
imported by the platonic package. Standard library + vllm only.

    <vllm_python> vllm_runner.py REQUESTS.jsonl RESULTS.jsonl CONFIG.json

REQUESTS: one {"i", "messages", "seed"} per line (OpenAI chat messages; images as data
URLs, which `LLM.chat` reads as multi-modal data). RESULTS: one {"i", "text",
"finish_reason", "prompt_tokens", "completion_tokens", "seconds"} or {"i", "error"} per
line, appended and flushed batch by batch, so the caller can stream them back.
"""

import json
import os
import sys
import time


def main(req_path: str, res_path: str, cfg_path: str) -> None:
    cfg = json.load(open(cfg_path))
    import vllm
    from vllm import LLM, SamplingParams

    info = {"vllm_version": getattr(vllm, "__version__", "?"), "python": sys.executable}
    with open(res_path + ".info", "w") as f:
        json.dump(info, f)
    llm = LLM(
        model=cfg["model"],
        revision=cfg.get("revision"),
        trust_remote_code=cfg.get("trust_remote_code", False),
        seed=cfg.get("seed", 0),
        **cfg.get("llm_args", {}),
    )
    reqs = [json.loads(line) for line in open(req_path) if line.strip()]

    def params(r):
        return SamplingParams(
            temperature=cfg["temperature"], top_p=cfg["top_p"], max_tokens=cfg["max_tokens"], seed=r["seed"]
        )

    def run(batch):
        t0 = time.perf_counter()
        outs = llm.chat([r["messages"] for r in batch], sampling_params=[params(r) for r in batch], use_tqdm=False)
        dt = (time.perf_counter() - t0) / len(batch)
        return [
            {
                "i": r["i"],
                "text": o.outputs[0].text,
                "finish_reason": o.outputs[0].finish_reason,
                "prompt_tokens": len(o.prompt_token_ids or []),
                "completion_tokens": len(o.outputs[0].token_ids),
                "seconds": dt,
            }
            for r, o in zip(batch, outs)  # noqa: B905 (runs on any python vLLM supports)
        ]

    bs = max(1, int(cfg.get("batch_size", 64)))
    with open(res_path, "a") as out:
        for s in range(0, len(reqs), bs):
            batch = reqs[s : s + bs]
            try:
                rows = run(batch)
            except Exception:  # one bad request (too long, unreadable image) fails the call: retry one by one
                rows = []
                for r in batch:
                    try:
                        rows += run([r])
                    except Exception as e:
                        rows.append({"i": r["i"], "error": f"{type(e).__name__}: {e}"[:200]})
            out.write("".join(json.dumps(r) + "\n" for r in rows))
            out.flush()
            os.fsync(out.fileno())


if __name__ == "__main__":
    main(*sys.argv[1:4])
