"""Every command of README.md works as written: the commands of its ```bash blocks (one a line; `&&` chains
split), each run on the CPU in its cheapest form. The rules, the first that matches:

1. GPU commands (the line's comment starts with `GPU`, or it starts with torchrun / deepspeed) do not run: a
   generate.py launch is composed and validated with its overrides (conf.compose_config), a bash script is
   syntax-checked, any other path it names must exist.
2. `bash <script>`: syntax-checked (`bash -n`): setup.sh installs packages, test.sh runs the whole suite.
3. `python -m runtime.fetch_smollm2` (a 98 MB download): the module must exist.
4. `make <target>`: a dry run (`make -n`); every script and data path it would read must exist.
5. `python generate.py ...`: a line that names `model=tiny` runs, with `workload.num_requests=1
   workload.max_new_tokens=4`; any other (the real pair decodes for ~30 s on a CPU; scripts/test.sh's real_pair
   stage runs it) is composed and validated.
6. `python simulate.py ...`: runs as written with `workload.num_requests=1 workload.max_new_tokens=32` appended
   (and `hydra.sweeper.n_trials=2` for the Optuna sweeper); `python calibrate.py ...` runs as written.
7. `python -m pytest ...`: `--collect-only`; any other `python -m <module> [subcommand] ...`: `--help` (of the
   subcommand).

Paths under `runs/` and the run / sweep dirs go to a temporary folder; the commands run in README order, so a later
one reads what an earlier one wrote (calibrate.py's profile).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
"""Module -> the change that adds it; skipped while absent."""
CHEAP_SIM = ["workload.num_requests=1", "workload.max_new_tokens=32"]
CHEAP_GEN = ["workload.num_requests=1", "workload.max_new_tokens=4"]
TIMEOUT_S = 240


def readme_commands(text: str) -> list[tuple[str, str]]:
    """(command, its comment) of every line of the ```bash blocks (a trailing backslash continues it), `&&` chains
    split, `.venv/bin/python` written `python`, first occurrence only."""
    out: list[tuple[str, str]] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():  # continuation lines joined
            code, _, comment = line.partition("  #")
            if not code.strip() or code.lstrip().startswith("#"):
                continue
            for part in code.split("&&"):
                cmd = re.sub(r"^\.venv/bin/python ", "python ", part.strip())
                if cmd and cmd not in [c for c, _ in out]:
                    out.append((cmd, comment.strip()))
    return out


def is_gpu(cmd: str, comment: str) -> bool:
    """Rule 1's test."""
    return comment.startswith("GPU") or cmd.split()[0] in ("torchrun", "deepspeed")


def to_tmp(args: list[str], tmp: Path) -> list[str]:
    """`runs/...` paths (bare or after `=` or `[`) moved under `tmp`."""
    return [re.sub(r"(^|=|\[)runs/", lambda m: f"{m.group(1)}{tmp}/runs/", a) for a in args]


def python_args(tokens: list[str]) -> list[str] | None:
    """The arguments after the interpreter (python, .venv/bin/python), else None."""
    return tokens[1:] if tokens and Path(tokens[0]).name.startswith("python") else None


def compose_only(args: list[str]) -> None:
    """Compose and validate a generate.py command line's overrides (launcher flags dropped)."""
    from conf import compose_config

    overrides = [a for a in args[args.index("generate.py") + 1:] if not a.startswith("-")]
    compose_config("generate", overrides)


def plan(cmd: str, comment: str, tmp: Path, index: int) -> tuple[str, list[str] | None]:
    """(what the rule does, the argv to run or None)."""
    tokens = shlex.split(cmd)
    while tokens and re.fullmatch(r"[A-Z_]+=\S*", tokens[0]):  # an environment prefix
        tokens = tokens[1:]
    py = python_args(tokens)
    if is_gpu(cmd, comment):
        if "generate.py" in tokens:
            compose_only(tokens)
            return "GPU: composed", None
        if tokens[0] == "bash":
            return "GPU: bash -n", ["bash", "-n", tokens[1]]
        for t in tokens:
            if "/" in t and not t.startswith("-") and "=" not in t:
                assert (REPO / t).exists(), f"{cmd}: {t} does not exist"
        return "GPU: paths exist", None
    if tokens[0] == "bash":
        return "bash -n", ["bash", "-n", tokens[1]]
    if tokens[0] == "make":
        return "make -n", ["make", "-n", *tokens[1:]]
    assert py is not None, f"{cmd}: no rule for this command (tests/test_readme.py)"
    if py[0] == "-m":
        module = py[1]
        if module == "runtime.fetch_smollm2":
            assert importlib.util.find_spec(module) is not None, f"{cmd}: no module {module}"
            return "download: module exists", None
        if module == "pytest":
            return "pytest --collect-only", [sys.executable, *py, "--collect-only", "-q", "-p", "no:cacheprovider"]
        words = list(itertools.takewhile(lambda a: re.fullmatch(r"[a-z_]+", a), py[2:]))  # a subcommand
        return "--help", [sys.executable, "-m", module, *words, "--help"]
    script, args = py[0], to_tmp(py[1:], tmp)
    if script == "generate.py":
        if "model=tiny" not in args:
            compose_only(py)
            return "composed", None
        return "run (few tokens)", [sys.executable, script, *args, *CHEAP_GEN, f"hydra.run.dir={tmp}/gen{index}"]
    if script == "simulate.py":
        cheap = CHEAP_SIM + (["hydra.sweeper.n_trials=2"] if "hydra/sweeper=optuna_search" in args else [])
        where = f"hydra.sweep.dir={tmp}/sweep{index}" if "--multirun" in args else f"hydra.run.dir={tmp}/sim{index}"
        return "run (few tokens)", [sys.executable, script, *args, *cheap, where]
    if script == "calibrate.py":
        return "run", [sys.executable, script, *args, f"hydra.run.dir={tmp}/cal{index}"]
    raise AssertionError(f"{cmd}: no rule for this command (tests/test_readme.py)")


def test_the_readme_has_commands_of_every_kind():
    commands = readme_commands(README.read_text())
    first = [shlex.split(c)[0] for c, _ in commands]
    assert {"bash", "python", "torchrun", "deepspeed", "make"} <= set(first)
    assert any(is_gpu(c, m) for c, m in commands) and any(not is_gpu(c, m) for c, m in commands)


def test_every_readme_command_runs_in_its_cheapest_form(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done, failed = [], []
    for i, (cmd, comment) in enumerate(readme_commands(README.read_text())):
        try:
            what, argv = plan(cmd, comment, tmp_path, i)
        except Exception as e:  # noqa: BLE001 - reported with its command below
            failed.append(f"{cmd}\n  {type(e).__name__}: {e}")
            continue
        if argv is not None:
            run = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
            if run.returncode != 0:
                failed.append(f"{cmd}\n  ({what}: {shlex.join(argv)}) exit {run.returncode}: "
                              f"{(run.stderr or run.stdout)[-1500:]}")
                continue
            if what == "make -n":
                for path in re.findall(r"(?:analysis|data/measured|examples)/[\w./-]+", run.stdout):
                    if not (REPO / path).exists() and not path.startswith("examples/runs/"):
                        failed.append(f"{cmd}: {path} does not exist")
        done.append(f"{what}: {cmd}")
    print("\n".join(done))  # pytest -s: what each rule did
    assert not failed, "README commands that fail:\n" + "\n".join(failed)
    assert done
