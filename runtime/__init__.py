"""The decoding runtime: models, KV cache, tensor parallelism, speculation engine (PyTorch).

Glossary (one vocabulary across runtime, kernels, simulator and docs):

- *prefix*: the tokens whose K/V sit in cache slots [0, prefix_len): prompt plus accepted output.
- *tree* / *tree region*: draft nodes whose K/V sit after the prefix; node i's *tree mask* row marks its
  ancestors and itself. *Tree paths* are root-to-node index lists.
- *positions*: RoPE positions of new tokens (prefix length + depth for tree nodes).
- *write slots*: the cache slots where a forward stores its new tokens' K/V (`AttnMeta.write_slots`).
- *draft tokens*: tokens proposed by the draft model; *draft step*: one draft forward (an expansion of w
  leaves); *verify step*: one target forward over a selected subtree.
- *accepted* tokens: draft tokens the target agrees with; *bonus* token: the target's own next token after
  the accepted path; *recovered* token: the target's replacement at the first rejection (temperature > 0);
  *output* tokens: accepted + bonus; *acceptance length*: accepted tokens per verify step.
- *retrieve indices*: map from a tree path to flattened node indices.
- *shard*: one TP rank's slice of a model; *local* sizes (heads, columns) are per shard, zero-padded to be
  uniform across the group.

Module map (models): `model` (the TP-free decoder), `attention` (AttnMeta + backends), `kv_cache`,
`tp` (sharding transform), `checkpoint` (safetensors / GGUF readers), `loader` (`build_model`),
`tokenizer`, `fetch_smollm2` (places the default real target model).
"""
