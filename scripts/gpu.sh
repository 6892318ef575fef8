#!/usr/bin/env bash
# The GPU machine's recipes, one device call each (results flat in OUT: the device returns at most 8 files, 16 MiB
# each, no more than 2 folders down). From the repository root of the copied tree:
#
#   bash scripts/gpu.sh tests OUT [-k EXPR]      GPU tests (pytest -m "gpu or multi_gpu" over tests/{gpu,bench,kernels,runtime})
#   bash scripts/gpu.sh ab A B OUT               code A/B on 1 GPU: the step replays (bench/step_replay.py) and workload
#                                                a with the draft colocated (AR, chain, serial_tree tokens/s) of two
#                                                source trees, interleaved a_1 b_1 a_2 b_2 ..., medians (bench/code_ab.py)
#   bash scripts/gpu.sh pack REF DIR             (here, not on the GPU machine: it has no git history) REF's code into
#                                                DIR, for `ab`: e.g. pack main .ab/a; pack HEAD .ab/b; carry .ab
#   bash scripts/gpu.sh bench OUT [OVERRIDES]    workload a on 2 GPUs against the peers (bench/bench_runtime.py
#                                                preset=shape_realistic; Hydra overrides appended)
#   bash scripts/gpu.sh calibrate OUT            profile operators -> calibrate -> validation runs -> table (2 GPUs)
#   bash scripts/gpu.sh colocated_runs OUT       traced runs of the colocated loop, for the profile's runtime block
#   bash scripts/gpu.sh train_draft OUT [OVR]    distil the SmolLM2 draft, its acceptance report (1 GPU)
#   bash scripts/gpu.sh real_pair OUT            train_draft, the real-pair benchmark, the real-weight GPU tests
#   bash scripts/gpu.sh peers OUT                1 GPU: our AR and chain against the compiled peers (gptfast_compiled,
#                                                transformers_compiled) on workload a and the real pair, kernel profiles
#
# Each recipe sources scripts/device_env.sh (NVLink multicast off, the carried wheels in .whl/ installed into
# /tmp/site). Environment knobs are named in each recipe's comment.
set -uo pipefail
RECIPE=${1:-}
[ $# -gt 0 ] && shift
cd "$(dirname "$0")/.." || exit 2
stage() { echo "=== $(date -u +%T) $*"; }
outdir() { mkdir -p "$1" && (cd "$1" && pwd); }

# ---- tests: GPU_TEST_TIMEOUT_S (default 480) bounds the run; extra arguments go to pytest ------------------------
tests() {
  local out; out=$(outdir "${1:?usage: scripts/gpu.sh tests OUT [pytest args]}") || exit 2
  shift
  source scripts/device_env.sh
  timeout "${GPU_TEST_TIMEOUT_S:-480}" python3 -m pytest -q -m "gpu or multi_gpu" tests/gpu tests/bench tests/kernels tests/runtime \
    -p no:cacheprovider --timeout=150 "$@" > "$out/gpu_tests.log" 2>&1
  tail -15 "$out/gpu_tests.log"
}

# ---- pack: REF's code (what `ab` runs) into DIR, and DIR/SOURCE naming the commit -----------------------------------
# (bench/results: older commits still hold it; it is never code)
PACK_PATHS=(runtime kernels conf policy simulator calibration profiles generate.py bench ":(exclude)bench/results")
# (a path the commit does not have, e.g. policy/ before it existed, is left out)
pack() {
  local ref=${1:?usage: scripts/gpu.sh pack REF DIR} dir=${2:?usage: scripts/gpu.sh pack REF DIR} sha
  sha=$(git rev-parse --verify -q "$ref^{commit}") || { echo "pack: $ref is not a commit here" >&2; exit 2; }
  rm -rf "$dir" && mkdir -p "$dir" || exit 2
  local paths=() p
  for p in "${PACK_PATHS[@]}"; do
    [[ $p == :* || -n $(git ls-tree --name-only "$sha" -- "$p") ]] && paths+=("$p")
  done
  git archive "$sha" -- "${paths[@]}" | tar -x -C "$dir" || { echo "pack: git archive $ref failed" >&2; exit 2; }
  echo "$ref $sha" > "$dir/SOURCE"
  echo "pack: $ref ($sha) -> $dir ($(du -sh "$dir" | cut -f1))"
}

# ---- ab: AB_ROUNDS (2) rounds, each a then b: bench/step_replay.py (AB_CASES, default its own) then bench_runtime
# preset=shape_realistic on one GPU (parallel=1x0, modes AR / chain / serial_tree, no peers, AB_REPEATS (2) measured
# repeats after a warm-up, AB_BUDGET_S (120) each). A and B: source trees (folders laid out as the repo, e.g. from
# `pack`), or commits where this tree has git. AB_RUNTIME replaces the bench_runtime overrides (a CPU run:
# tests/bench/test_gpu_recipes.py). A tree without bench/step_replay.py (commits before it) is timed by
# this tree's copy. OUT: ab.json (bench/code_ab.py: per side the rounds, medians, b / a), ab.log, ab_runs.tar.gz
# (every round's results); the summary is rewritten after every run, so a call stopped at its limit keeps the rest.
ab() {
  [ $# -eq 3 ] || { echo "usage: scripts/gpu.sh ab A B OUT (A, B: source trees or commits)" >&2; exit 2; }
  local out work side r tree desc sha
  out=$(outdir "$3") || exit 2
  work=$(mktemp -d)
  source scripts/device_env.sh
  declare -A TREE DESC
  for side in a b; do
    [ "$side" = a ] && tree=$1 || tree=$2
    if [ ! -d "$tree" ]; then  # a commit: packed from this tree's git
      pack "$tree" "$work/src_$side" >/dev/null || exit 2
      tree=$work/src_$side
    fi
    tree=$(cd "$tree" && pwd)
    [ -f "$tree/bench/bench_runtime.py" ] || { echo "ab: $tree has no bench/bench_runtime.py" >&2; exit 2; }
    [ -f "$tree/bench/step_replay.py" ] || cp bench/step_replay.py "$tree/bench/"
    desc=$( [ -f "$tree/SOURCE" ] && cat "$tree/SOURCE" || echo "$tree")
    TREE[$side]=$tree DESC[$side]=$desc
    echo "$side: $desc" | tee -a "$out/ab.log"
  done
  local rounds=${AB_ROUNDS:-2} budget=${AB_BUDGET_S:-120} runtime
  read -r -a runtime <<< "${AB_RUNTIME:-preset=shape_realistic presets.shape_realistic.parallel=1x0 \
modes=[autoregressive,chain,serial_tree] presets.shape_realistic.peers=[]}"
  local summary=(python3 bench/code_ab.py "$work/results" --out "$out" --rounds "$rounds"
                 --source "a=${DESC[a]}" --source "b=${DESC[b]}"
                 --command "AB_ROUNDS=$rounds AB_REPEATS=${AB_REPEATS:-2} AB_BUDGET_S=$budget scripts/gpu.sh ab")
  mkdir -p "$work/results"
  for r in $(seq 1 "$rounds"); do
    for side in a b; do
      tree=${TREE[$side]}
      sha=$(awk '{print $2}' "$tree/SOURCE" 2>/dev/null)
      stage "round $r, $side: step replays" | tee -a "$out/ab.log"
      (cd "$tree" && export PYTHONPATH=/tmp/site:$tree ${sha:+SWIFTSPEC_GIT_SHA=$sha} && timeout 180 python3 \
        bench/step_replay.py ${AB_CASES:+--cases "$AB_CASES"} --out "$work/results/${side}_r${r}_steps.json") \
        2>&1 | grep -v USDT >> "$out/ab.log"
      stage "round $r, $side: workload a, draft colocated" | tee -a "$out/ab.log"
      (cd "$tree" && export PYTHONPATH=/tmp/site:$tree ${sha:+SWIFTSPEC_GIT_SHA=$sha} && timeout $((budget + 90)) \
        python3 bench/bench_runtime.py "${runtime[@]}" repeats="${AB_REPEATS:-2}" warmup_runs=1 budget_s="$budget" \
        out_dir="$work/run_${side}_$r" doc=null hydra.run.dir="$work/hydra_${side}_$r") \
        2>&1 | grep -E "^\[bench\]|Error|error" >> "$out/ab.log"
      for f in "$work/run_${side}_$r"/runtime_*.json; do [ -f "$f" ] && cp "$f" "$work/results/${side}_r${r}_runtime.json"; done
      "${summary[@]}" > "$out/ab_table.md" 2>&1
    done
  done
  tar czf "$out/ab_runs.tar.gz" -C "$work" results
  cat "$out/ab_table.md" | tee -a "$out/ab.log"
}

# ---- bench: workload a (2 GPUs) with the peers; BENCH_BUDGET_S (default 400) ----------------------------------------
bench() {
  local out; out=$(outdir "${1:?usage: scripts/gpu.sh bench OUT [overrides]}") || exit 2
  shift
  source scripts/device_env.sh
  cp docs/BENCHMARKS_RUNTIME.md "$out/BENCHMARKS_RUNTIME.md"
  timeout $((${BENCH_BUDGET_S:-400} + 120)) python3 bench/bench_runtime.py preset=shape_realistic \
    budget_s="${BENCH_BUDGET_S:-400}" out_dir="$out" doc="$out/BENCHMARKS_RUNTIME.md" hydra.run.dir=/tmp/bench_a "$@" \
    2>&1 | grep -v -E "USDT|Loading weights" | tee "$out/bench.log" | tail -24
}

# ---- calibrate (2 GPUs, ~5-10 min): PROFILE_BUDGET_S (190), VALIDATE_BUDGET_S (170); PROFILE_EXTRA / VALIDATE_EXTRA
# pass arguments (a CPU run: PROFILE_EXTRA="--device cpu --quick" VALIDATE_EXTRA=--smoke). A failing stage is logged
# and the next one still runs (without a profile, validation uses the analytic prior). OUT gets
# profile_traces_<date>.jsonl + .meta.json (operator traces), h200.json + h200.report.json (the fitted profile, operators
# only: the runtime block is fitted by calibrate.py runs=[...] over validation and colocated runs, docs/FIGURES.md),
# validation_<date>.json + VALIDATION.md, validation_runs.tar.gz (run dirs + parity plot), logs.tar.gz.
calibrate() {
  local out; out=$(outdir "${1:?usage: scripts/gpu.sh calibrate OUT}") || exit 2
  source scripts/device_env.sh
  local py=${PY:-python3} date work trace profile profile_args=() profile_extra validate_extra
  date=$(date -u +%F)
  work=$(mktemp -d)
  mkdir -p "$work/logs"
  trace="$out/profile_traces_${date}.jsonl" profile="$out/h200.json"
  read -r -a profile_extra <<< "${PROFILE_EXTRA:-}"
  read -r -a validate_extra <<< "${VALIDATE_EXTRA:-}"
  local pb=${PROFILE_BUDGET_S:-190} vb=${VALIDATE_BUDGET_S:-170}
  stage "environment"
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; $py -c \
    "import torch, triton, hydra, simpy; print(torch.__version__, torch.version.cuda, triton.__version__)"; } \
    2>&1 | tee "$work/logs/env.log"
  stage "1/4 profile operators (budget $pb s)"
  timeout $((pb + 35)) $py -m calibration.profile_ops --out "$trace" --budget-s "$pb" ${profile_extra[@]+"${profile_extra[@]}"} \
    2>&1 | tee "$work/logs/profile_ops.log"
  stage "2/4 calibrate"
  timeout 60 $py calibrate.py "traces=[$trace]" output="$profile" hydra.run.dir="$work/logs/calibrate_hydra" \
    2>&1 | tee "$work/logs/calibrate.log"
  [ -f "$profile" ] && profile_args=(--profile "$profile")
  stage "3/4 validation runs (budget $vb s)"
  timeout $((vb + 30)) $py -m calibration.validate run --out "$work/validation" --budget-s "$vb" \
    ${profile_args[@]+"${profile_args[@]}"} ${validate_extra[@]+"${validate_extra[@]}"} 2>&1 | tee "$work/logs/validate_run.log"
  stage "4/4 simulate the measured runs, validation table"
  timeout 90 $py -m calibration.validate compare --runs "$work/validation/runtime" ${profile_args[@]+"${profile_args[@]}"} \
    --results "$out/validation_${date}.json" --doc "$out/VALIDATION.md" \
    --figure "$work/validation/figures/fig04_parity_h200" 2>&1 | tee "$work/logs/validate_compare.log"
  stage "pack"
  [ -d "$work/validation" ] && tar czf "$out/validation_runs.tar.gz" -C "$work" validation
  tar czf "$out/logs.tar.gz" -C "$work" logs
  ls -la "$out"
}

# ---- colocated_runs (1 GPU, ~4-6 min): traced runs of the colocated loop (parallel=1x0), for checking or fitting the
# profile's colocated_* runtime costs: the real pair's shapes (random bf16 weights, the instruction table as oracle,
# 5 x (38 + 128) tokens: MODES_SMALL, default autoregressive chain serial_tree) and the validation pair's (Llama-3-8B +
# 3.2-1B, 2 x (512 + 256) tokens: MODES_LARGE, default chain serial_tree). EXTRA: more generate.py overrides (e.g.
# model.draft.weight_bits=8); TAG: a run-dir suffix. OUT: runs.log, runs.tar.gz (run dirs <small|large>_<mode><TAG>).
colocated_runs() {
  local out; out=$(outdir "${1:?usage: scripts/gpu.sh colocated_runs OUT}") || exit 2
  source scripts/device_env.sh
  local work mode spec
  work=$(mktemp -d)
  spec_of() { case "$1" in chain) echo "spec=chain spec.gamma=4" ;;
    serial_tree) echo "spec=serial_tree spec.bs=8 spec.w=8 spec.d=auto" ;; *) echo "spec=$1" ;; esac; }
  for mode in ${MODES_SMALL-autoregressive chain serial_tree}; do
    read -r -a spec <<< "$(spec_of "$mode")"
    # shellcheck disable=SC2086
    timeout 150 python3 generate.py model=smollm2 model.target.checkpoint=null model.draft.checkpoint=null \
      model.tokenizer=null model.target.dtype=bfloat16 model.draft.dtype=bfloat16 "${spec[@]}" parallel=1x0 \
      kernels=graphs spec.oracle=true acceptance=smollm2_instruction "workload.prompts=[]" \
      workload.num_requests=5 workload.prompt_tokens=38 workload.max_new_tokens=128 \
      workload.max_seq_len_tokens=1024 trace.enabled=true trace.chrome=false ${EXTRA:-} run_name="small_$mode${TAG:-}" \
      hydra.run.dir="$work/small_$mode${TAG:-}" 2>&1 | tail -1 | tee -a "$out/runs.log"
  done
  for mode in ${MODES_LARGE-chain serial_tree}; do
    read -r -a spec <<< "$(spec_of "$mode")"
    # shellcheck disable=SC2086
    timeout 240 python3 generate.py model=llama3-8b_llama3.2-1b model.target.dtype=bfloat16 \
      model.draft.dtype=bfloat16 "${spec[@]}" parallel=1x0 kernels=graphs \
      spec.oracle=true "workload.prompts=[]" workload.num_requests=2 \
      workload.prompt_tokens=512 workload.max_new_tokens=256 workload.max_seq_len_tokens=1024 trace.enabled=true \
      trace.chrome=false ${EXTRA:-} run_name="large_$mode${TAG:-}" hydra.run.dir="$work/large_$mode${TAG:-}" 2>&1 \
      | tail -1 | tee -a "$out/runs.log"
  done
  tar czf "$out/runs.tar.gz" -C "$work" .
  ls -la "$out"
}

# ---- train_draft (1 GPU, < 6.5 min): train_draft.py (< 5 min: teacher generation <= 60 s, max_train_s = 180 s of
# optimisation), then runtime.acceptance_report (< 1.5 min; REPORT_ARGS="max_prompts=2 ..." for smoke runs). Needs
# .cache/models/smollm2-135m-instruct.gguf or its parts (scripts/assemble_gguf.sh: the GGUF is larger than one call
# carries). OUT: results.tar.part-* (models/smollm2-draft/, profiles/acceptance/smollm2.json and the run's loss.csv,
# loss.png, summary.json, train.log, report.log; back here: cat results.tar.part-* | tar -x), smollm2.json, summary.json.
train_draft() {
  local out=${1:?usage: scripts/gpu.sh train_draft OUT [train_draft.py overrides]}
  shift
  mkdir -p "$out" || exit 2
  source scripts/device_env.sh
  export TOKENIZERS_PARALLELISM=true
  bash scripts/assemble_gguf.sh || exit 2
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
  local run=runs/train_draft/gpu t0 t1 t2
  rm -rf "$run" && mkdir -p "$(dirname "$run")"
  t0=$(date +%s)
  python3 train_draft.py out_dir="$run" "$@" 2>&1 | grep --line-buffered -v -E "Writing model shards|Loading weights" \
    | tee "$run.train.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "train_draft.py failed"; exit 1; }
  t1=$(date +%s)
  # shellcheck disable=SC2086
  python3 -m runtime.acceptance_report ${REPORT_ARGS:-} 2>&1 | grep --line-buffered -v "Loading weights" \
    | tee "$run.report.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "acceptance report failed"; exit 1; }
  t2=$(date +%s)
  echo "train_draft.py: $((t1 - t0)) s, acceptance report: $((t2 - t1)) s"
  python3 - <<'EOF'
import json
r = json.load(open("profiles/acceptance/smollm2.json"))["by_domain"]
for domain, need in (("code", 3.0), ("instruction", 2.5)):
    got = r[domain]["tree"]["8"]
    print(f"done-criterion {domain}: tree bs=8 {got:.3f} tokens/verify (need >= {need}): "
          f"{'PASS' if got >= need else 'FAIL'}")
EOF
  cp "$run.train.log" "$run/train.log" && cp "$run.report.log" "$run/report.log"
  tar -cf /tmp/results.tar models/smollm2-draft profiles/acceptance/smollm2.json \
    "$run/loss.csv" "$run/loss.png" "$run/summary.json" "$run/train.log" "$run/report.log" || exit 1
  split -b 15m -d /tmp/results.tar "$out/results.tar.part-"
  cp profiles/acceptance/smollm2.json "$run/summary.json" "$out/"
  ls -la "$out"
}

# ---- real_pair (2 GPUs, < 10 min): train_draft (TRAIN_S, default 180; SKIP_TRAIN=1: the shipped draft), the real-pair
# benchmark against transformers (plain + assisted) and DeepSpeed (BENCH_BUDGET_S, default 120), the real-weight GPU
# tests. OUT: train/ (train_draft's files), runtime_real_pair_<date>.json, BENCH_real_pair.md (the new section for
# docs/BENCHMARKS_RUNTIME.md), tests_real.log.
real_pair() {
  local out; out=$(outdir "${1:?usage: scripts/gpu.sh real_pair OUT}") || exit 2
  source scripts/device_env.sh
  if [ "${SKIP_TRAIN:-0}" = 1 ]; then
    bash scripts/assemble_gguf.sh || exit 2
  else
    stage "train the draft + acceptance report"
    timeout 450 bash scripts/gpu.sh train_draft "$out/train" max_train_s="${TRAIN_S:-180}" 2>&1 | grep -v "^step" | tail -25
  fi
  stage "real-pair benchmark"
  # bench_runtime checks its budget between items: a peer item started just before it runs to its end (40-90 s)
  timeout $((${BENCH_BUDGET_S:-120} + 120)) python3 bench/bench_runtime.py preset=real_pair \
    budget_s="${BENCH_BUDGET_S:-120}" out_dir="$out" doc="$out/BENCH_real_pair.md" hydra.run.dir=/tmp/bench_real 2>&1 \
    | grep -v -E "USDT|Loading weights" | tail -14
  stage "GPU tests on the real weights"
  timeout 240 python3 -m pytest -q -m "gpu or multi_gpu" tests/gpu -k real -p no:cacheprovider --timeout=120 \
    > "$out/tests_real.log" 2>&1
  tail -3 "$out/tests_real.log"
}

# ---- peers (1 GPU): our autoregressive and chain modes (draft colocated: parallel=1x0) beside the compiled single-GPU
# peers of bench/compiled_peers.py, one bench_runtime call per shape, each under its own timeout: workload a
# (preset=shape_realistic: Llama-3-8B + 3.2-1B shapes, random bf16; our chain with the oracle; gptfast_compiled AR +
# chain, transformers_compiled greedy) within PEERS_A_S (default 480 s), then the real pair (preset=real_pair: the
# SmolLM2 GGUF + models/smollm2-draft; also transformers' assisted generation; tokens checked against transformers'
# compiled greedy ones) within PEERS_REAL_S (170 s). A call's phases stop PEERS_MARGIN_S (20 s: writing the results)
# before its timeout; each compiled job starts only while its own budget (peer_budget_s.<peer>, conf/bench_runtime.yaml)
# is left, and its row says it did not finish if the timeout ends it, so a cold compile cut short costs only that row.
# Every compiled job prints its compile diagnostics (graphs, recompiles, graph breaks, CUDA-graph skips and why);
# PEERS_TORCH_LOGS (default recompiles,graph_breaks,perf_hints) is exported as TORCH_LOGS into peers_<preset>.log.
# PEERS_PROFILE=1 (default): per-kernel profiles of one decode step of ours and of gptfast (profile_steps=true), in
# the JSON's kernel_profiles and peers_table.md. Without the GGUF (scripts/assemble_gguf.sh finds neither the file nor
# its parts) the real pair is skipped with the reason. PEERS_EXTRA: more overrides for both calls (e.g.
# peer_budget_s.transformers_compiled=120, peer_compile.coordinate_descent_tuning=false: shorter cold compiles);
# PEERS_A_PEERS: workload a's peer list (default [gptfast_compiled,transformers_compiled]);
# PEERS_SHAPES: the presets (e.g. shape_realistic alone: one call of ~8.5 min; a CPU run: tests/bench/test_gpu_recipes.py).
# OUT: runtime_<preset>_<date>_<sha>.json per shape (for python -m bench.promote), peers_<preset>.log, peers_table.md
# (python -m bench.compiled_peers: the comparison, the rows and the profiles, printed last).
peers() {
  local out; out=$(outdir "${1:?usage: scripts/gpu.sh peers OUT}") || exit 2
  source scripts/device_env.sh
  local extra=() margin=${PEERS_MARGIN_S:-20} limit preset peer_list profile=false
  read -r -a extra <<< "${PEERS_EXTRA:-}"
  [ "${PEERS_PROFILE:-1}" = 1 ] && profile=true
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  for preset in ${PEERS_SHAPES:-shape_realistic real_pair}; do
    if [ "$preset" != real_pair ]; then
      limit=${PEERS_A_S:-480} peer_list=${PEERS_A_PEERS:-[gptfast_compiled,transformers_compiled]}
    else
      limit=${PEERS_REAL_S:-170} peer_list="[gptfast_compiled,transformers_compiled,transformers_compiled_assisted]"
      if ! bash scripts/assemble_gguf.sh > "$out/gguf.log" 2>&1; then
        echo "- real pair skipped: $(tail -1 "$out/gguf.log")" | tee "$out/peers_real_pair.log" "$out/peers_notes.md"
        continue
      fi
    fi
    stage "$preset: ours (autoregressive, chain; 1 GPU) + compiled peers $peer_list, timeout $limit s"
    TORCH_LOGS=${PEERS_TORCH_LOGS-recompiles,graph_breaks,perf_hints} timeout "$limit" python3 bench/bench_runtime.py \
      preset="$preset" "presets.$preset.parallel=1x0" "presets.$preset.peers=$peer_list" "modes=[autoregressive,chain]" \
      budget_s=$((limit > margin + 30 ? limit - margin : 30)) profile_steps=$profile out_dir="$out" doc=null \
      hydra.run.dir="/tmp/peers_$preset" ${extra[@]+"${extra[@]}"} \
      2>&1 | grep --line-buffered -v -E "USDT|Loading weights" > "$out/peers_$preset.log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || echo "$preset: bench_runtime exited $rc (124: the timeout; the JSON keeps the rows done)"
    grep -E "^\[bench\] ([a-z_]+/[a-z]+|swiftspec)" "$out/peers_$preset.log" | tail -24
  done
  stage "summary"
  # shellcheck disable=SC2012
  { cat "$out/peers_notes.md" 2>/dev/null; python3 -m bench.compiled_peers $(ls "$out"/runtime_*.json 2>/dev/null); } \
    > "$out/peers_table.md" 2>&1
  cat "$out/peers_table.md"
}

case "$RECIPE" in
  tests|ab|pack|bench|calibrate|colocated_runs|train_draft|real_pair|peers) "$RECIPE" "$@" ;;
  *) sed -n '2,21p' "$0"; [ -z "$RECIPE" ] || echo "gpu.sh: unknown recipe '$RECIPE'"; exit 2 ;;
esac
stage "done"
