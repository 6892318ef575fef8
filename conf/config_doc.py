"""docs/CONFIG.md, generated from the schema: one row per leaf of `ExperimentConfig`.

    python -m conf.config_doc > docs/CONFIG.md     # print it
    python -m conf.config_doc --write              # write docs/CONFIG.md (atomically)
    python -m conf.config_doc --check              # exit 1 when docs/CONFIG.md differs from the schema

A leaf is a field whose type is not a config dataclass; dataclass fields (`model.target`, `sim.whatif`, ...)
and optional ones (`model.draft`) are walked into. Each row holds the field's dotted name, its annotated type, the
schema's default, the entry points that read it and its meaning: the attribute docstring right after the field in
conf/schema.py or conf/kernels_config.py. The few fields without their own docstring take the text of `FALLBACK`,
written from their class's docstring; a docstring in the schema replaces it (tests/conf/test_config_doc.py refuses a
FALLBACK entry for a field that has one, and a leaf that has neither).

Which entry point reads a field is declared per group (`GROUP_READERS`) with per-field exceptions (`READER_EXCEPTIONS`,
each with its reason), written from where runtime/ + generate.py and simulator/ + simulate.py read the config; both
entry points validate every field. The test holds both tables to the schema's leaves.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import sys
import textwrap
import typing
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any, NamedTuple

from conf.schema import ExperimentConfig

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "CONFIG.md"
GROUPS = ("model", "parallel", "spec", "acceptance", "kernels", "workload", "hardware", "interconnect", "sim", "trace")
"""The Hydra config groups, in ExperimentConfig's order (conf/<group>/*.yaml)."""

BOTH, GENERATE, SIMULATE, NONE = "both", "generate.py", "simulate.py", "none"

GROUP_READERS = {
    "model": BOTH, "parallel": GENERATE, "spec": BOTH, "acceptance": BOTH, "kernels": GENERATE, "workload": BOTH,
    "hardware": SIMULATE, "interconnect": SIMULATE, "sim": SIMULATE, "trace": BOTH, "": BOTH,
}
"""Who reads a group's fields, unless READER_EXCEPTIONS says otherwise ("" = the top-level fields). The runtime reads
`acceptance` for its oracle (spec.oracle=true) only."""

READER_EXCEPTIONS: dict[str, tuple[str, str]] = {
    "model.tokenizer": (GENERATE, "the simulator has no text"),
    "model.target.checkpoint": (GENERATE, "the simulator prices shapes, not weights"),
    "model.target.dtype": (GENERATE, "the simulator prices weights by weight_bits"),
    "model.draft.checkpoint": (GENERATE, "the simulator prices shapes, not weights"),
    "model.draft.dtype": (GENERATE, "the simulator prices weights by weight_bits"),
    "parallel.target_gpus": (BOTH, "the split"),
    "parallel.draft_gpus": (BOTH, "the split"),
    "parallel.leader_channel": (BOTH, "the simulator prices the leaders' messages by the channel"),
    "spec.oracle": (GENERATE, "the simulator always draws verify outcomes from the acceptance model"),
    "kernels.preset": (BOTH, "the simulator prices the Triton or the reference path, captured or eager steps"),
    "kernels.ablate": (BOTH, "the simulator prices cuda_graphs, skinny with target_qkv_rope, rope_attention, "
                       "refill_graph and prefill_graph; the other features are the runtime's alone"),
    "workload.prompts": (GENERATE, "the simulator refuses text prompts"),
    "workload.prompt_file": (GENERATE, "the simulator refuses text prompts"),
    "workload.eos_token_id": (GENERATE, "the simulator has no tokens"),
    "interconnect.name": (BOTH, "a label in both entry points' metrics"),
    "trace.graph_events": (GENERATE, "CUDA events around the runtime's replays"),
}
"""Leaf -> (who reads it, why it differs from its group's GROUP_READERS)."""

FALLBACK = {
    "AcceptanceConfig.positional": "`positional[depth][rank]`: the probability that the rank-th most likely draft "
    "child of a correct node at that depth is the target's next token; depths beyond the table reuse its last row.",
}
"""Meanings of the fields that have no attribute docstring: `Class.field`, or `Class.*` for every field of a class
whose docstring describes its fields together (`{name}` is the field's name)."""


class Leaf(NamedTuple):
    """One row of the table."""

    name: str
    """Dotted name, as overridden on the command line."""
    type: str
    """The annotation as written in the schema."""
    default: Any
    """The schema's default (MISSING where there is none)."""
    owner: type
    """The dataclass that declares the field."""
    field: str
    """The field's name in `owner`."""
    hint: Any
    """The resolved annotation (typing.get_type_hints), for code that checks values against it."""


def leaves(cls: type = ExperimentConfig, prefix: str = "") -> list[Leaf]:
    """Every leaf of `cls`, depth first in declaration order; optional dataclass fields are walked into."""
    out: list[Leaf] = []
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.name.startswith("_"):
            continue
        t = hints[f.name]
        inner = [a for a in typing.get_args(t) if a is not type(None)]
        sub = t if is_dataclass(t) else inner[0] if len(inner) == 1 and is_dataclass(inner[0]) else None
        if sub is not None:
            out += leaves(sub, f"{prefix}{f.name}.")
            continue
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
        out.append(Leaf(f"{prefix}{f.name}", str(f.type), default, cls, f.name, t))
    return out


def attribute_docstrings(cls: type) -> dict[str, str]:
    """Field name -> the string literal that follows the field's annotated assignment in `cls`'s body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for stmt, nxt in zip(body, body[1:]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def meaning(leaf: Leaf) -> str | None:
    """The leaf's docstring, else its FALLBACK text, else None."""
    own = attribute_docstrings(leaf.owner).get(leaf.field)
    if own:
        return own
    text = FALLBACK.get(f"{leaf.owner.__name__}.{leaf.field}") or FALLBACK.get(f"{leaf.owner.__name__}.*")
    return text.format(name=leaf.field) if text else None


def readers(name: str) -> str:
    """Which entry points read the leaf `name`."""
    if name in READER_EXCEPTIONS:
        return READER_EXCEPTIONS[name][0]
    group = name.split(".")[0] if "." in name else ""
    return GROUP_READERS[group]


def fmt_default(value: Any) -> str:
    """A default as it is written in an override (null, true, 1e-05, [...])."""
    if value is MISSING:
        return "(required)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, list):
        return "[]" if not value else str(value).replace("'", "")
    return repr(value)


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def group_options(group: str) -> list[str]:
    """The options of a config group: conf/<group>/*.yaml."""
    return sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml"))


def entry_defaults(entry: str) -> dict[str, str]:
    """group -> the option conf/<entry>.yaml's defaults list picks."""
    import yaml

    data = yaml.safe_load((REPO / "conf" / f"{entry}.yaml").read_text())
    picked: dict[str, str] = {}
    for item in data.get("defaults", []):
        if isinstance(item, dict):
            for key, value in item.items():
                if key in GROUPS:
                    picked[key] = str(value)
    return picked


def render() -> str:
    """The whole of docs/CONFIG.md."""
    rows = leaves()
    gen, sim = entry_defaults("generate"), entry_defaults("simulate")
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m conf.config_doc --write` from conf/schema.py and conf/kernels_config.py; do not "
        "edit by hand (tests/conf/test_config_doc.py fails when this file and the schema differ). -->",
        "",
        "One typed `ExperimentConfig` (conf/schema.py) configures every run of `generate.py` and `simulate.py`. Hydra "
        "composes the entry point's YAML (conf/generate.yaml, conf/simulate.yaml): one option per config group "
        "(conf/<group>/*.yaml), then your overrides. Pick an option with `group=option` "
        "(`model=llama3-8b_llama3.2-1b`), set a field with its dotted name (`spec.bs=16`); `--cfg job` prints the "
        "composed config without running. Every field is validated once, and a bad value is one line naming the "
        "field (docs/ERRORS.md).",
        "",
        "## Groups",
        "",
        "| group | options (conf/<group>/) | generate.py picks | simulate.py picks |",
        "|---|---|---|---|",
    ]
    for g in GROUPS:
        out.append(f"| `{g}` | {', '.join(group_options(g))} | {gen.get(g, '')} | {sim.get(g, '')} |")
    out += [
        "",
        "## Which entry point reads a field",
        "",
        "Both entry points validate every field; the column *read by* says which one acts on it. Per group: "
        + "; ".join(f"`{g}` {GROUP_READERS[g]}" for g in GROUPS) + f"; the top-level fields {GROUP_READERS['']}. "
        "The runtime reads `acceptance` only for its oracle (`spec.oracle=true`). Exceptions:",
        "",
    ]
    out += [f"- `{name}`: {who} ({why})" for name, (who, why) in READER_EXCEPTIONS.items()]
    out += [
        "",
        f"## Fields ({len(rows)})",
        "",
        "Defaults are the schema's; the options above set many of them (the `model` option sets the presets and "
        "checkpoints, `kernels` its preset's features, below). `model.draft` is null (no draft) in the schema; an "
        "option that sets it gives its fields the defaults shown.",
        "",
        "| field | type | default | read by | meaning |",
        "|---|---|---|---|---|",
    ]
    for leaf in rows:
        text = meaning(leaf) or ""
        out.append(f"| `{leaf.name}` | `{cell(leaf.type)}` | `{cell(fmt_default(leaf.default))}` | "
                   f"{readers(leaf.name)} | {cell(text)} |")
    out += kernel_features()
    return "\n".join(out) + "\n"


def kernel_features() -> list[str]:
    """The section on the kernels presets: each feature (conf/kernels_config.py KernelFeatures, the names
    `kernels.ablate` takes), which preset turns it on, what it needs and does."""
    from conf.kernels_config import FEATURES, NEEDS, PRESETS, KernelFeatures

    docs = attribute_docstrings(KernelFeatures)
    out = [
        "",
        "## Kernel features (`kernels=<preset>`, `kernels.ablate`)",
        "",
        "`kernels=<preset>` picks a set of features; `kernels.ablate=[...]` switches some of the preset's off for an "
        "ablation (`kernels=graphs kernels.ablate=[skinny,target_qkv_rope]`). A feature another one needs is ablated "
        "together with it, or the config is refused naming the dependent. The backend: "
        + ", ".join(f"`{name}` {f.backend}" for name, f in PRESETS.items()) + ".",
        "",
        "| feature | " + " | ".join(PRESETS) + " | needs | meaning |",
        "|---|" + "---|" * len(PRESETS) + "---|---|",
    ]
    for name in FEATURES:
        on = " | ".join("on" if getattr(f, name) else "" for f in PRESETS.values())
        out.append(f"| `{name}` | {on} | {NEEDS.get(name, '')} | {cell(' '.join(docs[name].split()))} |")
    return out


def main(argv: list[str] | None = None) -> int:
    """Print docs/CONFIG.md, write it (--write) or check it (--check)."""
    shown = DOC.relative_to(REPO) if DOC.is_relative_to(REPO) else DOC
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {shown}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 if {shown} is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        from conf.rundir import atomic_write_text

        atomic_write_text(DOC, text)
        print(f"wrote {shown} ({len(leaves())} fields)")
    elif args.check:
        if not DOC.is_file() or DOC.read_text() != text:
            print(f"error: {shown}: out of date with the schema; run python -m conf.config_doc --write",
                  file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
