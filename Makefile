# Project recipes. Figures read run dirs and measured results (data/measured/, MANIFEST.json says what each is);
# `make examples` re-runs the simulator for the example runs.
#   make figures                        docs/figures/ from examples/runs/
#   make figures MEASURED="runs/generate/*"   also pair runtime run dirs in fig04/fig05
#   make examples                       regenerate examples/runs/ (python simulate.py sweeps)
#   make simulate ARGS="spec=chain"     one simulation with Hydra overrides
#   make test                           the CPU test suite (scripts/test.sh)
#   make validate                       the simulator against data/measured's validation runs (CPU; runs/validate/)
PY ?= .venv/bin/python
EXAMPLES ?= examples/runs
FIGDIR ?= docs/figures
MEASURED ?=
ARGS ?=
# Fig. 9 (what a miss costs): measured runs of git 954a1bf and their re-simulation (serial_bs8_w8_dauto is a fit
# configuration of the profile: measured only); Fig. 10 (a leader message's path): the same measured runs
FIG09_RUNS ?= data/measured/runtime_runs_2026-12-01_954a1bf
FIG09_SIM ?= data/measured/validation_sim_2026-12-01_954a1bf
FIG09_CONFIGS ?= serial_bs8_w8_dauto async_bs4_w4_dauto async_bs8_w8_dauto autoconfig_bs8_w16_d3
FIG09_OUT ?= $(FIGDIR)/fig09_miss_cost_h200
# Fig. 5 on the H200: the measured run of the simulator's pick at git e92dbf1 and its re-simulation
FIG05_RUN ?= data/measured/runtime_runs_2026-11-30_e92dbf1/autoconfig_bs8_w16_d3
FIG05_SIM ?= data/measured/validation_sim_2026-11-30_e92dbf1_events/autoconfig_bs8_w16_d3
FIG10_CONFIGS ?= chain_g4 serial_bs8_w8_dauto async_bs8_w8_d4 autoconfig_bs8_w16_d3
FIG10_OUT ?= $(FIGDIR)/fig10_message_path_h200

.PHONY: figures examples simulate test validate

figures:
	$(PY) analysis/fig01_gpu_split.py $(EXAMPLES)/fig01_gpu_split --out $(FIGDIR)/fig01_gpu_split
	$(PY) analysis/fig02_acceptance.py $(EXAMPLES)/fig02_acceptance --out $(FIGDIR)/fig02_acceptance
	$(PY) analysis/fig03_interconnect.py $(EXAMPLES)/fig03_interconnect --out $(FIGDIR)/fig03_interconnect
	$(PY) analysis/fig04_parity.py $(EXAMPLES) $(MEASURED) --out $(FIGDIR)/fig04_parity
	$(PY) analysis/fig05_timeline.py $(EXAMPLES)/fig05_timeline $(MEASURED) --out $(FIGDIR)/fig05_timeline
	$(PY) analysis/fig05_timeline.py $(FIG05_RUN) $(FIG05_SIM) --out $(FIGDIR)/fig05_timeline_h200
	$(PY) analysis/fig06_ablation.py $(EXAMPLES)/fig06_ablation --out $(FIGDIR)/fig06_ablation
	$(PY) analysis/fig07_acceptance_hist.py $(EXAMPLES)/fig06_ablation --out $(FIGDIR)/fig07_acceptance_hist
	$(PY) analysis/fig08_step_breakdown.py data/measured/step_variants_2026-11-30_prefetch.json \
	    --out $(FIGDIR)/fig08_step_breakdown
	$(PY) analysis/fig08_step_breakdown.py data/measured/step_variants_experiments_053c53d.json \
	    --case llama3-8b:8 --case llama3-8b:1 --top 9 --out $(FIGDIR)/fig08_experiments
	$(PY) analysis/fig08_step_breakdown.py data/measured/step_variants_2026-12-01_3823e13_wpf_8b.json \
	    --case llama3-8b:8 --case llama3-8b:1 --top 8 --out $(FIGDIR)/fig08_early_norms
	$(PY) analysis/fig09_miss_cost.py $(foreach c,$(FIG09_CONFIGS),$(FIG09_RUNS)/$(c) $(FIG09_RUNS)/$(c)__r1) \
	    $(foreach c,$(filter-out serial%,$(FIG09_CONFIGS)),$(FIG09_SIM)/$(c) $(FIG09_SIM)/$(c)__r1) \
	    --out $(FIG09_OUT)
	$(PY) analysis/fig10_message_path.py $(foreach c,$(FIG10_CONFIGS),$(FIG09_RUNS)/$(c) $(FIG09_RUNS)/$(c)__r1) \
	    --out $(FIG10_OUT)

examples:
	PY=$(PY) bash analysis/make_examples.sh $(EXAMPLES)

simulate:
	$(PY) simulate.py $(ARGS)

test:
	bash scripts/test.sh

validate:
	$(PY) -m calibration.validate compare --runs $(FIG09_RUNS) --profile profiles/h200.json --sim-out runs/validate/sim \
	    --results runs/validate/validation.json --doc runs/validate/VALIDATION.md --figure runs/validate/fig04_parity_h200
