"""What a configuration implies for the loop that runs it, read alike by the runtime (which loop it runs) and the
simulator (which costs it charges). Pure functions of a validated `ExperimentConfig`."""

from __future__ import annotations

from conf.schema import ExperimentConfig


def uses_draft(config: ExperimentConfig) -> bool:
    """Whether the mode runs a draft model."""
    return config.spec.mode != "autoregressive"


def draft_tp(config: ExperimentConfig) -> int:
    """TP degree the draft runs at: its own group, or the target's GPUs when it shares them."""
    return config.parallel.draft_gpus or config.parallel.target_gpus


def chained_autoregressive(config: ExperimentConfig) -> bool:
    """Whether the runtime chains autoregressive steps on the device (greedy, CUDA graphs, a one-GPU target): no host
    time between steps. The runtime takes this loop when its target worker can chain too."""
    return (config.spec.mode == "autoregressive" and config.kernels.cuda_graphs
            and config.parallel.target_gpus == 1 and config.spec.temperature == 0)


def loop_shape(config: ExperimentConfig) -> str:
    """The runtime loop whose host costs a profile may hold apart (simulator/profile.py LOOP_SHAPES): "colocated" (a
    draft mode at parallel=1x0: one Python loop drives a one-GPU target and its draft), "chain" (chain drafting on
    its own draft group), else "" (tree modes on two groups, autoregressive runs, a TP > 1 target with a colocated
    draft: the profile's top-level costs)."""
    par = config.parallel
    if not uses_draft(config):
        return ""
    if par.draft_gpus == 0:
        return "colocated" if par.target_gpus == 1 else ""
    return "chain" if config.spec.mode == "chain" else ""
