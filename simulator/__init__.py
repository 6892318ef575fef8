"""SimPy discrete-event simulator of disaggregated, asynchronous speculative decoding (SwiftSpec).

Never imports torch, kernels/ or runtime/; depends on conf/ (schema, presets, messages, trace, run dirs) and policy/.

Modules (one concept each):
- `cost_model`: pure per-operator step costs (analytic roofline prior; fitted profile where one exists);
- `profile`: the versioned profile file format (calibrate.py writes it), loader and per-operator `predict`;
- `interconnect`: alpha-beta links, all-reduce algorithms (oneshot, ring, tree), cross-group messages;
- acceptance (truth per depth and rank, replay of a recorded run) and the depth tuner: policy/, shared with the
  runtime;
- `tree`: the draft tree of ranks (best-first growth, top-bs selection, re-rooting), memoised states;
- `processes`: SimPy processes, one per GPU group and one per link direction;
- `records`, `metrics`: what a run records and the metrics contract;
- `checks`: simulator-level config checks; `simulation`: wiring; `main`: run dirs; `autoconfig`: search.

Glossary (as the runtime): draft tokens, tree, verify step, draft step (expansion of w leaves), accepted /
bonus tokens, acceptance length (accepted + bonus), re-root hit / miss.
"""
