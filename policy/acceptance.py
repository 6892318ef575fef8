"""Acceptance models: which draft node is the target's next token (the truth), per verify.

**Positional** (`acceptance.kind=positional`, Sequoia-style): `p[depth][rank]` is the probability that the
rank-th most likely draft child of a *correct* node at `depth` below the verify root is the target's next
token; with probability 1 - sum(p[depth]) it is none of them. Depths beyond the table reuse its last row.
The table is `acceptance.positional`, or `{"positional": [[...]]}` from `acceptance.file`, or (kind=family) the
member of the acceptance family that `acceptance.top1 / decay / depth_gain` name (acceptance_family.py,
docs/ACCEPTANCE.md: weak to strong drafts; the measured tables are fitted members). Every entry is multiplied by
`acceptance.scale`; a scale that takes a row's sum above 1 is an error naming the largest valid one (renormalising
such rows only moved mass between ranks, so scales past it changed nothing).

The simulator draws the truth node by node along the verified path only: at a correct node at depth k, the
true child's rank r is the inverse CDF of row k at a uniform u[position] (`true_rank`). Uniforms are drawn
per request and indexed by token position, so configurations compared at one seed see the same sequence of
"how hard is the next token" (common random numbers). Verify outcomes, re-root hits and misses then emerge
from the real draft tree (tree.py): the walk accepts the child of rank r if the proposal holds it.

The draft's own belief (`belief`, tree growth order) is log p of the *unscaled* table, made non-increasing
in rank and floored at `BELIEF_FLOOR` (a rank the table gives 0 still has a tiny weight), so acceptance
sweeps change the truth, not the tree the draft grows.

Temperature: the same table stands for greedy verification (temperature 0) and lossless tree rejection
sampling (temperature > 0); a table fitted at the run's temperature carries the difference, the model
does not.

**Replay** (`acceptance.kind=replay`): `acceptance.file` holds a recorded run's verify outcomes: its
iterations.csv (columns accepted, hit, and the runtime's `ranks` where recorded), or a JSON list (or
{"verifies": [...]}) of {"accepted": k, "hit": true|false|null, "ranks": [...]} or bare ints; consumed in
order and cycled. A verify with recorded ranks is followed exactly: its accepted draft ranks, then its bonus
rank (-1: a miss); where the simulated proposal lacks a recorded node the path ends there, and the verify is
counted in `divergences`. Without ranks: `replay_belief=table` draws them from the table conditioned on the
record (see `ReplayAcceptance.walk`); otherwise, as the runtime's replay oracle (runtime/oracle.py) does,
accept k tokens along the rank-0 chain (fewer if the proposal is shallower), then the bonus is the rank-0
child if the record was a hit, else a token the draft did not draft.

Closed form for checks: chain of gamma with constant acceptance a, `chain_accept_length`.
"""

from __future__ import annotations

import csv
import json
import math
from bisect import bisect_right
from typing import Any

from conf.paths import resolve_path
from conf.schema import AcceptanceConfig, check_scale
from policy.acceptance_family import family_table

BELIEF_FLOOR = 1.0e-6
"""Smallest probability the draft's belief assigns to a ranked child (keeps log finite)."""
BEYOND_TABLE = 1 << 30
"""The rank `PositionalAcceptance.walk` gives a token beyond the table's ranks (the 1 - sum(row) mass): larger than
any spec.topk, so no draft tree holds it and a bonus there is a miss, whatever the tree's width, as in the runtime's
oracle (runtime/oracle.py: NO_RANK). Before, it was rank len(row), which a tree of topk > len(row) held: every such
bonus counted as a hit (topk 16 over the 8-rank SmolLM2 table: hit rate 1.0)."""


def chain_accept_length(a: float, gamma: int) -> float:
    """Mean tokens per verify (accepted + bonus) of a gamma-chain with i.i.d. acceptance `a`:
    (1 - a^(gamma+1)) / (1 - a), and gamma + 1 at a = 1 (Leviathan et al. 2023)."""
    if a >= 1.0:
        return float(gamma + 1)
    return (1.0 - a ** (gamma + 1)) / (1.0 - a)


def _check_table(table: Any, where: str) -> list[list[float]]:
    if not isinstance(table, list) or not table:
        raise ValueError(f"{where}: must be a non-empty list of rows")
    for d, row in enumerate(table):
        if not isinstance(row, list) or not row:
            raise ValueError(f"{where}[{d}]: must be a non-empty list of probabilities")
        for r, p in enumerate(row):
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
                raise ValueError(f"{where}[{d}][{r}]: {p!r} is outside [0, 1]")
        if sum(row) > 1.0 + 1e-9:
            raise ValueError(f"{where}[{d}]: probabilities sum to {sum(row):.4f} > 1")
    return [[float(p) for p in row] for row in table]


def _read_json(path: str, field: str) -> Any:
    p = resolve_path(path)
    if not p.exists():
        raise FileNotFoundError(f"{field}: acceptance file {p} does not exist")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON ({e})") from e


class PositionalAcceptance:
    """Positional acceptance table with the draft's belief; `walk` draws one verify's outcome."""

    kind = "positional"

    def __init__(self, table: list[list[float]], scale: float = 1.0) -> None:
        table = _check_table(table, "acceptance.positional")
        check_scale(table, scale, "the acceptance table")
        self.raw = table
        self.table = [[p * scale for p in row] for row in table]
        self.cum = []
        for row in self.table:
            acc, cum = 0.0, []
            for p in row:
                acc += p
                cum.append(acc)
            if abs(acc - 1.0) < 1e-9:
                cum[-1] = 1.0  # a full row never yields "none of them" through rounding
            self.cum.append(cum)
        self._last = len(self.cum) - 1

    def belief(self, topk: int) -> list[list[float]]:
        """The draft's log-probability proxy per depth and rank (topk ranks), non-increasing in rank."""
        out = []
        for row in self.raw:
            logs, low = [], 1.0
            for r in range(topk):
                low = min(low, row[r] if r < len(row) else 0.0)
                logs.append(math.log(max(low, BELIEF_FLOOR)))
            out.append(logs)
        return out

    def true_rank(self, depth: int, u: float) -> int:
        """Rank of the target's token among a correct node's draft children at `depth`, given uniform `u`;
        len(row) means a token beyond the table (never drafted; `walk` reports it as BEYOND_TABLE)."""
        return bisect_right(self.cum[depth if depth < self._last else self._last], u)

    def walk(self, children: dict[tuple[int, int], int], uniforms: list[float], position: int) -> tuple[
            tuple[int, ...], tuple[int, ...]]:
        """Verify a proposal: (ranks of accepted tokens + bonus, proposal indices of root + accepted).

        `children[(parent_index, token)]` indexes the proposal; `uniforms[position + k]` drives depth k.
        """
        cum, last = self.cum, self._last
        node, depth = 0, 0
        ranks: list[int] = []
        nodes = [0]
        while True:
            row = cum[depth if depth < last else last]
            r = bisect_right(row, uniforms[position + depth])
            if r == len(row):  # beyond the table: a token the measured draft never ranked (as the runtime's oracle)
                r = BEYOND_TABLE
            ranks.append(r)
            child = children.get((node, r))
            if child is None:
                return tuple(ranks), tuple(nodes)
            nodes.append(child)
            node = child
            depth += 1

    def chain_length(self, gamma: int) -> float:
        """Expected tokens per verify of a gamma-chain of top-ranked drafts under this table."""
        total, alive = 1.0, 1.0
        for k in range(gamma):
            alive *= self.table[min(k, self._last)][0]
            total += alive
        return total


class ReplayAcceptance:
    """Recorded verify outcomes (accepted length, hit flag), consumed in order and cycled."""

    kind = "replay"

    def __init__(self, verifies: list[tuple[int, bool | None]], beyond: int, belief: str = "geometric",
                 table: list[list[float]] | None = None, ranks: list[tuple[int, ...] | None] | None = None,
                 scale: float = 1.0) -> None:
        if not verifies:
            raise ValueError("acceptance.file: the replay holds no verifies")
        if belief == "table" and table is None:
            raise ValueError("acceptance.replay_belief=table needs the acceptance.positional table")
        self.verifies = verifies
        self.ranks = ranks if ranks is not None else [None] * len(verifies)
        # belief `table`: the tree grows by the table's belief (unscaled), and ranks without a record are drawn
        # from the table the runtime's oracle drew from (scaled, as it was)
        self._positional = PositionalAcceptance(table, scale) if table is not None and belief == "table" else None
        self.divergences = 0
        """Verifies the simulated proposal could not replay as recorded: a recorded accepted node it lacks (the
        path ends there, shorter), or a recorded bonus that it proposed (kept as the bonus)."""
        self.beyond = beyond
        self.index = 0
        self.belief_kind = belief

    def belief(self, topk: int) -> list[list[float]]:
        """The replay has no table of its own: geometric (rank r weighs 2^-(r+1)), uniform (ranks alike, ties
        broken by rank: a breadth-first tree, as a random-weight draft's flat top-k log-probs grow it) or table
        (the positional table's belief, as the runtime's oracle draft grew it with spec.oracle_belief=table)."""
        if self._positional is not None:
            return self._positional.belief(topk)
        if self.belief_kind == "uniform":
            return [[-math.log(topk) - 1e-9 * r for r in range(topk)]]
        return [[-(r + 1) * math.log(2.0) for r in range(topk)]]

    def walk(self, children: dict[tuple[int, int], int], uniforms: list[float], position: int) -> tuple[
            tuple[int, ...], tuple[int, ...]]:
        """The recorded accepted length, then the recorded hit/miss. Which ranks: with belief `table` (the
        runtime drew them from that table), each accepted rank is drawn from the table's row restricted to the
        ranks the proposal holds, and a hit's bonus rank from the row restricted to the ranks it does not hold
        (a drawn rank that was proposed would have been accepted), by `uniforms[position + depth]`: the run's
        accepted counts are kept exactly (only ranks whose proposed subtree is deep enough for the rest of the
        accepted path are drawn) and the subtree kept on a hit has the runtime's size in distribution
        (the rank-0 child's, the largest, biased the simulated tree too full: fewer refills than measured).
        Otherwise the top-ranked chain and rank 0."""
        accepted, hit = self.verifies[self.index % len(self.verifies)]
        recorded = self.ranks[self.index % len(self.verifies)]
        self.index += 1
        if recorded is not None:
            return self._follow(children, recorded)
        node = 0
        ranks: list[int] = []
        nodes = [0]
        drawn = self._positional is not None
        height = _heights(children) if drawn and accepted > 1 else {}
        for depth in range(accepted):
            need = accepted - depth - 1  # accepted tokens still to come below the next one
            r = self._rank(depth, uniforms, position, lambda q, n=node, k=need: (
                (n, q) in children and height.get(children[(n, q)], 0) >= k), fallback=0) if drawn else 0
            child = children.get((node, r))
            if child is None:
                self.divergences += 1
                break
            ranks.append(r)
            nodes.append(child)
            node = child
        bonus = self.beyond
        if hit:
            bonus = 0
            if drawn:
                bonus = self._rank(len(ranks), uniforms, position, lambda q, n=node: (n, q) not in children,
                                   fallback=self.beyond)
        ranks.append(bonus)
        return tuple(ranks), tuple(nodes)

    def _follow(self, children: dict[tuple[int, int], int], recorded: tuple[int, ...]) -> tuple[
            tuple[int, ...], tuple[int, ...]]:
        """The recorded draft ranks exactly (the run's iterations.csv `ranks`): accepted ranks while the
        proposal holds them, then the recorded bonus rank (-1, a miss: a rank beyond the tree)."""
        node, ranks, nodes = 0, [], [0]
        for r in recorded[:-1]:
            child = children.get((node, r))
            if child is None:  # the simulated proposal lacks the recorded node: stop there, as a miss
                self.divergences += 1
                ranks.append(self.beyond)
                return tuple(ranks), tuple(nodes)
            ranks.append(r)
            nodes.append(child)
            node = child
        bonus = recorded[-1] if recorded[-1] >= 0 else self.beyond
        if (node, bonus) in children:  # the runtime had not proposed it; the simulated tree did
            self.divergences += 1
        ranks.append(bonus)
        return tuple(ranks), tuple(nodes)

    def _rank(self, depth: int, uniforms: list[float], position: int, allowed: Any, fallback: int) -> int:
        """A rank drawn from the (scaled) table's row at `depth`, restricted to `allowed(rank)`; `fallback` if
        no rank is allowed, the first allowed one if the row gives them no mass."""
        assert self._positional is not None
        table = self._positional.table
        row = table[min(depth, len(table) - 1)]
        ranks = [r for r in range(self.beyond) if allowed(r)]  # the draft tree holds topk ranks
        if not ranks:
            return fallback
        weights = [row[r] if r < len(row) else 0.0 for r in ranks]
        total = sum(weights)
        if total <= 0.0:
            return ranks[0]
        u, acc = uniforms[position + depth] * total, 0.0
        for r, wgt in zip(ranks, weights):
            acc += wgt
            if u < acc:
                return r
        return ranks[-1]


def _heights(children: dict[tuple[int, int], int]) -> dict[int, int]:
    """Proposal index -> depth of the proposed subtree below it (0 for a proposed leaf); parents precede
    their children in a proposal, so one pass from the back settles every node."""
    parent = {c: p for (p, _), c in children.items()}
    height: dict[int, int] = {}
    for c in sorted(parent, reverse=True):
        p = parent[c]
        height[p] = max(height.get(p, 0), height.get(c, 0) + 1)
    return height


def read_replay_csv(path: str) -> list[dict[str, Any]]:
    """A recorded run's iterations.csv as replay entries: accepted, hit (None where empty), ranks (where
    recorded) and request (where the column exists); errors name the file and row."""
    p = resolve_path(path)
    if not p.exists():
        raise FileNotFoundError(f"acceptance.file: recorded run {p} does not exist")
    with p.open() as f:
        rows = list(csv.DictReader(f))
    out: list[dict[str, Any]] = []
    for i, r in enumerate(rows):
        if "accepted" not in r or not str(r["accepted"]).strip().isdigit():
            raise ValueError(f"{p}: row {i + 2}: accepted: needs a non-negative integer, got {r.get('accepted')!r}")
        flag = str(r.get("hit") or "").strip().lower()
        entry: dict[str, Any] = {"accepted": int(r["accepted"]), "hit": None if flag == "" else flag in ("1", "true")}
        if str(r.get("request") or "").strip():
            entry["request"] = int(r["request"])
        ranks = str(r.get("ranks") or "").strip()
        if ranks:
            try:
                entry["ranks"] = [int(x) for x in ranks.split(".")]
            except ValueError:
                raise ValueError(f"{p}: row {i + 2}: ranks: needs dot-joined integers, got {ranks!r}") from None
        out.append(entry)
    return out


def _parse_replay(data: Any, where: str) -> tuple[list[tuple[int, bool | None]], list[tuple[int, ...] | None]]:
    """(accepted, hit) per verify, and its recorded draft ranks (accepted ranks + bonus rank) or None."""
    if isinstance(data, dict):
        data = data.get("verifies")
    if not isinstance(data, list):
        raise ValueError(f"{where}: replay must be a JSON list of verifies or {{\"verifies\": [...]}}")
    out: list[tuple[int, bool | None]] = []
    ranks: list[tuple[int, ...] | None] = []
    for i, v in enumerate(data):
        if isinstance(v, int) and not isinstance(v, bool):
            v = {"accepted": v, "hit": None}
        if not isinstance(v, dict) or not isinstance(v.get("accepted"), int) or v["accepted"] < 0:
            raise ValueError(f"{where}[{i}]: needs an integer 'accepted' >= 0, got {v!r}")
        hit = v.get("hit")
        if hit is not None and not isinstance(hit, bool):
            raise ValueError(f"{where}[{i}].hit: must be true, false or null, got {hit!r}")
        r = v.get("ranks")
        if r is not None and (not isinstance(r, list) or len(r) != v["accepted"] + 1
                              or not all(isinstance(x, int) and x >= -1 for x in r)):
            raise ValueError(f"{where}[{i}].ranks: needs accepted + 1 = {v['accepted'] + 1} integers >= -1 "
                             f"(accepted ranks, then the bonus's; -1 = not drafted), got {r!r}")
        out.append((v["accepted"], hit))
        ranks.append(tuple(r) if r is not None else None)
    return out, ranks


def read_replay(path: str) -> tuple[list[tuple[int, bool | None]], list[tuple[int, ...] | None]]:
    """(accepted, hit) per verify of a recorded run (its iterations.csv, or JSON: a list of verifies or
    {"verifies": [...]}) and each verify's draft ranks or None; errors name the file and the row or entry.
    The runtime's replay oracle reads the same (runtime/oracle.py)."""
    raw = read_replay_csv(path) if str(path).endswith(".csv") else _read_json(path, "acceptance.file")
    return _parse_replay(raw, str(path))


def _domain_table(data: Any, path: str, domain: str) -> dict[str, Any]:
    """The `by_domain[domain]` entry of an acceptance report (acceptance.domain); errors name the file."""
    domains = data.get("by_domain") if isinstance(data, dict) else None
    if not isinstance(domains, dict):
        raise ValueError(f"{path}: by_domain: missing; acceptance.domain={domain!r} needs an acceptance report "
                         "with per-domain tables (python -m runtime.acceptance_report)")
    if domain not in domains:
        raise ValueError(f"{path}: by_domain: no {domain!r} entry for acceptance.domain; it has "
                         f"{sorted(domains)}")
    entry = domains[domain]
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: by_domain.{domain}: expected an object with a positional table")
    return entry


def load_acceptance(cfg: AcceptanceConfig, topk: int) -> PositionalAcceptance | ReplayAcceptance:
    """The acceptance model the config names (file before inline table); errors name file and field."""
    if cfg.kind == "replay":
        if cfg.file is None:
            raise ValueError("acceptance.file: kind=replay needs a recorded run file")
        verifies, ranks = read_replay(cfg.file)
        return ReplayAcceptance(verifies, beyond=topk, belief=cfg.replay_belief,
                                table=[list(row) for row in cfg.positional], ranks=ranks, scale=cfg.scale)
    if cfg.kind == "family":
        return PositionalAcceptance(family_table(cfg.top1, cfg.decay, cfg.depth_gain), cfg.scale)
    table: Any = cfg.positional
    if cfg.file is not None:
        data = _read_json(cfg.file, "acceptance.file")
        if cfg.domain is not None:
            data = _domain_table(data, cfg.file, cfg.domain)
        if isinstance(data, list):  # a bare table of rows
            table = _check_table(data, f"{cfg.file}")
        elif isinstance(data, dict) and "positional" in data:
            table = _check_table(data["positional"], f"{cfg.file}: positional")
        else:
            raise ValueError(f"{cfg.file}: positional: missing (expected {{\"positional\": [[...]]}} "
                             "or a list of rows)")
    return PositionalAcceptance([list(row) for row in table], cfg.scale)
