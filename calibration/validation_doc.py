"""docs/VALIDATION.md: the method, the table and the known limits, from `calibration/validate.py compare`'s result
(calibration/compare.py); this module only formats. A user's shorter table: calibration/report.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calibration.report import agreement_lines, fmt, pct
from conf.rundir import atomic_write_text


def _d(x: object) -> str:
    """A measured d (the runtime's d_used: an int, or the DepthTuner's settled value); '-' when not recorded."""
    return "-" if x is None else str(x)


METHOD = """\
## Method

1. **Operator profile (GPU).** `calibration/profile_ops.py` times the operators of the model presets on one H200
   (GEMMs of every weight matrix at TP shards 1..8 and M 1..64 (+256, 1024), the runtime's attention
   backend over context 256..16K and tree sizes 1..64, KV compaction), whole runtime steps on random-weight
   models (`TargetWorker` verify, `DraftWorker` expand, tree bookkeeping) and, on 2 GPUs, all-reduce (eager
   and in CUDA graphs), raw send/recv and the runtime's leader-channel messages. Kernels are timed inside
   CUDA graphs with operands rotated past L2 (medians), whole steps as graph replays (`op_timing` and
   `steps_mode` in the traces' meta file say which). Its step_graphs section profiles the captured decode
   steps themselves (torch.profiler over graph replays: each kernel's exposed time, by class).
2. **Fit (CPU).** `calibrate.py` fits each operator in the profile's functional form (non-negative least
   squares in relative error) and reports the held-out MAPE per operator. Captured decode steps take the in-graph
   fits: `attention_graph` and `step_overhead_graph` (the small kernels, counted per role and rows). The fitted
   profile is `profiles/h200.json`; the fit report (`profiles/h200.report.json`) also yields `sim.tree_op_s`
   (median select + re-root host time).
3. **Measured runs (GPU).** `calibration/validate.py run` decodes each configuration with the real runtime
   (`runtime.launch`, `runtime.engine`): Llama-3-8B target on GPU 0, Llama-3.2-1B draft on GPU 1, random
   weights with the acceptance oracle, one request of {workload}, `kernels=graphs` (fused
   Triton kernels, every verify and draft expansion replayed as a CUDA graph). Each configuration runs once
   to warm up, then twice measured (`__r1`: the second repeat; their spread is the run-to-run noise).
   Since git e92dbf1 the oracle's draft grows its tree by the acceptance table's belief
   (`spec.oracle_belief=table`), as the simulator does.
4. **Simulated runs (CPU).** `calibration/validate.py compare` simulates each measured configuration from the
   profile, replaying that run's verify outcomes (`acceptance.kind=replay` on its iterations.csv). A fixed d
   is the run's, and so is a serial run's with d auto recorded before the serial depth tuner (no `d_rule` in
   its metrics: the breadth rule's d); a run whose d auto a tuner chose (async; serial with `d_rule` runtime)
   runs the runtime's own tuner (`sim.d_rule=runtime`, as the autoconfig search does), so its trial rounds
   cost what they cost (pinning the settled d left them out: the d-auto runs came out 2-6% optimistic).
   The replay follows the draft ranks of every verified path: iterations.csv's `ranks` column, or, for runs
   recorded before it, the ranks reconstructed from the oracle's seed (`runtime.oracle.reconstruct_ranks`);
   the simulated trees, accepted lengths and hits are then the measured ones except in the verifies counted
   as replay divergences below.
5. **Held out by construction.** The profile is fitted from operator traces only; no end-to-end run enters
   the fit, so every configuration below is a held-out configuration. The step sweep shares model shapes
   with the validation pair, as any operator profile does.

Error = simulated / measured - 1. Iteration time is the target's mean cycle (wait for the proposal +
verify); the draft step is one draft forward (`step.expand` span). Tokens/s includes both prefills.
"""


LIMITS = """\
## Known limits of the cost model this validation exercises

- Operators are timed inside CUDA graphs (`calibration/profile_ops.py`, L2-overflowing operand rotation) and whole
  steps as graph replays (`steps_mode: graphs`). Host costs the operator traces cannot see (the runtime loop's
  step, expansion, message and draft-round overheads) come from the profile's `runtime` block, fitted on the
  measured runs of the configurations item 5 names (simulator/runtime_fit.py).
- A TP > 1 target broadcasts each verdict inside its group (0.15-0.2 ms per step measured inside the TP-2
  verify spans). No operator is profiled for it: the simulator charges one leader-channel message (the
  profiled NCCL hop with its host copies, ~0.1 ms). Its all-reduces are the ones profiled inside CUDA graphs
  (~12 us per call; since 2026-11-30 the default `allreduce_mode=graph`: the eager fit, ~40 us, made graph
  runs fall back to a ~4 us analytic prior and under-predict TP-2 steps by ~0.5 ms). A TP > 1 target's own
  host residual is `tp_step_extra_s`, fitted when a TP > 1 run is among the fit runs (item 5); without one a TP > 1
  step takes the one-GPU `step_extra_s`. Its autoregressive steps (not chained: the leader reads each token back and
  broadcasts it before the next step) take `tp_ar_step_extra_s` where a TP > 1 autoregressive run is among the fit
  runs: 0.50 ms since 954a1bf, against the verify's 0.35 ms (TP-2 autoregressive steps measure 3.96 ms median against
  3.87 ms for TP-2 chain verifies of 5 tokens). Fitted on tp2_ar, so that configuration left this table; on the other
  calls' TP-2 autoregressive runs, which the fit never saw, it gives -2.2% to +3.0% tokens/s, against +1.6% to +7.1%
  when those steps took `tp_step_extra_s` (`calibration/validate.py compare --keep-fitted`:
  bench/results/validation_2026-12-01_{0bfafc6,72bd305,c52c1c3}_profile954a1bf_tpar.json).
- The draft expansion's host cost grows with its real (not padding) rows: a refill after a miss expands the root
  alone, an overlapped expansion w rows, each creating top-k tree nodes. Measured with `trace.graph_events`
  (053c53d-74dc57d): overlapped and refill expansions take the same device time, and the overlapped ones 0.015 /
  0.075 / 0.165 ms more host time at w 4 / 8 / 16. Since 316715c the runtime records each expansion's rows and
  the profile charges `expand_extra_per_real_row_s` instead of a cost per row of w; on the 316715c runs this
  moved the held-out tokens/s error from 3.1% mean / 6.5% max (per row of w) to 2.7% / 6.4%, and the
  expansion's max error from 13.1% to 9.0%. Fitted: 0.062 ms + 14 us per real row at 316715c; 0.015 ms + 5 us
  at 1bed0ab, whose draft tree keeps its nodes in parallel lists instead of one object each. The host's speed
  itself varies between machines: the same w 16 expansions measured 1.70 ms in one call and 1.47-1.53 ms in
  another.
- The host runs at two speeds. On the device's VMs (16 vCPUs) a pure-Python loop's minimum time is either 34-38 ms
  or 55-68 ms on any vCPU, and the state moves between vCPUs within seconds (a fixed loop timed on each vCPU;
  bench/results/runtime_runs_2026-12-01_e2553d0_cores). Five runs of one configuration in one call measured their
  host-only spans 2.2x apart (re-root 25-57 us) and 927-1,226 tokens/s at the real pair's shapes. So the fitted
  runtime block is a sample of both states, and calls and runs differ by it (with the runtime's version: the
  twenty-seventh section of docs/BENCHMARKS_RUNTIME.md compares async expansions' host time across calls).
- Leader messages (proposals, verified paths) are priced by the channel the runtime resolves
  (`parallel.leader_channel`, auto: a Unix socket when both leaders sit on one node): the profile's `message_unix`
  (calibration/profile_comm.py times it since a7cab77's parent), else the `unix-socket` link preset (8-27 us one way,
  measured by a leader-channel ping-pong on the H200 host). Before, every message was priced as the NCCL channel
  (~0.14 ms one way), which put the simulated target idle after a hit at 0.41 ms against 0.16-0.19 ms measured
  (docs/FIGURES.md, Fig. 9) and hid other costs: on these runs the change moved tokens/s from 1.7% median /
  2.3% mean / 6.5% max to 2.4% / 2.4% / 6.1%, iteration from 2.4% / 7.0% to 1.9% / 5.6%, and the ranking's
  Spearman from 0.35 to 0.53; the runtime block's draft round is now measured whole (span gaps included:
  0.172 ms, was 0.123 ms as a sum of spans); with async d-auto runs then simulated through the runtime's
  DepthTuner (method, item 4): 2.2% / 2.2% / 5.0% (on the 1bed0ab runs). A leader message then took 0.07-0.15 ms
  inside the runs against 8 us in the channel's ping-pong: a receive that had waited over ~1 ms slept in poll
  and woke 30-130 us late (calibration/message_latency.py, twelfth session); since a3e6e83 GPU ranks spin up to 50 ms
  (`parallel.recv_spin_ms`) and the hop is 2-7 us; the receiver's own unpack, decode and span still take 15-40 us
  per message, which the simulator does not charge apart.
- The profile (2026-12-01, twenty-sixth session) takes the operator traces of 954a1bf and the captured steps of
  f7aec85 (`profile_traces_2026-12-01_f7aec85_steps.jsonl`: the same runtime's decode steps, profiled kernel by
  kernel): `attention_graph` and `step_overhead_graph` price the captured decode steps, whose small kernels it counts
  per role and rows (a draft's multi-row expansion launches a RoPE + KV-write kernel per layer that the target's
  verify fuses into its QKV GEMM: 54 such launches in a 1B expansion of 8 rows against 36 in a verify;
  `cost_model.GraphKernels` equals the recorded launch counts of all 46 captured steps); held out, that fit is within
  5.2% of the small kernels' time, where one line over all launches was 20.1% off. Its runtime block is fitted per
  runtime loop (`runtime.loops`): the colocated one-GPU loop on four colocated runs (9f74ecf: the real pair's shapes,
  chain and serial; 5c7897b: the 8B / 1B shapes, chain and serial), chain drafting on two groups on chain_g4, the top
  level on the other fit configurations of item 5. Against the 954a1bf profile it replaces (below), on these 24 rows:
  tokens/s 1.9% / 2.6% / 9.4% (median / mean / max) against 2.4% / 2.6% / 8.9%, iteration 1.4% / 4.3% against 1.7% /
  7.3%, the ranking's Spearman 0.95 against 0.89 (bench/results/validation_2026-12-01_954a1bf{_profile191a51e,}.json);
  on workload a 1.2% median / 3.9% max against 1.0% / 3.5%
  (bench/results/sim_vs_bench_2026-12-01_954a1bf{_profile191a51e,}.json); on the other calls' runs (the fit
  configurations kept) 2.3% / 2.7% / 10.1% (0bfafc6), 2.9% / 3.2% / 11.7% (72bd305), 1.6% / 2.6% / 11.2% (c52c1c3),
  against 2.3% / 2.9% / 13.0%, 3.4% / 3.4% / 10.9%, 1.0% / 2.0% / 11.3%
  (bench/results/validation_*_profile191a51e.json). What it changes is the small models and the colocated loop: see
  "Small models" below.
- The 954a1bf profile (`profiles/h200_954a1bf.json`, the default until the twenty-sixth session): operator traces of
  that commit, whose whole steps are built as the Engine builds them (`runtime.model.role_kernels`: the 8B verify with
  `kernels.target_qkv_rope`, the 1B expansion with the fused RoPE attention and head, at w 1 / 4 / 8 / 16 / 32 over
  the runtime's 256-slot tree region; early norms, in-graph staging, spin readback, uniform oracle draws), and the
  runtime block fitted on the six configurations of item 5 from the same call's runs. Every row of the table is a
  configuration the fit did not see. The fb00b9b profile it replaces gives 3.0% / 3.5% / 10.4% (median / mean / max
  tokens/s), verify 2.9% / 4.6% and draft forward 3.4% / 9.4% (median / max) on these 24 rows
  (bench/results/validation_2026-12-01_954a1bf_profilefb00b9b.json): it prices the verify 0.1-0.2 ms long, as the
  host-path and norm changes since it predicted. On workload a (1K-token prompts, a workload no validation run has;
  `python -m calibration.sim_vs_bench` on the same call's bench_runtime results, acceptance drawn from the table, not
  replayed) the new profile is within 0.3-3.5% of the six measured modes and shapes (median 1.0%), the old one within
  0.8-3.9% (median 1.4%) (bench/results/sim_vs_bench_2026-12-01_954a1bf{,_profilefb00b9b}.json). On the 0bfafc6
  call's runs (an older runtime: multinomial oracle walks, pageable staging) the old profile stays closer on the same
  24 configurations, 1.3% / 1.4% / 4.0% against 3.2% / 3.8% / 7.0%
  (bench/results/validation_2026-12-01_0bfafc6_profile{fb00b9b_no_tp2ar,954a1bf}.json).
  The profile is meant for the current runtime, so the new one ships.
  Earlier calls: the fb00b9b profile (operator traces of fb00b9b, runtime block from that call's runs) gave 1.4% /
  1.8% / 7.3% on the 0bfafc6 call's runs, another call (the worst rows the TP-2 autoregressive ones, 6-7%
  optimistic); on the 72bd305 call's runs (the first with `parallel.gc=freeze`) 2.1% / 2.1% / 4.4%
  (bench/results/validation_2026-11-30_72bd305.json), on the c52c1c3 call's 1.8% / 2.2% / 8.6%
  (bench/results/validation_2026-11-30_c52c1c3.json; the worst row there,
  async_bs4_w8_d2 at 313.6 tok/s against 348.3 for its repeat, held a 78 ms verify: a full garbage collection, which
  `parallel.gc=freeze` keeps out of the decode loop since 5ba2b30), and on its own call's 24 held-out runs 2.4% / 3.6%
  / 15.4% (bench/results/validation_2026-11-30_fb00b9b.json; repeats spread up to 14.6% there). A profile refitted on
  the 0bfafc6 call (bench/results/profile_h200_2026-12-01_0bfafc6.json) gave 1.6% / 1.9% / 8.9% on its runs
  (bench/results/validation_refit_2026-12-01_0bfafc6.json), 1.9% / 2.2% / 5.1% on the 72bd305 runs, 1.9% / 2.7% / 9.0%
  on the c52c1c3 runs and 2.1% / 3.3% / 14.4% on the fb00b9b runs; one refitted on the 72bd305 call
  (bench/results/profile_h200_2026-11-30_72bd305.json) gave 1.9% / 2.4% / 5.5% on its own runs, 0.8% / 1.4% / 10.5%
  on the c52c1c3 runs and 2.8% / 3.8% / 16.1% on the fb00b9b runs: neither was better across calls of one runtime,
  so the fb00b9b profile stayed until 954a1bf. The c52c1c3 profile gave 5.0% /
  5.7% / 18.5% on the fb00b9b runs (bench/results/profile_h200_2026-11-30_c52c1c3.json), and the 1bed0ab profile
  before them was 7.9% / 7.7% / 11.0% pessimistic on the c52c1c3 runs (its verify steps predate target_qkv_rope;
  bench/results/validation_kept1bed0ab_2026-11-30_c52c1c3.json).
  Before that, on the runs of git 36f9b02 (`kernels.refill_graph`), the 1bed0ab profile got tokens/s within
  2.4% / 2.3% / 6.2% though it priced the draft's forwards 10% high; the profile refitted on 36f9b02's traces
  (bench/results/profile_h200_2026-11-30_36f9b02.json) validated worse, 2.4% / 3.5% / 14.2%: the step profiler
  then timed the 1B expansions at w 4 and 8 only, over a 64-slot tree region
  (bench/results/validation_refit_2026-11-30_36f9b02.json).
  Before that, on the runs of 16f4d67 (`kernels.draft_head`,
  two row blocks per attention program, the receive spin): a profile refitted on 16f4d67's own operator traces
  (bench/results/profile_h200_2026-11-30_16f4d67.json) validated worse on these runs: 3.0% / 3.9% / 11.0%
  (median / mean / max tokens/s, bench/results/validation_2026-11-30_2e1d982.json), 3-11% optimistic on the
  w 4 async and serial runs: the graph-replayed steps it timed got faster by more than the in-run expansions did
  (1.20-1.35 ms in the runs, with run-to-run host speed differences of up to 1.5x in the draft's host spans).
- Oracle runs (every validation run) walked the acceptance oracle with a `torch.multinomial` per rank until
  2026-12-01: ~52 us per walk on the H200 host, one walk inside each verify span and one in each draft re-root, both on
  the critical path. Runs since 9979d58 (`spec.oracle_draws=uniform`, ~2.5 us per walk) no longer spend it; the
  954a1bf profile's runtime block is fitted on such runs. The older profile, fitted on multinomial runs, priced
  their iterations 0.1-0.2 ms long with the host-path changes below.
- From the seventeenth to the twenty-first session only one GPU was lent, and the host-path changes (in-graph
  staging and spin readback, e93e4c1: verify spans -0.10 to -0.18 ms and expansion spans -0.09 to -0.20 ms
  colocated, bench/results/host_io_ab_2026-12-01_{ab44f24,e93e4c1}.json; early norms, c863bc6: the 8B step
  -0.04 to -0.08 ms) were applied to the fb00b9b profile as a what-if (`sim.runtime_delta`: `step_extra_s` -0.21 ms,
  `expand_extra_s` -0.10 ms, `draft_round_s` -0.05 ms, `ar_step_extra_s` -0.065 ms). Checked on the 954a1bf runs,
  the what-if overshoots: 4.8% / 4.8% / 9.5% optimistic, against 3.1% / 4.0% / 10.4% pessimistic without it, and
  2.3% / 3.1% / 9.3% for the refit. `sim.runtime_delta` stays for what-ifs; it is no substitute for a refit.
- Async runs with d auto settle where the runtime's DepthTuner settles, and the simulated tuner can settle
  elsewhere (the d column: configured / measured / simulated). On these runs the runtime settled at d 4 for
  bs 8 w 8 and bs 4 w 4, and the simulated tuner at d 3. Its trial rounds at d 4 priced each w 8 expansion at
  1.19 ms against 1.15-1.17 measured, and with four expansions against a 4.45 ms verify that made d 4 look slower.
  Those rows come out 2-8% pessimistic. The runtime's own choice is no steadier: bs 16 w 8 settled at d 4 in
  one repeat and at d 3 in the other. Their replays diverge (the recorded path ran deeper than the simulated
  tree: 22-30 of ~110 verifies), and the simulated accepted length is 2.03-2.12 against 2.22-2.38 measured. The
  fixed-d async rows are within -2.3% to +5.8%. A tuner's choice between two near-equal depths is as fragile as the
  3% by which the expansion's price is off.
- Expansions wider than 16 rows: on the 72bd305 runs the profile priced the 32-row 1B forward of async_bs8_w32_d3 at
  1.30 ms where the runs took 1.48 ms (16 rows: 1.23 ms, exact); the runs' host time per expansion was ~0.15 ms at 32
  rows as at 16 (in-run against replayed steps), so the miss was device time: the runtime's attention fell off the
  wide tile at 32 tokens (20.7 us per layer against 10.6 at 16 rows, ctx 1280) and its GEMMs took untuned tiles.
  Since 800833c the runtime avoids both (the 32-row step 1.368 -> 1.233 ms,
  bench/results/step_variants_2026-12-01_800833c_wide.json), and on the 0bfafc6 runs the 32-row forward takes
  1.36-1.37 ms: the profile's 1.30 ms is 4-5% short, and async_bs8_w32_d3's tokens/s within 2.2%. There w 32 is the
  best measured configuration (407.0 tok/s over two repeats, the w 16 pick 396.1) and the simulator's pick among the
  measured ones. The profile refitted on that call (which timed attention at 32 tokens) charges 9.4 us per real row
  of an expansion (2.0 in the shipped one) and prices the 32-row forward at 1.49 ms, 9% high. At workload a (1K-token
  prompts) both profiles rank bs 8 d 3 at w 32 above w 16 (shipped 417.1 against 408.3 tok/s, refit 414.0 against
  409.0). Measured there: w 32 1-7% below w 16 at 800833c (394.4 / 371.2 against 398.4 / 397.0, interleaved,
  bench/results/width_ab_2026-12-01_800833c.json; 8% below at d93df8d), and 1.6% above at 56051f4 on another host
  (415.8 against 409.1 and 385.6 for two runs of w 16, bench/results/runtime_shape_realistic_2026-12-01_56051f4_*.json):
  the sign of the gap changes between hosts and calls. The autoconfig search stops at w 16 by default.
  The 954a1bf profile prices the 32-row forward at 1.40 ms against 1.34-1.37 ms measured in its call's runs, where
  w 32 is again the best measured configuration (477.3 / 457.1 tok/s) and the simulator's pick among the measured.
- Since git 23cfdda a one-GPU target runs its projections through the skinny GEMMs with PDL launches
  (`kernels=graphs`). Since 68741c4 the operator profile times each GEMM with the kernel the runtime runs for
  that matrix, TP degree and row count (calibration/runtime_kernels.py) and whole steps with the `kernels=graphs`
  switches, but still sums kernels timed one by one: the fitted `step_extra_s` (and `ar_step_extra_s`) may be
  negative (down to -1 ms) to correct the sum (68741c4: -0.10 ms and -0.37 ms, from -0.51 / -0.76 ms with the
  cuBLAS-shaped operators); a TP > 1 target keeps cuBLAS for its all-reduced projections, hence its own
  `tp_step_extra_s`, fitted on tp2_chain_g4 alone; a TP > 1 autoregressive step's host cost was not modelled
  apart from a TP > 1 verify's until 954a1bf (above; at 68741c4 the held-out TP-2 autoregressive runs took
  ~0.36 ms per step more than the model, over-predicted by 10-14%; since their verdict is the graph's own argmax,
  8c7030b, they are within 2-10%).
- The profile's additive form (operators + small kernels + the runtime block's host costs) approximates
  max(host, device) by a sum. The small kernels of captured steps are counted per role (`step_overhead_graph`;
  the fit report's `operators.step_overhead_graph.by_kind` / `by_preset`: within +-3.3% per preset on average);
  prefills keep one `step_overhead` line over all launches.
- The attention form's FLOP feature (tokens x kv_len) carries no head count, so one coefficient serves GQA
  shapes from 3 to 64 query heads.
- Small models and the colocated loop. At the real pair's shapes (SmolLM2-135M + its 4-layer draft, one GPU, the draft
  colocated) the 954a1bf profile priced the 135M's chained autoregressive step 13% long, its chain verify 19% long and
  the draft's one-row expansion 54% long: tokens/s -11% (AR) and -22% (chain) on the 307a064 runs
  (`validation_2026-12-01_307a064_real_pair_shapes.json`), -11% to -15% on the 5c7897b runs. Two causes, both fixed in
  the current profile: the draft's per-layer RoPE launches, which one step-overhead line over all launches could not
  see (`step_overhead_graph`), and the runtime block, fitted on two-group 8B / 1B runs, whose per-step host costs
  (0.14-0.17 ms) do not fit the colocated loop (0.06-0.10 ms per step: one Python loop, no messages):
  `runtime.loops.colocated`. Held out, the current profile gives -3.9% (AR) / -8.1% (chain) on the 307a064 runs and
  -3.3% / +0.5% / +4.2% (AR, chain, serial) on the 5c7897b runs
  (`validation_2026-12-01_{307a064,5c7897b_colocated}_profile191a51e.json`). On a third call's five runs (5fa8232),
  none of them fitted: +0.9% / +8.3% (8B / 1B chain, serial) and -3.8% / +3.1% / +4.3% (small AR, chain, serial),
  where the 954a1bf profile gives -3.8% / +4.9% and -11.3% / -12.7% / -11.9%
  (`validation_2026-12-01_5fa8232_colocated_profile{191a51e,954a1bf}.json`). Fitted on the small shapes' colocated
  runs alone, the colocated costs price the 8B / 1B colocated runs 5-6% optimistic; hence the fit on both sizes. Why
  the sizes differ (`calibration/span_split.py`, runs with `trace.graph_events=true`,
  `span_split_2026-12-01_82f9825_colocated_events.json`): the operator model prices the 8B verify's device time 2%
  short in the run (+83 to +91 us: its GEMMs, priced by the standalone fit) and the small draft's within 8 us; the
  host part of a chain step is the same at both sizes (75-88 us), of a serial one not (153-201 us at 8B / 1B against
  61-76 us: the host's slow speed state in that run, not the model size; the host-speed item above). The real
  pair's runs on two GPUs (real weights, the instruction table's acceptance drawn, not replayed;
  `sim_vs_bench_2026-12-01_954a1bf_real_pair_instruction{_profile191a51e,}.json`) remain 4-20%
  pessimistic (AR -4.8%, chain -14.1%, serial -20.1%, async -4.3% / -16.3%; the 954a1bf profile: -4% to -26%): their
  two-group host costs come from 8B / 1B runs (`runtime.loops.chain` from chain_g4 took the chain row from -26.0%); no
  two-group run of the small pair has traces yet.
- In-graph pricing without the small kernels' counts (`profiles/h200_graph.json`, the twenty-fifth session):
  `attention_graph` and one device-only step-overhead line (0.88 us per kernel); its runtime block held host time
  alone (ar_step_extra_s +0.044 ms, step_extra_s +0.161 ms). It priced the captured steps' device spans within 5.8% on
  average, did as well as the default on the held-out runs above (2.4% median, 9.0% max), but no better at the real
  pair's shapes (AR -10.4%, chain -27.2%): the small kernels of expansions were priced 18-40% short, and the runtime
  block's per-forward host costs came from the two-group runs.
- KV keeps and compactions: with CUDA graphs (since 847d037) the runtime applies both as the first kernel of the
  next graph step; the simulator costs a draft compaction there by its bytes (the analytic prior, no launch) and
  the target's keep by the fitted `keep_s` (the runtime's `step.keep` span: host bookkeeping, ~0.01 ms). Without
  graphs, a deferred compaction costs the fitted `compact_s` (the `step.compact` spans of eager runs, ~0.2 ms of
  host time on the H200 host) where the profile has it (the profile format has no compaction operator).
"""


def method_text(fitted: list[str], workload: str = "512 prompt + 128 new tokens", fit_folders: list[str] | None = None,
                runs: str = "") -> str:
    """METHOD for runs of `workload`, with item 5 naming the configurations a profile's `runtime` block was
    fitted on, if any, and the folders of those runs when they are not this table's (`runs`)."""
    method = METHOD.replace("{workload}", workload)
    if not fitted:
        return method
    head, _, tail = method.partition("5. **Held out by construction.**")
    rest = tail[tail.index("\n\n") + 2:]
    other = [f for f in fit_folders or [] if Path(f).name != Path(runs).name]  # a call's folder: date + commit
    where = (f" (runs in {', '.join(f'`{f}`' for f in other)}, not this table's: every run below is unseen by the "
             f"fit)" if other else "")
    return head + (f"5. **Held out.** The profile's operators are fitted from operator traces; its `runtime` block\n"
                   f"   (the runtime loop's host costs, simulator/runtime_fit.py) on the measured runs of\n"
                   f"   {', '.join(fitted)}{where}. Those configurations (and their repeats) are left out of the\n"
                   f"   table below: every row is a held-out configuration.\n\n") + rest


def _workload(rows: list[dict[str, Any]]) -> str:
    """The oracle pair's workload (the most common among the rows; older results did not record it)."""
    seen = [r["workload"] for r in rows if r.get("workload") and r.get("oracle")]
    return max(sorted(set(seen)), key=seen.count) if seen else "512 prompt + 128 new tokens"


def write_doc(path: Path, result: dict[str, Any]) -> None:
    """docs/VALIDATION.md from the comparison result (measured numbers only)."""
    rows, s = result["rows"], result["summary"]
    lines = ["# Simulator validation against the runtime", "",
             f"Measured on {result.get('gpu') or '?'} (runs in `{result['runs']}`); compared {result['date']}, git "
             f"{result['git_sha']}; profile `{result['profile']}` ({result.get('profile_cost_model', '')}). "
             f"Generated by `calibration/validate.py compare`; raw numbers in `{result['json']}`.", "",
             "> Result files cited here as `bench/results/...` are in git history (commit 5ced2b87: `git show "
             "5ced2b87:bench/results/NAME`); those that figures, tests and validation read are in `data/measured/` "
             "(see its MANIFEST.json).", "",
             method_text(result.get("fitted_configs", []), _workload(rows),
                         result.get("fitted_run_folders"), result.get("runs", "")), "## Results", "",
             "| config | split | bs | w | d (cfg/meas/sim) | tok/s meas | tok/s sim | err | iter ms meas | iter ms sim "
             "| err | verify ms meas | sim | draft fwd ms meas | sim | accept meas/sim |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t, it, v, e, a = (r[k] for k in ("tokens_per_s", "iteration_time_s", "verify_time_s", "expand_per_forward_s",
                                         "mean_accept_len"))
        lines.append(
            f"| {r['name']} | {r['split']} | {r['bs']} | {r['w']} | "
            f"{r['d_config']}/{_d(r.get('d_measured'))}/{r['d_used']} | "
            f"{fmt(t['measured'], 1, 1)} | {fmt(t['simulated'], 1, 1)} | {pct(t['error'])} | "
            f"{fmt(it['measured'], 1e3)} | {fmt(it['simulated'], 1e3)} | {pct(it['error'])} | "
            f"{fmt(v['measured'], 1e3)} | {fmt(v['simulated'], 1e3)} | {fmt(e['measured'], 1e3)} | "
            f"{fmt(e['simulated'], 1e3)} | {fmt(a['measured'])}/{fmt(a['simulated'])} |")
    lines += ["", "| metric | configs | median abs error | max abs error |", "|---|---|---|---|"]
    for key in ("tokens_per_s", "iteration_time_s", "verify_time_s", "expand_per_forward_s"):
        m = s[key]
        if m.get("n"):
            lines.append(f"| {key} | {m['n']} | {100 * m['median_abs_error']:.1f}% | {100 * m['max_abs_error']:.1f}% |")
    noise = result.get("run_to_run_tokens_per_s", {})
    if noise.get("n"):
        lines += ["", f"Run-to-run spread of measured tokens/s between repeats of one configuration (max / min - 1, "
                      f"{noise['n']} configs): median {100 * noise['median']:.1f}%, max {100 * noise['max']:.1f}%; "
                      f"the measurement's own error floor."]
    if "decision_agreement" in result:
        lines += ["", *agreement_lines(result["decision_agreement"], "replayed acceptance")]
    rows = result.get("rows", [])
    diverged = [(r["name"], r["replay_divergences"]) for r in rows if r.get("replay_divergences")]
    if any("replay_divergences" in r for r in rows):
        total = sum(n for _, n in diverged)
        lines += ["", f"Replay divergences (verifies whose recorded draft ranks the simulated proposal could not "
                      f"follow exactly: a recorded node missing, or the recorded bonus proposed): {total} in "
                      f"{len(diverged)} of {len(rows)} runs"
                  + (f" ({', '.join(f'{name} {n}' for name, n in diverged)})." if diverged else ".")]
    ac = result.get("autoconfig", {})
    lines += ["", "## Auto-configuration", ""]
    if "measured_async" in ac:
        fitted = [r["name"] for r in ac["measured_async"] if r.get("fitted")]
        lines.append(f"Simulator ranking of the {len(ac['measured_async'])} measured async_tree configurations "
                     + (f"({', '.join(fitted)} among the profile's fit runs) " if fitted else "")
                     + f"(acceptance: {ac['acceptance']}): Spearman {fmt(ac['spearman_measured_vs_predicted'])} "
                     f"against the measured ranking; best measured `{ac['best_measured']}`, simulator's pick "
                     f"`{ac['simulator_pick_among_measured']}` (regret {pct(ac['regret_of_simulator_pick'])} of "
                     f"measured tokens/s).")
        best = ac.get("autoconfig_search", {}).get("best") or {}
        if best:
            search = ac["autoconfig_search"]
            lines.append(f"\nAutoconfig search (split {search['split']}, bs {tuple(search['bs'])}, w "
                         f"{tuple(search['w'])}, d auto/1..8) picks bs={best['bs']} w={best['w']} d={best['d']} "
                         f"(d used {best['d_used']}), predicted {best['tokens_per_s']:.1f} tok/s.")
        pm = ac.get("autoconfig_pick_measured")
        if pm:
            lines.append(f"Measured as `{pm['name']}`: {pm['measured_tokens_per_s']:.1f} tok/s = "
                         f"{100 * pm['fraction_of_best_measured']:.1f}% of the best measured configuration "
                         f"({'within' if pm['within_5_percent'] else 'NOT within'} 5%).")
        else:
            lines.append("The pick was not among the measured configurations.")
    else:
        lines.append(ac.get("note", "not run"))
    notes = result.get("run_notes", {})
    if notes.get("failed") or notes.get("skipped") or notes.get("real_pair"):
        lines += ["", f"Not measured: failed {sorted(notes.get('failed', {}))}, skipped (budget) "
                      f"{notes.get('skipped', [])}." + (f" Real pair: {notes['real_pair']}." if notes.get("real_pair")
                                                        else "")]
    lines += ["", LIMITS]
    atomic_write_text(path, "\n".join(lines))
