"""Sampling at temperature > 0: plain token sampling and lossless verification of a deterministic tree.

The draft tree's children are the draft's top-k tokens, chosen deterministically, not samples from the
draft distribution q. SpecInfer's multi-candidate rule (accept a child x ~ q with prob min(1, p(x)/q(x)),
then p <- norm(max(p - q, 0))) is only lossless when the candidates are i.i.d. samples of q, so it does
not apply. We use the rule that is lossless for any fixed candidate set (SpecExec / Sequoia without
replacement; q is one-hot on the candidate being tried):

    at an accepted node v, with target distribution r <- p(. | path to v) (temperature-scaled):
    for each drafted child c_1, ..., c_m of v, in order:
        accept c_i with probability r(c_i)            (the *current residual*, normalised)
        on rejection: r(c_i) <- 0; r <- r / sum(r)
    if some c_i was accepted: descend into it and repeat there;
    otherwise: emit the bonus token y ~ r and stop.

**Proof that the emitted sequence is distributed exactly as sampling from the target.** Let s_i =
p(c_1) + ... + p(c_i) (s_0 = 0). Before trying c_i all of c_1..c_{i-1} were rejected, and the residual is
p with those tokens zeroed, renormalised: r(c_i) = p(c_i) / (1 - s_{i-1}). By induction,
P(reject c_1..c_{i-1}) = prod_{j<i} (1 - p(c_j)/(1 - s_{j-1})) = prod_{j<i} (1 - s_j)/(1 - s_{j-1}) = 1 - s_{i-1},
so P(accept c_i) = (1 - s_{i-1}) * p(c_i)/(1 - s_{i-1}) = p(c_i). If all m are rejected (probability
1 - s_m) the bonus is y ~ p restricted to the other tokens and renormalised, so P(emit y) =
(1 - s_m) * p(y)/(1 - s_m) = p(y) for every non-candidate y. Hence the next token equals x with probability
p(x) for every x, whether or not x was drafted. Accepting c_i continues at the child node, whose
distribution is p(. | path, c_i), so by induction over depth every emitted token is drawn from the
target's conditional distribution given all earlier tokens: the output is exactly target sampling.
(If some s_{i-1} = 1, the earlier candidates absorb all mass and c_i is never reached.) The rule is
equivalent in distribution to drawing x ~ p at v and descending iff x is a child; we keep the
sequential form because it is the one that generalises to stochastic candidates.

Randomness: only the request's own `torch.Generator` (STYLE 2.6.5), one uniform per candidate tried and
one multinomial draw for the bonus. The m uniforms of a node are drawn at once and the first accepted
candidate is found with tensor ops (one host sync per depth level, none per candidate).
"""

from __future__ import annotations

import torch


def probs_from_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / temperature) in fp32; [..., vocab] -> [..., vocab]."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def sample_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    """One token from `logits` ([vocab]): argmax at temperature 0, else a sample with `generator`."""
    if temperature <= 0:
        return int(logits.argmax())
    return int(torch.multinomial(probs_from_logits(logits, temperature), 1, generator=generator))


def accept_among_candidates(
    probs: torch.Tensor, candidates: torch.Tensor, generator: torch.Generator
) -> tuple[int, torch.Tensor]:
    """Try `candidates` in order against the target distribution `probs`; the sequential rule above.

    Args:
        probs: [vocab] fp32 target distribution at the node.
        candidates: [m] int64 distinct drafted child tokens, in the order they are tried (m may be 0).
        generator: the request's generator.

    Returns:
        (index of the accepted candidate or -1, the residual distribution [vocab] after the rejections
        before it; when -1, the distribution to draw the bonus token from).
    """
    m = candidates.numel()
    if m == 0:
        return -1, probs
    p_c = probs[candidates]  # [m]
    before = torch.cumsum(p_c, 0) - p_c  # [m] s_{i-1}: mass of the candidates tried before c_i
    remaining = (1.0 - before).clamp_min(0.0)
    accept_prob = torch.where(remaining > 0, p_c / remaining.clamp_min(1e-30), torch.zeros_like(p_c))
    u = torch.rand(m, generator=generator, device=probs.device, dtype=probs.dtype)  # [m]
    accepted = u < accept_prob
    first = int(torch.argmax(accepted.int())) if bool(accepted.any()) else -1
    rejected = candidates if first < 0 else candidates[:first]
    residual = probs.clone()
    residual[rejected] = 0.0
    total = residual.sum()
    if float(total) <= 0.0:  # rounding only: the drafted children held all the mass
        residual = probs
    else:
        residual = residual / total
    return first, residual


def sample_tree(
    logits: torch.Tensor, token_ids: list[int], parents: list[int], temperature: float, generator: torch.Generator
) -> tuple[list[int], int]:
    """Lossless tree verification at temperature > 0 (see the module docstring for the proof).

    Args:
        logits: [n, vocab] target logits after each node (row i: next-token logits after node i's path).
        token_ids: [n] node tokens, root first; parents: [n] parent index (-1 for the root).
        temperature: > 0.
        generator: the request's generator.

    Returns:
        (accepted path of node indices, root first; the bonus token).
    """
    children: list[list[int]] = [[] for _ in token_ids]
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    probs = probs_from_logits(logits, temperature)  # [n, vocab]
    path = [0]
    while True:
        node = path[-1]
        kids = children[node]
        cand = torch.tensor([token_ids[c] for c in kids], dtype=torch.long, device=logits.device)
        first, residual = accept_among_candidates(probs[node], cand, generator)
        if first < 0:
            bonus = int(torch.multinomial(residual, 1, generator=generator))
            return path, bonus
        path.append(kids[first])
