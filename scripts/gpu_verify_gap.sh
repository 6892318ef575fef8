#!/usr/bin/env bash
# One short device call (2 x H200): where a verify span's time goes. Runs workload a's async pick (bs 8 w 16 d 3,
# 256 new tokens) with trace.graph_events=true and prints, per mode, the median step.verify span next to the
# median device time of its input copies + graph replay (CUDA events), i.e. the host gap inside a verify, and the
# host's marks inside the span: replay queued (launched), verdict known (decided).
#   bash scripts/gpu_verify_gap.sh "$OUT"       -> OUT/verify_gap.json (git SHA, device, date, config), .log
# The device split (gpu_inputs: start -> input copies, gpu_copies, gpu_replay) and the host marks (inputs built,
# copied, replay queued, verdict decided) locate the gap.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_verify_gap.sh OUTDIR}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
source scripts/device_env.sh
rm -rf /tmp/gap_*
timeout 90 python3 -m pytest -q -m gpu tests/gpu -k "graph_events or staging" -p no:cacheprovider 2>&1 | tail -2
for mode in async_tree serial_tree; do
  for staging in graph; do  # (kernels.input_staging is gone: every graph stages its own inputs)
    timeout 150 python3 generate.py workload=default model=llama3-8b_llama3.2-1b kernels=graphs spec=$mode \
      spec.oracle=true acceptance=smollm2 spec.oracle_belief=table spec.w=16 \
      spec.d=3 workload.prompt_tokens=1024 workload.max_new_tokens=256 workload.num_requests=1 \
      workload.max_seq_len_tokens=2048 parallel=1x1 trace.chrome=false trace.graph_events=true \
      hydra.run.dir="/tmp/gap_${mode}_$staging" 2>&1 | grep -E "^--- |Error" | cut -c1-160
  done
done
python3 - "$OUT" <<'PY' 2>&1 | tee "$OUT/verify_gap.log"
import datetime, json, sys
from pathlib import Path
import torch
from conf.rundir import atomic_write_json, git_sha
from conf.trace import read_traces, span_medians
KEYS = ("device_s", "gpu_inputs_s", "gpu_copies_s", "gpu_replay_s", "inputs_s", "copied_s", "launched_s",
        "decided_s")
res = {}
for run in sorted(Path("/tmp").glob("gap_*_*")):
    mode = run.name.removeprefix("gap_")  # <mode>_<staging>
    try:
        recs = [r for r in read_traces(run / "traces.jsonl") if r.name == "step.verify"]
    except FileNotFoundError as e:
        print(mode, "no trace:", e); continue
    metrics = json.loads((run / "metrics.json").read_text()) if (run / "metrics.json").exists() else {}
    # medians, ms: the span, device parts (gpu_*), host marks after the span's start (*_s)
    medians = span_medians(recs[5:], KEYS, f"{run}: step.verify")
    row = {"verifies": medians.pop("n"), "tokens_per_s": metrics.get("tokens_per_s"),
           "iteration_ms": metrics.get("iteration_time_s", 0) * 1e3, **medians}
    res[mode] = row
    print(mode, " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
record = {"benchmark": "verify_gap", "git_sha": git_sha(), "device": f"2 x {torch.cuda.get_device_name()}",
          "date": datetime.date.today().isoformat(),
          "config": {"model": "llama3-8b_llama3.2-1b", "kernels": "graphs", "spec": "bs 8 w 16 d 3",
                     "prompt_tokens": 1024, "max_new_tokens": 256, "oracle": "smollm2 table",
                     "first_verifies_skipped": 5, "trace.graph_events": True, "runs": "<mode>_<kernels.input_staging>"},
          "results": res}
atomic_write_json(Path(sys.argv[1]) / "verify_gap.json", record)
PY
