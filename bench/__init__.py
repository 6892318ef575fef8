"""Benchmarks: plain scripts run on GPU machines (see bench_kernels.py); results land in bench/results/."""
