"""The calibration loop: measure the runtime, fit the simulator's profile, validate the simulator against measured
runs. Plain scripts (argparse, no Hydra) that run on a bare GPU machine where they measure, on CPU where they compare.

- `message_latency`: a leader message's delivery inside measured runs (traces.jsonl), per direction.
"""
