"""Engine, single rank (draft colocated with the target): losslessness, self-speculation, sampling,
oracle statistics, bad input. Multi-process splits are in test_engine_mp.py.

Losslessness is token-exact against `runtime.reference.reference_decode` of the target alone (tiny
random fp32 models, reference attention). The speculative path computes the same logits up to the last
bit or so (batch shapes differ), so a flip needs a top-2 logit tie within ~1e-6: not seen at these sizes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Sequence

import pytest
import torch

from conf import build_config
from conf.presets import MODEL_PRESETS
from conf.schema import (
    AcceptanceConfig,
    ExperimentConfig,
    KernelsConfig,
    ModelConfig,
    ModelPairConfig,
    ParallelConfig,
    SpecConfig,
    WorkloadConfig,
)
from runtime.controller import request_generator
from runtime.engine import run_rank
from runtime.fused_decode import FusedDecoder
from runtime.launch import launch
from runtime.loader import build_model
from runtime.reference import reference_decode

MAX_NEW, CAPACITY = 24, 48
PROMPTS = [[5, 6, 7, 8], [100], [3, 3, 3, 3, 3, 3, 3], list(range(40, 80)), [250, 1, 17, 9, 9]]
# prompt 3 has 40 tokens: it stops at the capacity (48) after 8 tokens
FUSED_EAGER = ("cuda_graphs", "pdl", "target_qkv_rope", "draft_head", "refill_graph", "prefill_graph")
"""kernels=graphs minus these: the fused Triton path's skinny GEMMs and RoPE attention in eager steps (CPU)."""


def make_cfg(mode: str, target: str = "tiny-llama", draft: str = "tiny-llama-draft", *, target_gpus: int = 1,
             draft_gpus: int = 0, max_new: int = MAX_NEW, capacity: int = CAPACITY,
             acceptance: AcceptanceConfig | None = None, kernels: str = "reference", ablate: Sequence[str] = (),
             device: str = "cpu", dtype: str = "float32", checkpoint: str | None = None, timeout_s: float = 60,
             leader_channel: str = "dist", share_gpus: bool = False, **spec) -> ExperimentConfig:
    """A validated config of tiny fp32 models on CPU (tests/gpu: other dtypes, kernels=graphs, a checkpoint,
    which the draft shares when it is the target's preset; `share_gpus`: both groups on fewer GPUs). `kernels`,
    `ablate`: the kernels preset and the features it switches off (FUSED_EAGER: the fused path on CPU). Random
    weights from seed 1: a draft of the target's preset is the target itself (self-speculation)."""
    return build_config(ExperimentConfig(
        seed=1,
        model=ModelPairConfig(name=f"{target}+{draft}", target=ModelConfig(target, dtype=dtype, checkpoint=checkpoint),
                              draft=ModelConfig(draft, dtype=dtype,
                                                checkpoint=checkpoint if draft == target else None)),
        parallel=ParallelConfig(target_gpus=target_gpus, draft_gpus=draft_gpus, device=device, timeout_s=timeout_s,
                                leader_channel=leader_channel, share_gpus=share_gpus),
        spec=SpecConfig(mode=mode, max_tree_nodes=64, **spec),
        acceptance=acceptance or AcceptanceConfig(),
        kernels=KernelsConfig(preset=kernels, ablate=list(ablate)),
        workload=WorkloadConfig(max_new_tokens=max_new, max_seq_len_tokens=capacity, prompt_tokens=4),
    ))


@functools.cache
def reference_outputs(target: str, eos_from: int | None = 0) -> tuple[list[list[int]], int | None]:
    """Plain greedy outputs of `target` for PROMPTS, and the EOS id used (the 4th token of prompt
    `eos_from`'s EOS-free output, so that some generations stop at EOS)."""
    model = build_model(MODEL_PRESETS[target], torch.float32, "cpu", seed=1)
    eos = None
    if eos_from is not None:
        eos = reference_decode(model, PROMPTS[eos_from], MAX_NEW, CAPACITY)[3]
    return [reference_decode(model, p, MAX_NEW, CAPACITY, eos) for p in PROMPTS], eos


def run(cfg: ExperimentConfig, prompts=PROMPTS, eos: int | None = None) -> dict:
    return launch(functools.partial(run_rank, prompts=prompts, eos_token_id=eos), cfg)


SHAPES = {
    "chain-gamma3": ("chain", dict(gamma=3)),
    "wide": ("serial_tree", dict(bs=8, w=4, topk=4)),
    "deep": ("serial_tree", dict(bs=6, w=1, topk=2, d="4")),
    "unbalanced": ("serial_tree", dict(bs=7, w=2, topk=3, d="2")),
    "autoregressive": ("autoregressive", {}),
}


@pytest.mark.parametrize("target", ["tiny-llama", "tiny-qwen2", "tiny-llama31"])
def test_colocated_modes_are_lossless(target):
    expected, eos = reference_outputs(target)
    assert expected[0][-1] == eos  # stops at EOS
    limits = [min(MAX_NEW, CAPACITY - len(p)) for p in PROMPTS]
    assert any(len(o) == lim and eos not in o for o, lim in zip(expected, limits))  # stops at a length limit
    if target == "tiny-llama":
        assert len(expected[3]) == CAPACITY - len(PROMPTS[3])  # stops at the cache capacity
    for name, (mode, spec) in SHAPES.items():
        out = run(make_cfg(mode, target, **spec), eos=eos)
        assert out["outputs"] == expected, f"{target} {name}"
        m = out["metrics"]
        assert m["generated_tokens"] == sum(map(len, expected)) and m["oracle"] is False
        assert m["iterations"] == len(out["iterations"]) and m["mean_accept_len"] >= 1.0


def test_triton_backend_is_lossless():
    """kernels=triton (tree attention and greedy verify; Triton's interpreter on CPU)."""
    pytest.importorskip("kernels")
    expected, eos = reference_outputs("tiny-llama")
    cfg = make_cfg("serial_tree", kernels="triton", bs=6, w=3, topk=3)
    assert cfg.kernels.backend == "triton"
    assert run(cfg, prompts=PROMPTS[:1], eos=eos)["outputs"] == expected[:1]  # one prompt: the interpreter is slow


def test_an_fp8_draft_is_lossless_and_refused_where_its_kernels_are_off(monkeypatch):
    """model.draft.weight_bits=8: the draft's decode steps stream fp8 weights (Triton's interpreter on CPU); its
    proposals change, the output stays the target's. The runtime refuses 8 bits without the skinny Triton kernels and
    4 bits anywhere (simulator only), naming the field."""
    pytest.importorskip("kernels")
    from runtime.engine import check_runtime_support

    calls: list[int] = []
    init = FusedDecoder.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        calls.append(0 if self.fp8 is None else len(self.fp8))

    monkeypatch.setattr(FusedDecoder, "__init__", spy)
    expected, eos = reference_outputs("tiny-llama")
    cfg = make_cfg("serial_tree", kernels="graphs", ablate=FUSED_EAGER, bs=6, w=3, topk=3)
    assert cfg.kernels.skinny and cfg.kernels.rope_attention and not cfg.kernels.target_qkv_rope
    fp8 = dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, draft=dataclasses.replace(cfg.model.draft, weight_bits=8)))
    assert run(fp8, prompts=PROMPTS[:1], eos=eos)["outputs"] == expected[:1]
    assert calls == [0, MODEL_PRESETS["tiny-llama-draft"].num_layers]  # target: none; draft: every layer's copies
    with pytest.raises(ValueError, match=r"model\.draft\.weight_bits=8: .*needs kernels=graphs without skinny in "
                                         r"kernels\.ablate, got kernels=reference kernels\.ablate=\[\]"):
        check_runtime_support(dataclasses.replace(fp8, kernels=make_cfg("serial_tree").kernels))
    four = dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, target=dataclasses.replace(cfg.model.target, weight_bits=4)))
    with pytest.raises(ValueError, match=r"model\.target\.weight_bits=4: simulator only; the runtime runs 16 or 8"):
        check_runtime_support(four)


def test_target_qkv_rope_is_lossless_and_on_the_target_only(monkeypatch):
    """kernels.target_qkv_rope: the target's QKV GEMM does RoPE + the KV write (kernels.qkv_rope), the draft keeps the
    fused RoPE attention; the outputs stay the reference's (Triton's interpreter on CPU)."""
    pytest.importorskip("kernels")
    calls: list = []
    init = FusedDecoder.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        calls.append(self.plan)

    monkeypatch.setattr(FusedDecoder, "__init__", spy)
    expected, eos = reference_outputs("tiny-llama")
    cfg = make_cfg("serial_tree", kernels="graphs", ablate=[f for f in FUSED_EAGER if f != "target_qkv_rope"], bs=6,
                   w=3, topk=3)
    assert run(cfg, prompts=PROMPTS[:1], eos=eos)["outputs"] == expected[:1]
    assert [(c.qkv_rope, c.rope_attention) for c in calls] == [(True, False), (False, True)]  # target, draft


def test_self_speculation_accepts_everything_and_always_hits():
    """Draft = target, chain-capable tree (topk 1): every verify accepts bs - 1 tokens; with d >= 1
    expansions after the refill the bonus is always the next chain node (a hit)."""
    expected, _ = reference_outputs("tiny-llama", eos_from=None)
    cfg = make_cfg("serial_tree", "tiny-llama", "tiny-llama", bs=5, w=2, topk=1, d="1")
    out = run(cfg)
    assert out["outputs"] == expected
    rows = out["iterations"]
    assert {r["accepted"] for r in rows} == {4} and all(r["hit"] for r in rows)
    assert out["metrics"]["hit_rate"] == 1.0 and out["metrics"]["accept_len_hist"] == {"5": len(rows)}


def test_autoregressive_sampling_equals_reference_sampling():
    """At temperature > 0 the AR engine draws exactly one multinomial per token from the request's
    generator, like the reference loop: same seed, same tokens."""
    cfg = make_cfg("autoregressive", temperature=0.8)
    out = run(cfg)
    model = build_model(MODEL_PRESETS["tiny-llama"], torch.float32, "cpu", seed=1)
    for rid, prompt in enumerate(PROMPTS):
        gen = request_generator(cfg.workload.seed, rid, "sample")
        assert out["outputs"][rid] == reference_decode(model, prompt, MAX_NEW, CAPACITY, None, 0.8, gen)


def _exact_two_token_laws(temperature: float, prompt: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Target laws of the first token and (marginally) of the second token."""
    model = build_model(MODEL_PRESETS["tiny-llama"], torch.float32, "cpu", seed=1)
    from runtime.attention import AttnMeta, ReferenceAttention
    from runtime.kv_cache import KVCache

    def next_probs(tokens: list[int]) -> torch.Tensor:
        cache = KVCache(*model.cache_spec()[:1], 16, *model.cache_spec()[1:])
        logits = model(torch.tensor(tokens), AttnMeta.causal(0, len(tokens)), cache, ReferenceAttention())
        return torch.softmax(logits[-1] / temperature, -1)

    with torch.no_grad():
        p1 = next_probs(prompt)
        p2 = sum(p1[x] * next_probs(prompt + [x]) for x in range(p1.numel()) if p1[x] > 1e-5)
    return p1, p2


def test_tree_sampling_matches_the_target_distribution():
    """serial_tree at temperature 0.25: the first two emitted tokens follow the target's laws.

    n = 500 requests of one prompt (request ids differ, so generators differ). For the first token
    E[TV] <= 0.5 * sum_k sqrt(p_k (1 - p_k) / n) (computed from the exact p), and TV moves by <= 1/n per
    sample, so P(TV > E + 0.1) <= exp(-2 n 0.1^2) = 4.5e-5 (McDiarmid); same for the second token's
    marginal. Accepting a drafted token whenever it is the draft's argmax gives TV > 0.3 here.
    """
    n, temp, prompt = 500, 0.25, [5, 6, 7, 8]
    # a random draft whose proposals the target accepts now and then (the 4-head draft shape at the run's seed)
    cfg = make_cfg("serial_tree", "tiny-llama", "tiny-llama-draft-4h", max_new=2, bs=6, w=3, topk=3,
                   temperature=temp)
    out = run(cfg, prompts=[prompt] * n)
    p1, p2 = _exact_two_token_laws(temp, prompt)
    for k, p in enumerate((p1, p2)):
        counts = torch.bincount(torch.tensor([o[k] for o in out["outputs"]]), minlength=p.numel()).float()
        tv = 0.5 * float((counts / n - p).abs().sum())
        bound = 0.5 * float((p * (1 - p) / n).sqrt().sum()) + 0.1
        assert tv < bound, f"token {k + 1}: TV {tv:.3f} >= {bound:.3f}"
    assert sum(r["accepted"] for r in out["iterations"]) > 0  # drafted tokens do get accepted


def test_oracle_acceptance_matches_the_positional_model():
    """Chain-shaped serial tree (topk 1, bs 5), positional [[0.6, 0.2]]: accepted count j < 4 with
    probability 0.6^j * 0.4, and 4 with 0.6^4; mean 0.6 + 0.36 + 0.216 + 0.1296 = 1.3056, sd ~1.19.
    Over >= 250 iterations the standard error is <= 0.076; the tolerance 0.3 is ~4 sigma."""
    acc = AcceptanceConfig(positional=[[0.6, 0.2]])
    cfg = make_cfg("serial_tree", max_new=200, capacity=256, acceptance=acc, bs=5, w=1, topk=1, d="1", oracle=True)
    prompts = [[5, 6, 7, 8], [9, 10], [11]]
    out = run(cfg, prompts=prompts)
    accepted = [r["accepted"] for r in out["iterations"]]
    assert len(accepted) >= 250 and set(accepted) <= {0, 1, 2, 3, 4}
    assert abs(sum(accepted) / len(accepted) - 1.3056) < 0.3
    freq0 = accepted.count(0) / len(accepted)
    assert abs(freq0 - 0.4) < 4 * math.sqrt(0.24 / len(accepted))
    m = out["metrics"]
    assert m["oracle"] is True and out["oracle"] is True
    assert [len(o) for o in out["outputs"]] == [200, 200, 200]


@pytest.mark.parametrize(
    "prompt, message",
    [([], "prompt 0 is empty"), (list(range(48)), "prompt 0 has 48 tokens"), ([5, 300], "unknown token ids \\[300\\]"),
     ([-1], "unknown token ids \\[-1\\]")],
    ids=["empty", "longer-than-context", "unknown-id", "negative-id"],
)
def test_bad_prompts_fail_with_a_clear_error(prompt, message):
    with pytest.raises(RuntimeError, match=message):
        run(make_cfg("serial_tree", bs=4, w=2, topk=2), prompts=[prompt])


def test_reference_decode_reports_the_top2_margin_before_every_token():
    """The margins the GPU tests' tie rule reads: one per generated token, the top-1 minus top-2 logit of the
    distribution that token was drawn from."""
    model = build_model(MODEL_PRESETS["tiny-llama"], torch.float32, "cpu", seed=1)
    margins: list[float] = []
    out = reference_decode(model, PROMPTS[0], MAX_NEW, CAPACITY, margins=margins)
    assert out == reference_decode(model, PROMPTS[0], MAX_NEW, CAPACITY) and len(margins) == len(out)
    from runtime.attention import AttnMeta, ReferenceAttention
    from tests.runtime import new_cache

    ids = torch.tensor(PROMPTS[0] + out[:2])
    logits = model(ids, AttnMeta.causal(0, len(ids)), new_cache(model, CAPACITY), ReferenceAttention())
    top = logits[len(PROMPTS[0]) + 1].topk(2).values  # before out[2]
    assert margins[2] == pytest.approx(float(top[0] - top[1]), abs=1e-5) and min(margins) >= 0


def test_the_oracle_draft_grows_the_simulators_tree():
    """An oracle run's draft grows its tree by the acceptance table's belief, as the simulator does, instead of its
    own random-weight log-probs. Serial bs 8, w 2, topk 8, d 1, one table row
    p = [.7, .1, .05, .03, .02, .01, .01, .01]: a fresh round proposes root, r0 .7, r0r0 .49, r1 .1, r0r1 .07,
    r1r0 .07, r2 .05, r3 .03, so accepted >= 1 w.p. .88 and = 2 w.p. .7 * .8 + .1 * .7 = .63: mean 1.51. The
    simulator on the same config (2,000 tokens, negligible noise) gives the expectation; the runtime's mean over
    ~190 verifies (sd ~0.7, standard error ~0.05) must be within 0.25 (5 sigma) of it. A tree grown by the flat
    belief of a random draft would propose r0..r6 at depth 1 and accept at most 1 (mean <= .88)."""
    from simulator.metrics import metrics_of
    from simulator.simulation import simulate

    acc = AcceptanceConfig(positional=[[0.7, 0.1, 0.05, 0.03, 0.02, 0.01, 0.01, 0.01]])
    prompts = [[5, 6, 7, 8], [9, 10], [11]]
    shape = dict(acceptance=acc, bs=8, w=2, topk=8, d="1", oracle=True)
    out = run(make_cfg("serial_tree", max_new=160, capacity=256, **shape), prompts=prompts)
    accepted = [r["accepted"] for r in out["iterations"]]
    mean = sum(accepted) / len(accepted)
    assert out["metrics"]["oracle_belief"] == "table"
    sim = simulate(make_cfg("serial_tree", max_new=2000, capacity=3000, **shape))
    expected = metrics_of(sim.config, sim.tally, sim.d, "test")["mean_accept_len"] - 1.0
    assert abs(expected - 1.51) < 0.1, expected  # the closed form above (hits carry subtrees: a little noise)
    assert abs(mean - expected) < 0.25, (mean, expected)
    assert mean > 0.88 + 0.3, mean


def test_recorded_ranks_let_the_simulator_replay_the_run_exactly(tmp_path):
    """iterations.csv `ranks`: each verify's accepted draft ranks and the bonus's (-1 = miss). Replaying them
    (acceptance.kind=replay, replay_belief=table) the simulator grows the same trees and reproduces the
    runtime's accepted count and hit of every verify (serial tree, oracle with table belief)."""
    import json

    from conf.rundir import config_from_dict
    from conf.schema import freeze
    from simulator.simulation import simulate

    acc = AcceptanceConfig(positional=[[0.7, 0.1, 0.05, 0.03, 0.02, 0.01, 0.01, 0.01]])
    cfg = make_cfg("serial_tree", max_new=160, capacity=256, acceptance=acc, bs=8, w=2, topk=8, d="1",
                   oracle=True)
    rows = run(cfg, prompts=[[5, 6, 7, 8]])["iterations"]
    verifies = []
    for r in rows:
        ranks = [int(x) for x in r["ranks"].split(".")]
        assert len(ranks) == r["accepted"] + 1 and (ranks[-1] >= 0) == bool(r["hit"]), r
        verifies.append({"accepted": r["accepted"], "hit": bool(r["hit"]), "ranks": ranks})
    assert any(x > 0 for v in verifies for x in v["ranks"][:-1])  # not only the rank-0 chain
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(verifies))
    data = json.loads(json.dumps(dataclasses.asdict(cfg)))
    data.pop("_frozen", None)
    sim_cfg = config_from_dict(data)
    sim_cfg.acceptance.kind, sim_cfg.acceptance.file, sim_cfg.acceptance.replay_belief = "replay", str(replay), "table"
    sim_cfg.workload.num_requests = 1
    sim_cfg.validate()
    sim = simulate(freeze(sim_cfg))
    assert [r.accepted for r in sim.rows] == [r["accepted"] for r in rows]
    assert [bool(r.hit) for r in sim.rows] == [bool(r["hit"]) for r in rows]
    # `refills`: the forwards the next proposal waited for; every miss refills, so do hits on never-expanded
    # leaves, and the simulator's trees refill exactly when the runtime's did (none after the last verify)
    assert rows[-1]["refills"] is None and all(r["refills"] >= 1 for r in rows[:-1] if not r["hit"])
    assert any(r["hit"] and r["refills"] for r in rows)  # this narrow tree (w 2, d 1) refills after most hits
    assert [r.refills for r in sim.rows] == [r["refills"] for r in rows]


def test_oracle_ranks_are_reconstructed_from_the_seed():
    """Runs recorded before the `ranks` column: a positional oracle's verify with `accepted` tokens consumed
    accepted + 1 draws of the request's seeded stream, so the ranks follow from (seed, accepted, hit) alone and
    equal the ones the runtime records; a different seed, or the multinomial reading of the stream (how those older
    runs drew: tests/runtime/test_oracle.py), contradicts the record."""
    from runtime.oracle import MULTINOMIAL, reconstruct_ranks

    acc = AcceptanceConfig(positional=[[0.6, 0.15, 0.1, 0.05], [0.8, 0.1]])
    cfg = make_cfg("serial_tree", max_new=120, capacity=256, acceptance=acc, bs=8, w=2, topk=4, d="1",
                   oracle=True)
    out = run(cfg, prompts=[[5, 6, 7, 8], [9, 10]])
    rows = out["iterations"]
    for request in (0, 1):
        mine = [r for r in rows if r["request"] == request]
        recorded = [[int(x) for x in r["ranks"].split(".")] for r in mine]
        got = reconstruct_ranks(acc, cfg.workload.seed, request, [(r["accepted"], bool(r["hit"])) for r in mine])
        assert got == recorded
    mine = [(r["accepted"], bool(r["hit"])) for r in rows if r["request"] == 0]
    with pytest.raises(ValueError, match="not this run's stream"):
        reconstruct_ranks(acc, cfg.workload.seed + 1, 0, mine)
    with pytest.raises(ValueError, match="not this run's stream"):
        reconstruct_ranks(acc, cfg.workload.seed, 0, mine, MULTINOMIAL)


class _EagerChain:
    """TargetWorker.chain_step emulated eagerly on CPU: feeds `token`, or the last step's argmax, at the prefix end."""

    def __init__(self, worker) -> None:
        self.worker, self.last, self.steps = worker, None, 0

    def __call__(self, token):
        from runtime.tree import proposal_inputs
        from runtime.tree_cache import step_meta

        w = self.worker
        inp = proposal_inputs([int(self.last) if token is None else token], [-1], w.prefix_len, 1)
        logits = w.model(inp.token_ids, step_meta(inp, w.prefix_len, "cpu"), w.cache, w.attn)
        self.last = logits.argmax(-1)
        w.prefix_len += 1
        self.steps += 1
        return self.last


class _NoEvent:
    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


def _chained_on_cpu():
    from runtime.engine import Engine

    class ChainedOnCpu(Engine):
        """The chained autoregressive loop with its CUDA pieces (graph, pinned buffers, events) emulated."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            assert not self.chained  # CPU, no graphs
            self.chained = self.target is not None
            if self.chained:
                self.target.chain_step = self.chain = _EagerChain(self.target)
                self._token_host = [torch.empty(1, dtype=torch.long) for _ in range(2)]
                self._token_ready = [_NoEvent(), _NoEvent()]

        def close(self) -> None:
            if self.chained:
                self.tl.add("test.chain_steps", 0.0, 0.0, tokens=self.chain.steps)
            super().close()

    return ChainedOnCpu


def test_chained_autoregressive_loop_emits_what_the_plain_loop_emits():
    """Step k + 1 is queued before token k is read: the same tokens (EOS, max_new_tokens and capacity stops),
    one iteration per token, and exactly one dropped step per request that stopped at EOS (none past a length
    stop)."""
    expected, eos = reference_outputs("tiny-llama")
    out = launch(functools.partial(run_rank, prompts=PROMPTS, eos_token_id=eos, engine_cls=_chained_on_cpu()),
                 make_cfg("autoregressive"))
    assert out["outputs"] == expected
    assert out["metrics"]["iterations"] == len(out["iterations"]) == sum(map(len, expected))
    steps = sum(r.tokens for r in out["traces"] if r.name == "test.chain_steps")
    assert steps == sum(map(len, expected)) + sum(o[-1] == eos for o in expected)
    spans = [r for r in out["traces"] if r.name == "step.verify"]
    assert all(json.loads(r.extra)["chained"] for r in spans)
    assert [r.ctx for r in spans[:3]] == [len(PROMPTS[0]) - 1 + k for k in range(3)]


def test_worker_specs_size_each_worker_from_its_mode():
    """`worker_specs`: the target verifies the mode's rows (bs; gamma + 1; 1) and alone learns the oracle; the draft
    expands w rows (1 in chain mode) into max_tree_nodes slots; both share the cache's prefix and the temperature."""
    from runtime.engine import spec_shape, worker_specs

    for mode, spec, rows, w in [("async_tree", {"bs": 6, "w": 3, "topk": 2}, 6, 3), ("chain", {"gamma": 3}, 4, 1),
                                ("autoregressive", {}, 1, 1)]:
        cfg = make_cfg(mode, temperature=0.5, oracle=True, draft_gpus=int(mode == "async_tree"), **spec)
        target, draft = worker_specs(cfg, spec_shape(cfg.spec), group_gpus=2)
        assert (target.rows, draft.rows, draft.max_tree_nodes, target.max_tree_nodes) == (rows, w, 64, 0)
        assert draft.topk == (spec.get("topk", 1)) and target.oracle == (mode != "autoregressive") and not draft.oracle
        assert {s.max_seq_len for s in (target, draft)} == {CAPACITY} and target.temperature == draft.temperature == 0.5
        assert target.group_gpus == draft.group_gpus == 2
