"""Decision policy shared by the runtime and the simulator, so both decide alike. Torch-free: imports only conf/.

- `acceptance`: the acceptance models (positional table, replay of a recorded run): the simulator's truth, the
  runtime oracle's table and belief;
- `acceptance_family`: positional tables from three parameters (weak to strong drafts), and exact expected tokens;
- `depth_tuner`: d of async_tree, fixed or auto from measured times (the runtime on host time, the simulator on
  simulated time);
- `predicates`: what a configuration implies for the loop that runs it (`uses_draft`, `draft_tp`,
  `chained_autoregressive`, `loop_shape`).

The runtime and the simulator import this package, never each other (tests/policy/test_layering.py).
"""
