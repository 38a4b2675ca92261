#!/usr/bin/env bash
# One GRPO step's speed and memory on a GPU, the engine beside TRL (benchmarks/bench_step.py):
# the text-sized workload, Qwen2.5-0.5B's shape (random weights) and the recipe workload (the
# learn recipe's warm start, trained first if not cached: ~2 min on 16 cores), each contender in
# its own process. Reports: benchmarks/results/step_{text,qwen05,recipe}_<GPU>.json (a
# .partial.json keeps the contenders that finished when a workload runs out of time). ~7 min:
# on an H100, 140 s held the 0.5B workload's engine contender but not TRL's (73 s on its own).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
# workload:seconds:contenders (the engine's variants that differ on a GPU, and TRL)
for job in text:100:b_today_kv,b_micro_kv,b_icdf_kv,c_trl \
           qwen05:240:b_micro_kv,b_icdf_micro_kv,c_trl \
           recipe:60:b_today_kv,c_trl; do
  IFS=: read -r w secs who <<<"$job"
  echo "== bench_step.py --workload $w --device cuda --contenders $who"
  timeout -k 5 "$secs" "$PY" benchmarks/bench_step.py --workload "$w" --device cuda \
    --contenders "$who" || echo "workload $w failed or ran out of time (rc $?)"
done
