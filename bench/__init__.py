"""Benchmarks: plain scripts run on GPU machines (see bench_kernels.py); results land in runs/bench/ (ignored by git);
`python -m bench.promote` copies one that figures, tests or docs need into data/measured/."""
