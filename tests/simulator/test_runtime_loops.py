"""The profile's per-loop runtime costs (`runtime.loops`): fitted per loop shape (simulator/runtime_fit.py), read by
the profile loader, overlaid by build_costs for the config's loop, moved by sim.whatif.runtime_delta; and the shipped
profile against colocated runs it was not fitted on."""

from __future__ import annotations

import json

import pytest

from conf.rundir import MEASURED_DIR
from conf.trace import TRACE_FILE, write_traces
from simulator.profile import Profile, ProfileError, load_profile, parse_profile, write_profile
from simulator.runtime_fit import fit_runtime_costs
from simulator.simulation import build_costs
from tests.simulator.conftest import cfg
from tests.simulator.conftest import span_record as _span
from tests.simulator.test_runtime_fit import BASE, PRIOR, _recorded_run


def test_loop_shapes_fit_their_own_host_costs_and_their_configs_take_them(tmp_path):
    """The colocated one-GPU loop (one loop drives the target and its draft) and chain drafting on two groups spend
    other host time per step than tree modes on two groups: calibrate fits each loop's costs on its runs alone
    (`runtime.loops`) and the top-level ones on the rest; the simulator charges a loop's entry to configs of that
    loop only (tree modes on two groups and TP > 1 colocated drafts keep the top level; a profile without entries: the
    top level everywhere)."""
    from policy.predicates import loop_shape
    from simulator.main import run as run_sim
    from simulator.runtime_fit import loop_costs

    two_cfg, two_dir = _recorded_run(tmp_path / "two")
    colo_cfg, chain_cfg = cfg(*BASE, "spec=serial_tree", "parallel=1x0"), cfg(*BASE, "spec=chain", "spec.gamma=4")
    assert [loop_shape(c) for c in (two_cfg, colo_cfg, chain_cfg)] == ["", "colocated", "chain"]
    colo_dir, chain_dir = tmp_path / "colo" / "serial_tree", tmp_path / "chain" / "chain"
    run_sim(colo_cfg, colo_dir, verbose=False)
    run_sim(chain_cfg, chain_dir, verbose=False)
    two, colo, chain = (build_costs(c, profile=PRIOR) for c in (two_cfg, colo_cfg, chain_cfg))
    recs: dict[str, list] = {"two": [], "colo": [], "chain": []}
    for it in range(1, 61):
        ctx = 600 + it
        recs["two"].append(_span("step.verify", "target", 0, it, two.target.forward_s(8, ctx + 8) + 1.5e-4, 8, ctx))
        recs["colo"].append(_span("step.verify", "target", 0, it, colo.target.forward_s(8, ctx + 8) + 6e-5, 8, ctx))
        recs["chain"].append(_span("step.verify", "target", 0, it, chain.target.forward_s(5, ctx + 5) + 1.4e-4, 5,
                                   ctx))
        recs["chain"].append(_span("step.expand", "draft", 1, it, chain.draft.forward_s(1, ctx + 1) + 5e-5, 1, ctx,
                                   rows=1))
        for rows in (1, 8):
            recs["two"].append(_span("step.expand", "draft", 1, it,
                                     two.draft.forward_s(8, ctx + 8) + 1.2e-4 + 5e-6 * rows, 8, ctx, rows=rows))
            # colocated: the draft's spans are the target group's (one loop)
            recs["colo"].append(_span("step.expand", "target", 0, it,
                                      colo.draft.forward_s(8, ctx + 8) + 3e-5 + 1e-6 * rows, 8, ctx, rows=rows))
        recs["two"].append(_span("step.keep", "target", 0, it, 1.0e-5))
        recs["colo"].append(_span("step.keep", "target", 0, it, 3.0e-5))
    for key, d in (("two", two_dir), ("colo", colo_dir), ("chain", chain_dir)):
        write_traces(d / TRACE_FILE, recs[key])
    fitted, report = fit_runtime_costs([two_dir, colo_dir, chain_dir], PRIOR)
    assert fitted["step_extra_s"] == pytest.approx(1.5e-4, rel=1e-6)
    assert fitted["expand_extra_s"] == pytest.approx(1.2e-4, rel=1e-6)
    assert fitted["expand_extra_per_real_row_s"] == pytest.approx(5e-6, rel=1e-6)
    assert fitted["keep_s"] == pytest.approx(2.0e-5, rel=1e-6)  # the same bookkeeping: pooled over the loops
    loops = loop_costs(report)
    assert loops["colocated"] == pytest.approx({"step_extra_s": 6e-5, "expand_extra_s": 3e-5,
                                                "expand_extra_per_real_row_s": 1e-6}, rel=1e-6)
    assert loops["chain"] == pytest.approx({"step_extra_s": 1.4e-4, "expand_extra_s": 5e-5,
                                            "expand_extra_per_real_row_s": 0.0}, rel=1e-6)
    assert [r["loop"] for r in report["per_run"]] == ["", "colocated", "chain"]
    assert report["loops"]["colocated"]["runs"] == ["serial_tree"]

    prof = Profile("p", {"gpu": "h200"}, {}, {}, fitted, loops)
    ops = load_profile("profiles/h200_954a1bf.json").operators  # a file needs operators: any will do
    write_profile(tmp_path / "p.json", Profile("p", {"gpu": "h200"}, {}, ops, fitted, loops))
    assert load_profile(tmp_path / "p.json").runtime_loops == loops  # round trip with the loops
    charged = {k: build_costs(c, profile=prof) for k, c in (("two", two_cfg), ("colo", colo_cfg), ("chain", chain_cfg))}
    plain = {"two": two, "colo": colo, "chain": chain}
    for key, step, draft in (("two", 1.5e-4, 1.25e-4), ("colo", 6e-5, 3.1e-5), ("chain", 1.4e-4, 5e-5)):
        c, p = charged[key], plain[key]
        assert c.target.forward_s(8, 700) - p.target.forward_s(8, 700) == pytest.approx(step), key
        assert c.draft.forward_s(8, 700, 1.0) - p.draft.forward_s(8, 700) == pytest.approx(draft), key
    # a TP-2 target with a colocated draft keeps the top-level expansion cost
    tp2 = build_costs(cfg(*BASE, "spec=chain", "parallel=2x0"), profile=prof)
    tp2_plain = build_costs(cfg(*BASE, "spec=chain", "parallel=2x0"), profile=PRIOR)
    assert tp2.draft.forward_s(1, 700, 1.0) - tp2_plain.draft.forward_s(1, 700) == pytest.approx(1.25e-4)
    # without loop entries a colocated config takes the top-level costs
    top = build_costs(colo_cfg, profile=Profile("p", {"gpu": "h200"}, {}, {}, fitted))
    assert top.target.forward_s(8, 700) - colo.target.forward_s(8, 700) == pytest.approx(1.5e-4)
    assert top.draft.forward_s(8, 700, 1.0) - colo.draft.forward_s(8, 700) == pytest.approx(1.25e-4)


def test_runtime_loops_in_a_profile_name_the_bad_field():
    """`runtime.loops`: an unknown loop shape or a cost a loop cannot hold names the field."""
    base = {"version": 1, "hardware": {"gpu": "h200"}, "operators": {
        "gemm": {"coefficients": {"a": 1e-6, "b": 1e-13, "c": 1e-15}, "fit_error": {"mape": 0.1}}}}
    ok = parse_profile({**base, "runtime": {"step_extra_s": 1e-4, "loops": {"chain": {"draft_round_s": 9e-5}}}})
    assert ok.runtime == {"step_extra_s": 1e-4} and ok.runtime_loops == {"chain": {"draft_round_s": 9e-5}}
    with pytest.raises(ProfileError, match=r"runtime\.loops\.ring: unknown loop shape; allowed: \['colocated', "
                                           r"'chain'\]"):
        parse_profile({**base, "runtime": {"loops": {"ring": {}}}})
    with pytest.raises(ProfileError, match=r"runtime\.loops\.colocated\.keep_s: unknown key; allowed: "):
        parse_profile({**base, "runtime": {"loops": {"colocated": {"keep_s": 1e-5}}}})
    with pytest.raises(ProfileError, match=r"runtime\.loops\.chain\.draft_round_s: must be a finite number of "
                                           r"seconds >= 0, got -1"):
        parse_profile({**base, "runtime": {"loops": {"chain": {"draft_round_s": -1}}}})
    with pytest.raises(ProfileError, match=r"runtime\.loops: must be an object keyed by loop shape"):
        parse_profile({**base, "runtime": {"loops": [1]}})


def test_run_dirs_with_the_removed_zero_deltas_still_load(tmp_path):
    """Runs recorded at 5c7897b-82f9825 carry sim.runtime_delta.colocated_* = 0 (fields since replaced by the
    profile's runtime.loops, conf/retired.py): they load without them; a nonzero one fails, naming the key."""
    from conf.rundir import config_from_dict, read_run
    from simulator.main import run as run_sim

    config = cfg(*BASE, "spec=chain")
    run_sim(config, tmp_path / "r", verbose=False)
    data = read_run(tmp_path / "r")["config"]
    data["sim"]["runtime_delta"] = {"step_extra_s": 0.0, "colocated_step_extra_s": 0.0}  # as recorded then
    assert config_from_dict(data).sim.whatif.runtime_delta == {}
    data["sim"]["runtime_delta"]["colocated_step_extra_s"] = 1e-5
    with pytest.raises(ValueError, match=r"sim\.runtime_delta\.colocated_step_extra_s: removed"):
        config_from_dict(data)


def test_runtime_delta_applies_to_the_cost_the_configs_loop_takes():
    """sim.whatif.runtime_delta changes the runtime cost the config's loop uses: a colocated config's runtime.loops
    entry, a two-group tree config's top level; an entry neither has is refused by name."""
    prof = Profile("p", {"gpu": "h200"}, {}, {}, {"step_extra_s": 1.5e-4, "expand_extra_s": 1.2e-4},
                   {"colocated": {"step_extra_s": 6e-5, "expand_extra_s": 3e-5}})
    for par, mode, step in (("1x0", "serial_tree", 6e-5), ("1x1", "serial_tree", 1.5e-4)):
        base = cfg(*BASE, f"spec={mode}", f"parallel={par}")
        moved = cfg(*BASE, f"spec={mode}", f"parallel={par}", "+sim.whatif.runtime_delta.step_extra_s=-2e-5")
        plain = build_costs(base, profile=PRIOR).target.forward_s(8, 700)
        assert build_costs(base, profile=prof).target.forward_s(8, 700) - plain == pytest.approx(step)
        assert build_costs(moved, profile=prof).target.forward_s(8, 700) - plain == pytest.approx(step - 2e-5)
    with pytest.raises(ValueError, match=r"sim\.whatif\.runtime_delta\.draft_round_s: p has no runtime entry"):
        build_costs(cfg(*BASE, "spec=serial_tree", "parallel=1x0", "+sim.whatif.runtime_delta.draft_round_s=1e-5"),
                    profile=prof)


COLOCATED_HELD_OUT = (
    [("runtime_runs_2026-12-01_5fa8232_colocated", n)
     for n in ("small_autoregressive", "small_chain", "small_serial_tree", "large_chain", "large_serial_tree")]
    + [("runtime_runs_2026-12-01_307a064_eager_warmup", n) for n in ("autoregressive_pgtrue", "chain_pgtrue")])


@pytest.mark.parametrize("folder,name", COLOCATED_HELD_OUT)
def test_the_shipped_profile_prices_held_out_colocated_runs(folder, name, tmp_path):
    """The default profile against colocated one-GPU runs it was not fitted on (two calls; the real pair's shapes and
    the 8B / 1B shapes): tokens/s within 10% (measured 2026-12-01: -8.1% to +8.3%; the 954a1bf profile -3.8% to
    -22.2%), replayed as calibration/validate.py compare does."""
    from pathlib import Path

    from calibration.compare import simulate_run

    repo = Path(__file__).resolve().parents[2]
    run_dir = MEASURED_DIR / folder / name
    profile = str(repo / "profiles" / "h200.json")
    fitted = json.loads((repo / "profiles" / "h200.report.json").read_text())["runtime"]["runs"]
    assert (folder, name) not in {(Path(r).parent.name, Path(r).name) for r in fitted}  # held out: no fit run
    row = simulate_run(run_dir, profile, tmp_path / "sim")
    assert abs(row["tokens_per_s"]["error"]) <= 0.10, row["tokens_per_s"]
