"""Benchmarks a user runs: kernels, the runtime against its peers, simulator speed, step replays, code A/B. Plain
scripts run on GPU machines (see bench_kernels.py); results land in runs/bench/ (ignored by git);
`python -m bench.promote` copies one that figures, tests or docs need into data/measured/. Profiling and validation
of the simulator: calibration/."""
