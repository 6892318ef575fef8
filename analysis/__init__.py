"""Paper figures from run directories: one `figNN_<topic>.py` script per figure.

Every script reads run dirs only (resolved config + metrics + optional iterations.csv / traces.jsonl, see
`conf/rundir.py`) and never re-runs an experiment. Shared pieces:

- `runs`: find and load run dirs, typed metric access with errors that name the folder and key;
- `figdata`: the plotted data each `make_figure(runs)` returns (series name -> x, y; axis labels);
- `style`: fonts, colours per mode, `save_figure(fig, out_stem)` (PNG + PDF, atomic);
- `cli`: the command line every figure script shares (`RUN_DIR_OR_GLOB... --out STEM`).
"""
