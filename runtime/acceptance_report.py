"""Acceptance report of a (target, draft) pair on held-out prompts: `python -m runtime.acceptance_report`.

For every prompt the target's greedy continuation is generated once; every position of it is then a tree
root (the last verified token), measured with teacher forcing, i.e. the draft always sees the true prefix:

- positional table: `p[depth][rank]` = P(the target's next token is the draft's rank-`rank` candidate at
  that depth | every ancestor on the true path was among the top-`ranks` candidates of its parent);
- chain: mean tokens per verify for gamma draft tokens = 1 (bonus) + the run of draft-argmax hits from the
  root, capped at gamma. Exact: a chain verify accepts its leading tokens that equal the target's;
- tree: the best-first draft tree is grown for real, batched over roots: `bs - 1` nodes are added in
  decreasing cumulative draft log-prob, each added node runs the draft (prefix KV + tree attention over its
  ancestors) and offers its top-`ranks` children. Tokens per verify = 1 + depth of the deepest node whose
  whole path equals the target's continuation (`runtime.verify.greedy_verify` semantics; checked against it
  on a sample). The tree of size bs is the first bs nodes of the bs_max tree, so all sizes come from one run.

The continuation runs `margin_tokens` past the last root so matches near it are not cut short; a
continuation that ends with EOS ends there (real decoding stops there too). Everything runs in fp32.
Writes JSON: {"kind", "positional", "chain", "tree", "by_domain", "check", "meta"}, loadable as
`acceptance.file` (conf/acceptance/smollm2.yaml). It does not touch the engine: the tree here is the ideal
best-first tree (one node per draft forward), not the async engine's d x w expansion schedule.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from runtime.distill import (
    load_draft,
    load_teacher,
    load_tokenizer,
    pick_device,
    read_jsonl,
    resolve,
    teacher_generate,
)

DOMAINS = ("code", "instruction")
DEFAULT_GAMMAS = list(range(1, 9))
DEFAULT_TREE_SIZES = [4, 8, 16, 32]


# ------------------------------------------------------------------------------- draft with tree attention


class DraftRunner:
    """Functional forward of an HF Llama draft with explicit K/V: a causal prefix pass, and batched passes
    of one tree node per root that see a shared prefix (up to each root) plus the root's own tree slots."""

    def __init__(self, model) -> None:
        self.m = model.model
        self.lm_head = model.lm_head
        cfg = model.config
        self.h, self.kvh, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps = cfg.rms_norm_eps
        self.inv_freq = self.m.rotary_emb.inv_freq.float()
        self.num_layers = cfg.num_hidden_layers

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x [R, Q, heads, D], pos [R, Q]; HF's rotate-half layout.
        freqs = pos[..., None].float() * self.inv_freq.to(x.device)
        emb = torch.cat([freqs, freqs], dim=-1)[:, :, None, :]
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin

    @staticmethod
    def _norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, shared: list[tuple[torch.Tensor, torch.Tensor]] | None,
                 shared_mask: torch.Tensor | None, own: list[tuple[torch.Tensor, torch.Tensor]],
                 own_slots: torch.Tensor, own_mask: torch.Tensor) -> torch.Tensor:
        """ids, pos [R, Q]; shared K/V per layer [Ns, kvh, D] with mask [R, Q, Ns]; own K/V per layer
        [R, M, kvh, D], written at own_slots [Q] (same for every row), seen through own_mask [R, Q, M].
        Returns fp32 logits [R, Q, V]."""
        R, Q = ids.shape
        g = self.h // self.kvh
        x = self.m.embed_tokens(ids)
        scale = self.d ** -0.5
        for li, layer in enumerate(self.m.layers):
            at = layer.self_attn
            y = self._norm(x, layer.input_layernorm.weight, self.eps)
            q = self._rope(at.q_proj(y).view(R, Q, self.h, self.d), pos).view(R, Q, self.kvh, g, self.d)
            k = self._rope(at.k_proj(y).view(R, Q, self.kvh, self.d), pos)
            v = at.v_proj(y).view(R, Q, self.kvh, self.d)
            ok, ov = own[li]
            ok[:, own_slots] = k
            ov[:, own_slots] = v
            s_own = torch.einsum("rqkgd,rmkd->rkgqm", q, ok) * scale
            s_own = s_own.masked_fill(~own_mask[:, None, None], float("-inf"))
            if shared is not None:
                sk, sv = shared[li]
                s_sh = torch.einsum("rqkgd,nkd->rkgqn", q, sk) * scale
                s_sh = s_sh.masked_fill(~shared_mask[:, None, None], float("-inf"))
                p = torch.softmax(torch.cat([s_sh, s_own], -1).float(), -1).to(q.dtype)
                ns = sk.shape[0]
                o = torch.einsum("rkgqn,nkd->rqkgd", p[..., :ns], sv) + \
                    torch.einsum("rkgqm,rmkd->rqkgd", p[..., ns:], ov)
            else:
                p = torch.softmax(s_own.float(), -1).to(q.dtype)
                o = torch.einsum("rkgqm,rmkd->rqkgd", p, ov)
            x = x + at.o_proj(o.reshape(R, Q, self.h * self.d))
            y = self._norm(x, layer.post_attention_layernorm.weight, self.eps)
            x = x + layer.mlp(y)
        return self.lm_head(self._norm(x, self.m.norm.weight, self.eps)).float()

    @torch.no_grad()
    def prefix(self, seq: torch.Tensor) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Causal pass over seq [N]: (fp32 logits [N, V], per-layer (K, V) [N, kvh, D])."""
        n, dev = seq.shape[0], seq.device
        dtype = self.m.embed_tokens.weight.dtype
        own = [(torch.zeros(1, n, self.kvh, self.d, device=dev, dtype=dtype),
                torch.zeros(1, n, self.kvh, self.d, device=dev, dtype=dtype)) for _ in range(self.num_layers)]
        causal = torch.ones(n, n, dtype=torch.bool, device=dev).tril()[None]
        pos = torch.arange(n, device=dev)[None]
        logits = self._forward(seq[None], pos, None, None, own, torch.arange(n, device=dev), causal)
        return logits[0], [(k[0], v[0]) for k, v in own]

    @torch.no_grad()
    def nodes(self, tokens: torch.Tensor, positions: torch.Tensor, shared, root_pos: torch.Tensor, own,
              slot: int, anc: torch.Tensor) -> torch.Tensor:
        """One node per root: tokens, positions, root_pos [R]; the shared prefix is visible up to and
        including root_pos; anc [R, M] marks the node's tree slots (ancestors + itself). -> logits [R, V]."""
        ns = shared[0][0].shape[0]
        smask = (torch.arange(ns, device=tokens.device)[None] <= root_pos[:, None])[:, None]
        slots = torch.tensor([slot], device=tokens.device)
        return self._forward(tokens[:, None], positions[:, None], shared, smask, own, slots, anc[:, None])[:, 0]


# ------------------------------------------------------------------------------------ measurement per prompt


@dataclass
class PromptStats:
    """Counts of one prompt (summed over prompts for a domain)."""

    roots: int
    pos_hits: torch.Tensor  # [depths, ranks] int64
    pos_total: torch.Tensor  # [depths] int64
    chain_sum: torch.Tensor  # [len(gammas)] tokens per verify summed over roots
    tree_sum: torch.Tensor  # [len(tree_sizes)]
    top1: int  # roots whose first draft token (rank 0) is right


def true_ranks(logits: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
    """rank[t] (t >= 1) of seq[t] among logits[t-1] (0 = argmax; ties count against it); rank[0] = -1."""
    tgt = logits[:-1].gather(1, seq[1:, None])
    ranks = (logits[:-1] > tgt).sum(1)
    return torch.cat([ranks.new_full((1,), -1), ranks])


def grow_trees(runner: DraftRunner, seq: torch.Tensor, logits: torch.Tensor, kv, roots: torch.Tensor,
               num_nodes: int, k: int) -> dict[str, torch.Tensor]:
    """Best-first trees of `num_nodes` draft nodes under each root position (batched over roots).

    Returns per root r and node n (in insertion order): token, parent (-1 = root), depth (>= 1).
    """
    R, dev = roots.shape[0], seq.device
    dtype = runner.m.embed_tokens.weight.dtype
    own = [(torch.zeros(R, num_nodes, runner.kvh, runner.d, device=dev, dtype=dtype),
            torch.zeros(R, num_nodes, runner.kvh, runner.d, device=dev, dtype=dtype))
           for _ in range(runner.num_layers)]
    tok = torch.zeros(R, num_nodes, dtype=torch.long, device=dev)
    parent = torch.full((R, num_nodes), -1, dtype=torch.long, device=dev)
    depth = torch.zeros(R, num_nodes, dtype=torch.long, device=dev)
    score = torch.zeros(R, num_nodes, device=dev)
    anc = torch.zeros(R, num_nodes, num_nodes, dtype=torch.bool, device=dev)
    cand_s = torch.full((R, k * num_nodes), float("-inf"), device=dev)
    cand_t = torch.zeros(R, k * num_nodes, dtype=torch.long, device=dev)
    cand_p = torch.full((R, k * num_nodes), -1, dtype=torch.long, device=dev)
    top = torch.log_softmax(logits[roots], -1).topk(k, dim=-1)
    cand_s[:, :k], cand_t[:, :k] = top.values, top.indices
    rows = torch.arange(R, device=dev)
    for n in range(num_nodes):
        best = cand_s.argmax(1)
        tok[:, n], parent[:, n], score[:, n] = cand_t[rows, best], cand_p[rows, best], cand_s[rows, best]
        cand_s[rows, best] = float("-inf")
        has_parent = parent[:, n] >= 0
        par = parent[:, n].clamp(min=0)
        depth[:, n] = torch.where(has_parent, depth[rows, par] + 1, torch.ones_like(par))
        anc[:, n] = torch.where(has_parent[:, None], anc[rows, par], torch.zeros_like(anc[:, n]))
        anc[:, n, n] = True
        if n == num_nodes - 1:
            break
        out = runner.nodes(tok[:, n], roots + depth[:, n], kv, roots, own, n, anc[:, n])
        top = torch.log_softmax(out, -1).topk(k, dim=-1)
        sl = slice(k * (n + 1), k * (n + 2))
        cand_s[:, sl], cand_t[:, sl] = score[:, n:n + 1] + top.values, top.indices
        cand_p[:, sl] = n
    return {"token": tok, "parent": parent, "depth": depth}


def tree_accepted(tree: dict[str, torch.Tensor], seq: torch.Tensor, roots: torch.Tensor,
                  sizes: list[int]) -> torch.Tensor:
    """[R, len(sizes)] tokens per verify (1 + deepest node whose path equals the continuation)."""
    tok, parent, depth = tree["token"], tree["parent"], tree["depth"]
    R, M = tok.shape
    n_seq = seq.shape[0]
    idx = roots[:, None] + depth
    true = torch.where(idx < n_seq, seq[idx.clamp(max=n_seq - 1)], torch.full_like(idx, -1))
    match = torch.zeros(R, M, dtype=torch.bool, device=tok.device)
    rows = torch.arange(R, device=tok.device)
    for n in range(M):
        par_ok = torch.where(parent[:, n] >= 0, match[rows, parent[:, n].clamp(min=0)],
                             torch.ones_like(match[:, n]))
        match[:, n] = par_ok & (tok[:, n] == true[:, n])
    deep = torch.where(match, depth, torch.zeros_like(depth))
    return torch.stack([1 + deep[:, :bs - 1].max(1).values for bs in sizes], 1)


def verify_sample(tree: dict[str, torch.Tensor], seq: torch.Tensor, roots: torch.Tensor, bs: int,
                  accepted: torch.Tensor, count: int) -> None:
    """Cross-check `tree_accepted` against the engine's `greedy_verify` on the first `count` roots.

    The target's argmax after a node on the true path is the next continuation token; off the path it
    cannot matter (such a node is rejected, and so are its descendants), so it is set to -2 (no token).
    """
    from runtime.verify import greedy_verify

    seq_c = seq.cpu()
    for r in range(min(count, roots.shape[0])):
        root = int(roots[r])
        tokens = torch.cat([seq_c[root].view(1), tree["token"][r, :bs - 1].cpu()])
        parents = torch.cat([torch.tensor([-1]), tree["parent"][r, :bs - 1].cpu() + 1])  # root = node 0
        on_path = torch.zeros(bs, dtype=torch.bool)
        depth = torch.zeros(bs, dtype=torch.long)
        on_path[0] = True
        for i in range(1, bs):
            p = int(parents[i])
            depth[i] = depth[p] + 1
            t = root + int(depth[i])
            on_path[i] = bool(on_path[p]) and t < seq_c.shape[0] and int(seq_c[t]) == int(tokens[i])
        nxt = root + depth + 1
        argmax = torch.where(on_path & (nxt < seq_c.shape[0]), seq_c[nxt.clamp(max=seq_c.shape[0] - 1)],
                             torch.full_like(nxt, -2))
        _, num, _ = greedy_verify(argmax, tokens, parents, bs)
        if int(num) + 1 != int(accepted[r]):
            raise AssertionError(f"root {root}: greedy_verify accepts {int(num)} + 1 tokens, the report "
                                 f"{int(accepted[r])}")


def measure_prompt(runner: DraftRunner, seq: torch.Tensor, prompt_len: int, num_roots: int, depths: int,
                   ranks: int, gammas: list[int], sizes: list[int], batch_roots: int,
                   verify_count: int = 0) -> PromptStats:
    """All statistics of one prompt + continuation `seq` [N]; roots are positions prompt_len-1 ... ."""
    logits, kv = runner.prefix(seq)
    n = seq.shape[0]
    last_root = min(prompt_len - 1 + num_roots, n - 1)  # exclusive: the last token has nothing after it
    roots = torch.arange(prompt_len - 1, last_root, device=seq.device)
    rank = true_ranks(logits, seq)
    # positional: t = root + 1 + d; condition: ranks at root+1 .. root+d all < ranks
    pos_hits = torch.zeros(depths, ranks, dtype=torch.long)
    pos_total = torch.zeros(depths, dtype=torch.long)
    alive = torch.ones(roots.shape[0], dtype=torch.bool, device=seq.device)
    for d in range(depths):
        t = roots + 1 + d
        valid = alive & (t < n)
        r_t = rank[t.clamp(max=n - 1)]
        pos_total[d] = int(valid.sum())
        hit = valid & (r_t < ranks)
        pos_hits[d] = torch.bincount(r_t[hit], minlength=ranks)[:ranks].cpu()
        alive = hit
    # chain: run of rank-0 hits from each root
    hits0 = rank == 0
    chain_sum = torch.zeros(len(gammas))
    run = torch.zeros(roots.shape[0], dtype=torch.long, device=seq.device)
    going = torch.ones_like(alive)
    for d in range(max(gammas)):
        t = roots + 1 + d
        going = going & (t < n) & hits0[t.clamp(max=n - 1)]
        run += going.long()
    for i, g in enumerate(gammas):
        chain_sum[i] = float((1 + run.clamp(max=g)).sum())
    tree_sum = torch.zeros(len(sizes))
    for b in range(0, roots.shape[0], batch_roots):
        rb = roots[b:b + batch_roots]
        tree = grow_trees(runner, seq, logits, kv, rb, max(sizes) - 1, ranks)
        acc = tree_accepted(tree, seq, rb, sizes)
        if verify_count and b == 0:
            verify_sample(tree, seq, rb, sizes[0], acc[:, 0], verify_count)
        tree_sum += acc.sum(0).float().cpu()
    return PromptStats(int(roots.shape[0]), pos_hits, pos_total, chain_sum, tree_sum,
                       int(hits0[roots + 1].sum()))


def _floor6(p: float) -> float:
    # Rounded down, so a row of probabilities never sums above 1 (validators allow 1 + 1e-9).
    return math.floor(p * 1e6) / 1e6


def summarize(stats: list[PromptStats], gammas: list[int], sizes: list[int]) -> dict[str, Any]:
    """Pooled tables of several prompts."""
    roots = sum(s.roots for s in stats)
    hits = sum(s.pos_hits for s in stats)
    total = sum(s.pos_total for s in stats)
    chain = sum(s.chain_sum for s in stats) / max(roots, 1)
    tree = sum(s.tree_sum for s in stats) / max(roots, 1)
    positional = [[_floor6(float(hits[d, r]) / max(int(total[d]), 1)) for r in range(hits.shape[1])]
                  for d in range(hits.shape[0])]
    return {
        "positional": positional,
        "positional_support": [int(t) for t in total],
        "chain": {str(g): round(float(chain[i]), 4) for i, g in enumerate(gammas)},
        "tree": {str(bs): round(float(tree[i]), 4) for i, bs in enumerate(sizes)},
        "top1": round(sum(s.top1 for s in stats) / max(roots, 1), 4),
        "roots": roots,
    }


# --------------------------------------------------------------------------------------------- the report


def load_prompts(cfg, tok, domain: str, limit: int) -> list[list[int]]:
    """Token ids of a domain's held-out prompts: code snippets as plain text, instructions chat-templated."""
    if domain == "code":
        return [tok.encode(r["prompt"]) for r in read_jsonl(cfg.code_prompts)[:limit]]
    return [tok.chat(r["prompt"]) for r in read_jsonl(cfg.instruction_prompts)[:limit]]


def measure_domain(target, runner: DraftRunner, tok, prompts: list[list[int]], new_tokens: int, margin: int,
                   cfg, verify_count: int = 0) -> tuple[dict[str, Any], int]:
    """Generate the target's greedy continuations, then measure every root. -> (summary, continuation tokens)."""
    device = next(target.parameters()).device
    gammas, sizes = cfg.gammas or DEFAULT_GAMMAS, cfg.tree_sizes or DEFAULT_TREE_SIZES
    seqs = teacher_generate(target, prompts, new_tokens + margin, 0.0, tok.eos_id, batch_size=64, seed=0)
    stats = []
    for p, s in zip(prompts, seqs):
        seq = torch.tensor(s, device=device)
        stats.append(measure_prompt(runner, seq, len(p), new_tokens, cfg.depths, cfg.ranks, gammas, sizes,
                                    cfg.batch_roots, verify_count))
    out = summarize(stats, gammas, sizes)
    out["prompts"] = len(prompts)
    return out, sum(len(s) - len(p) for p, s in zip(prompts, seqs))


def pooled(domains: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Root-weighted average of the per-domain tables (positional rows weighted by their support)."""
    out: dict[str, Any] = {}
    roots = sum(d["roots"] for d in domains.values())
    for key in ("chain", "tree"):
        keys = next(iter(domains.values()))[key]
        out[key] = {k: round(sum(d[key][k] * d["roots"] for d in domains.values()) / roots, 4) for k in keys}
    first = next(iter(domains.values()))
    rows = []
    for i in range(len(first["positional"])):
        sup = sum(d["positional_support"][i] for d in domains.values())
        rows.append([_floor6(sum(d["positional"][i][r] * d["positional_support"][i] for d in domains.values())
                             / max(sup, 1)) for r in range(len(first["positional"][i]))])
    out["positional"] = rows
    return out


def run_report(cfg) -> dict[str, Any]:
    """Measure both domains (and the small check set) and return the report dict."""
    from conf.rundir import git_sha

    device = pick_device(cfg.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32: the CPU test reproduces these numbers
    tok = load_tokenizer(cfg.target)
    target = load_teacher(cfg.target, device, torch.float32)
    draft = load_draft(cfg.draft, device, torch.float32)
    if draft.config.vocab_size != target.config.vocab_size:
        raise ValueError(f"draft vocabulary {draft.config.vocab_size} != target's {target.config.vocab_size}")
    runner = DraftRunner(draft)
    by_domain, tokens, check = {}, 0, {}
    for domain in DOMAINS:
        prompts = load_prompts(cfg, tok, domain, cfg.max_prompts)
        by_domain[domain], n = measure_domain(target, runner, tok, prompts, cfg.max_new_tokens, cfg.margin_tokens,
                                              cfg, verify_count=16)
        tokens += n
        print(f"{domain}: {by_domain[domain]['prompts']} prompts, {by_domain[domain]['roots']} roots, "
              f"tree {by_domain[domain]['tree']}, chain {by_domain[domain]['chain']}", flush=True)
    for domain in DOMAINS:
        if cfg.check_prompts:
            prompts = load_prompts(cfg, tok, domain, cfg.check_prompts)
            check[domain], _ = measure_domain(target, runner, tok, prompts, cfg.check_new_tokens,
                                              cfg.margin_tokens, cfg)
    report = {"kind": "positional", **pooled(by_domain), "by_domain": by_domain}
    if check:
        report["check"] = {"prompts_per_domain": cfg.check_prompts, "max_new_tokens": cfg.check_new_tokens,
                           "margin_tokens": cfg.margin_tokens, **check}
    report["meta"] = {
        "git_sha": git_sha(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "target": cfg.target, "draft": cfg.draft, "dtype": "float32",
        "prompts": {d: by_domain[d]["prompts"] for d in DOMAINS},
        "tokens": tokens, "max_new_tokens": cfg.max_new_tokens, "margin_tokens": cfg.margin_tokens,
        "ranks": cfg.ranks, "depths": cfg.depths,
        "definition": "tokens per verify incl. bonus; greedy target continuation, teacher forcing; "
                      "tree = best-first by cumulative draft log-prob, top-`ranks` children per node",
    }
    return report


def write_report(report: dict[str, Any], out: str | Path) -> Path:
    """Write the report JSON atomically; returns its path."""
    from conf.rundir import atomic_write_json

    path = resolve(out)
    atomic_write_json(path, report)
    return path


CARD_BEGIN, CARD_END = "<!-- acceptance:begin -->", "<!-- acceptance:end -->"


def card_section(report: dict[str, Any], path: str) -> str:
    """Markdown of the measured acceptance for the model card."""
    m = report["meta"]
    sizes, gammas = list(report["tree"]), list(report["chain"])
    lines = [
        f"Measured by `python -m runtime.acceptance_report` ({m['date'][:10]}, {m['device']}, git {m['git_sha']}; "
        f"JSON: `{path}`): tokens per target verify incl. the bonus token, target = greedy SmolLM2-135M-Instruct "
        f"(fp32), draft fp32, every position of the target's {m['max_new_tokens']}-token greedy continuation "
        f"of each held-out prompt as a root (code: snippets of held-out stdlib files; instruction: "
        f"data/prompts_eval.jsonl in the chat template). Tree = best-first tree of bs nodes (root included) by "
        f"cumulative draft log-prob, top-{m['ranks']} children per node.",
        "",
        "| domain | prompts | roots | draft top-1 | " + " | ".join(f"tree bs={bs}" for bs in sizes) + " | "
        + " | ".join(f"chain g={g}" for g in gammas if g in ("1", "2", "4", "8")) + " |",
        "|---" * (4 + len(sizes) + sum(g in ("1", "2", "4", "8") for g in gammas)) + "|",
    ]
    for d, v in report["by_domain"].items():
        lines.append(f"| {d} | {v['prompts']} | {v['roots']} | {v['top1']:.3f} | "
                     + " | ".join(f"{v['tree'][bs]:.3f}" for bs in sizes) + " | "
                     + " | ".join(f"{v['chain'][g]:.3f}" for g in gammas if g in ("1", "2", "4", "8")) + " |")
    return "\n".join(lines)


def update_model_card(draft: str, report: dict[str, Any], out: str) -> Path | None:
    """Replace the acceptance section of `<draft>/MODEL_CARD.md` (between its markers), if there is one."""
    card = resolve(draft) / "MODEL_CARD.md"
    if draft.startswith("random:") or not card.exists():
        return None
    text = card.read_text()
    if CARD_BEGIN not in text or CARD_END not in text:
        return None
    head, rest = text.split(CARD_BEGIN, 1)
    _, tail = rest.split(CARD_END, 1)
    card.write_text(head + CARD_BEGIN + "\n" + card_section(report, out) + "\n" + CARD_END + tail)
    return card


def print_table(report: dict[str, Any]) -> None:
    """Human-readable summary: tokens per verify per domain."""
    sizes = list(report["tree"])
    gammas = list(report["chain"])
    print(f"{'domain':<12} {'roots':>6} {'top1':>6} " + " ".join(f"tree{bs:>3}" for bs in sizes) + " "
          + " ".join(f"ch{g:>2}" for g in gammas))
    for d, v in report["by_domain"].items():
        print(f"{d:<12} {v['roots']:>6} {v['top1']:>6.3f} " + " ".join(f"{v['tree'][bs]:>7.3f}" for bs in sizes)
              + " " + " ".join(f"{v['chain'][g]:>4.2f}" for g in gammas))


def _main() -> None:
    import hydra

    from conf.train_schema import AcceptanceReportConfig, build_train_config, register_train_configs

    register_train_configs()

    @hydra.main(config_path=None, config_name="acceptance_report_schema", version_base="1.3")
    def main(raw) -> None:
        cfg = build_train_config(raw, AcceptanceReportConfig)
        report = run_report(cfg)
        path = write_report(report, cfg.out)
        if cfg.update_card:
            update_model_card(cfg.draft, report, cfg.out)
        print_table(report)
        print(json.dumps({"out": str(path), "tree": report["tree"], "chain": report["chain"],
                          "by_domain_tree": {d: v["tree"] for d, v in report["by_domain"].items()}}))

    main()


if __name__ == "__main__":
    _main()
