"""Acceptance oracle: drawn outcomes follow the positional model; replay; bonus resolution; sync by seed."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from conf.schema import AcceptanceConfig
from runtime.oracle import MULTINOMIAL, NO_RANK, UNIFORM_BATCH, AcceptanceOracle, load_positional, resolve_bonus

CHAIN = [-1, 0, 1, 2, 3]  # root + 4 drafted tokens in a chain


def _oracle(seed: int = 0, **kw) -> AcceptanceOracle:
    return AcceptanceOracle(AcceptanceConfig(**kw), torch.Generator().manual_seed(seed))


def test_positional_chain_statistics():
    """Row [0.6, 0.2]: accept j < 4 tokens w.p. 0.6^j 0.4, all 4 w.p. 0.6^4. After a rejection the next
    token is the rank-1 child w.p. 0.2 / 0.4 = 1/2. n = 20000: each frequency's standard error is
    <= 0.0035; the tolerance 0.015 is > 4 sigma."""
    oracle, n = _oracle(positional=[[0.6, 0.2]]), 20000
    outcomes = [oracle.walk(CHAIN) for _ in range(n)]
    lengths = Counter(len(o.path) - 1 for o in outcomes)
    expected = {j: 0.6**j * 0.4 for j in range(4)} | {4: 0.6**4}
    for j, p in expected.items():
        assert abs(lengths[j] / n - p) < 0.015, j
    stopped = [o.bonus_rank for o in outcomes if len(o.path) < 5]
    assert abs(stopped.count(1) / len(stopped) - 0.5) < 0.015
    assert set(stopped) == {1, NO_RANK}
    assert all(o.path == tuple(range(len(o.path))) for o in outcomes)


def test_uniform_draws_take_one_torch_op_per_batch(monkeypatch):
    """The default draws read float64 uniforms UNIFORM_BATCH at a time and invert the row's CDF in Python: no
    torch.multinomial, one torch.rand per batch, and the stream is read in order (a fresh oracle on the same seed
    that draws the batch itself sees the same uniforms)."""
    calls = []
    real_rand = torch.rand
    monkeypatch.setattr(torch, "multinomial", lambda *a, **k: pytest.fail("a multinomial per rank"))
    monkeypatch.setattr(torch, "rand", lambda *a, **k: calls.append(a) or real_rand(*a, **k))
    oracle = _oracle(3, positional=[[0.6, 0.2]])
    draws = sum(len(oracle.walk(CHAIN).path) for _ in range(1000))  # accepted + 1 ranks per walk
    assert len(calls) == -(-draws // UNIFORM_BATCH) and calls[0] == (UNIFORM_BATCH,)
    u = real_rand(UNIFORM_BATCH, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).tolist()
    fresh = _oracle(3, positional=[[0.6, 0.2]])
    assert [fresh._draw_rank(0) for _ in range(UNIFORM_BATCH)] == [0 if x < 0.6 else 1 if x < 0.8 else NO_RANK
                                                                     for x in u]


def test_ranks_of_multinomial_runs_are_reconstructed():
    """Runs recorded before the `ranks` column drew each rank as a torch.multinomial over the depth's row plus "none"
    from the request's stream; reconstruct_ranks(..., MULTINOMIAL) reads that stream back from (seed, accepted, hit):
    here chains of 3 proposed tokens (rank 0 accepted, any other rank ends the walk: a hit if it is a rank, a miss
    if "none"). The uniform reading of the same stream contradicts the record; an unknown reading names itself."""
    from runtime.controller import request_generator
    from runtime.oracle import reconstruct_ranks

    acc = AcceptanceConfig(positional=[[0.6, 0.15, 0.1, 0.05], [0.8, 0.1]])
    table, gen = load_positional(acc), request_generator(11, 0, "oracle", "cpu")
    records, want = [], []
    for _ in range(60):
        ranks: list[int] = []
        while True:
            row = table[min(len(ranks), len(table) - 1)]
            r = int(torch.multinomial(torch.tensor(row + [1.0 - sum(row)], dtype=torch.float64), 1, generator=gen))
            ranks.append(NO_RANK if r == len(row) else r)
            if ranks[-1] != 0 or len(ranks) == 4:
                break
        hit = ranks[-1] != NO_RANK
        records.append((len(ranks) - 1, hit))
        want.append(ranks)
    assert any(h for _, h in records) and not all(h for _, h in records)
    assert reconstruct_ranks(acc, 11, 0, records, MULTINOMIAL) == want
    with pytest.raises(ValueError, match="not this run's stream"):
        reconstruct_ranks(acc, 11, 0, records)
    with pytest.raises(ValueError, match="draws must be uniform or multinomial, got 'cdf'"):
        reconstruct_ranks(acc, 11, 0, records, "cdf")


def test_ranks_pick_siblings_and_depth_rows():
    """Wide root with two children: rank 1 goes to the second child. Depth rows: [0.5, 0.5] at the root,
    [0.0] below, so no second token is ever accepted."""
    oracle = _oracle(positional=[[0.5, 0.5], [0.0]])
    seen = Counter(oracle.walk([-1, 0, 0, 1]).path for _ in range(2000))
    assert set(seen) == {(0, 1), (0, 2)}  # node 3 (under 1) is never accepted: depth-1 row is 0
    assert abs(seen[(0, 2)] / 2000 - 0.5) < 0.05


def test_equal_seeds_give_equal_outcomes():
    a, b = _oracle(7), _oracle(7)
    assert [a.walk(CHAIN) for _ in range(50)] == [b.walk(CHAIN) for _ in range(50)]


def test_scale_multiplies_rows_and_refuses_a_sum_above_one(tmp_path):
    assert load_positional(AcceptanceConfig(positional=[[0.6, 0.3]], scale=1.1))[0] == pytest.approx([0.66, 0.33])
    with pytest.raises(ValueError, match="acceptance.scale: 2.0 pushes"):
        load_positional(AcceptanceConfig(positional=[[0.6, 0.3]], scale=2.0))
    assert load_positional(AcceptanceConfig(positional=[[0.2, 0.1]], scale=0.5))[0] == pytest.approx([0.1, 0.05])
    f = tmp_path / "acc.json"
    f.write_text(json.dumps({"positional": [[0.7], [0.4]]}))
    assert load_positional(AcceptanceConfig(file=str(f))) == [[0.7], [0.4]]


def test_replay_of_a_recorded_run(tmp_path):
    f = tmp_path / "iterations.csv"
    f.write_text("request,iteration,accepted,emitted,hit\n0,0,2,3,1\n0,1,0,1,0\n0,2,7,8,true\n")
    oracle = _oracle(kind="replay", file=str(f))
    got = [oracle.walk(CHAIN) for _ in range(4)]
    assert [o.path for o in got] == [(0, 1, 2), (0,), (0, 1, 2, 3, 4), (0, 1, 2)]  # 7 capped at the depth
    assert [o.bonus_rank for o in got] == [0, NO_RANK, 0, 0]
    bad = tmp_path / "bad.csv"  # read as the simulator reads it: errors name the file and the row
    bad.write_text("request,iteration,accepted,emitted,hit\n0,0,2,3,1\n0,1,x,1,0\n")
    with pytest.raises(ValueError, match=r"bad\.csv: row 3: accepted"):
        _oracle(kind="replay", file=str(bad))
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(ValueError, match="holds no iterations"):
        _oracle(kind="replay", file=str(empty))


def test_resolve_bonus():
    assert resolve_bonus([11, 12, 13], 1, fallback=99) == 12  # the draft holds the drawn rank: a hit
    assert resolve_bonus([11, 12], 5, fallback=99) == 99  # rank beyond the draft's children: a miss
    assert resolve_bonus([0, 1, 99], NO_RANK, fallback=99) == 2  # fallback is a child: first free id


def test_positional_file_may_be_a_bare_table(tmp_path):
    """A positional file holds {"positional": rows} or the rows themselves; a bad row names the file."""
    f = tmp_path / "rows.json"
    f.write_text(json.dumps([[0.5, 0.2], [0.3]]))
    assert load_positional(AcceptanceConfig(file=str(f))) == [[0.5, 0.2], [0.3]]
    f.write_text(json.dumps([[0.9, 0.4]]))
    with pytest.raises(ValueError, match=r"rows\.json\[0\]"):
        load_positional(AcceptanceConfig(file=str(f)))
