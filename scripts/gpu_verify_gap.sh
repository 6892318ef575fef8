#!/usr/bin/env bash
# One short device call (2 x H200): where a verify span's time goes. Runs workload a's async pick (bs 8 w 16 d 3,
# 256 new tokens) with trace.graph_events=true and prints, per mode, the median step.verify span next to the
# median device time of its input copies + graph replay (CUDA events), i.e. the host gap inside a verify, and the
# host's marks inside the span: replay queued (launched), verdict known (decided).
#   bash scripts/gpu_verify_gap.sh "$OUT"       -> OUT/verify_gap.json, OUT/verify_gap.log
set -uo pipefail
OUT=${1:?usage: scripts/gpu_verify_gap.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
timeout 60 python3 -m pytest -q -m gpu tests/gpu -k graph_events -p no:cacheprovider 2>&1 | tail -2
for mode in async_tree serial_tree; do
  timeout 150 python3 generate.py workload=default model=llama3-8b_llama3.2-1b kernels=graphs spec=$mode \
    spec.oracle=true acceptance=smollm2 spec.oracle_belief=table spec.w=16 spec.d=3 workload.prompt_tokens=1024 \
    workload.max_new_tokens=256 workload.num_requests=1 workload.max_seq_len_tokens=2048 parallel=1x1 \
    trace.chrome=false trace.graph_events=true hydra.run.dir="/tmp/gap_$mode" 2>&1 | grep -v -E "USDT|Loading" | tail -2
done
python3 - "$OUT" <<'PY' 2>&1 | tee "$OUT/verify_gap.log"
import json, statistics, sys
from pathlib import Path
from conf.rundir import atomic_write_json
from conf.trace import read_traces
res = {}
for mode in ("async_tree", "serial_tree"):
    try:
        recs = [r for r in read_traces(f"/tmp/gap_{mode}/traces.jsonl") if r.name == "step.verify"]
    except FileNotFoundError as e:
        print(mode, "no trace:", e); continue
    span = [r.duration_s for r in recs[5:]]
    extras = [json.loads(r.extra) if r.extra else {} for r in recs[5:]]
    dev = [x["device_s"] for x in extras if "device_s" in x]
    med = lambda key: statistics.median(x[key] for x in extras) * 1e3 if all(key in x for x in extras) else None
    res[mode] = {"verifies": len(span), "span_ms": statistics.median(span) * 1e3,
                 "device_ms": statistics.median(dev) * 1e3 if dev else None,
                 "launched_ms": med("launched_s"), "decided_ms": med("decided_s")}
    print(mode, res[mode])
atomic_write_json(Path(sys.argv[1]) / "verify_gap.json", res)
PY
