"""The calibration loop (profile the runtime, fit the simulator's profile, validate the simulator on measured runs).
Plain argparse scripts, no Hydra: the profilers run on a bare GPU machine, the comparisons on CPU.

Profiling (GPU; `python -m calibration.profile_ops` writes the traces calibrate.py fits):
- `profile_ops`: operator shapes (GEMMs by the runtime's own kernel, attention, launches) and its sections;
- `profiler`: the timing harness profile_ops and profile_steps share (run state, graph / eager timing, --quick table);
- `profile_steps`: whole runtime steps (verify, expansion; eager or CUDA graphs), the steps section;
- `graph_profile`: each kernel's exposed time inside a CUDA-graph replay, the step_graphs section;
- `profile_comm`: all-reduce, point-to-point and the leaders' message ping-pong between 2 ranks, the comm section;
- `runtime_kernels`: which kernel the `kernels=graphs` runtime runs per weight matrix (shared with bench/);
- `profile_step`: where one eager step's time goes (torch.profiler), a diagnostic.

Validation (CPU on measured run dirs; GPU for `validate run`):
- `validate`: `run` measures the validation configurations, `compare` simulates measured run dirs and writes the
  table, the parity plot and the JSON (the user command: README, "check the simulator against your runs");
- `validation_replay`: a measured run as a simulator run (its config, the profile, its verify outcomes replayed);
- `validation_doc`: docs/VALIDATION.md from a comparison;
- `sim_vs_bench`: the simulator against a runtime benchmark's results (acceptance drawn from the table);
- `span_split`: a step's time beyond the device price, split into device error and host time;
- `message_latency`: a leader message's delivery inside measured runs, per direction.
"""
