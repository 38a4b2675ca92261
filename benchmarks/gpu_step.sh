#!/usr/bin/env bash
# One GRPO step's speed and memory on a GPU, the engine beside TRL (benchmarks/bench_step.py):
# the recipe workload (the learn recipe's warm start, trained first if not cached: ~2 min on 16
# cores), the text-sized workload and Qwen2.5-0.5B's shape (random weights), each in its own
# processes. Reports: benchmarks/results/step_{recipe,text,qwen05}_<GPU>.json. At most 9 min.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
for job in text:150 qwen05:240 recipe:150; do   # workload:seconds, 9 min in all
  w=${job%%:*}
  echo "== bench_step.py --workload $w --device cuda"
  timeout "${job##*:}" "$PY" benchmarks/bench_step.py --workload "$w" --device cuda \
    || echo "workload $w failed or ran out of time (rc $?)"
done
