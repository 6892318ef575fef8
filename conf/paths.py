"""How a path in a config resolves: one rule for every file field (checkpoints, tokenizer, prompt file, acceptance
file, profile), from any working directory."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def resolve_path(path: str | Path) -> Path:
    """`path` as given when it is absolute or exists relative to the working directory; else relative to the
    repository root (where the shipped files and `.cache/models` live)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p
