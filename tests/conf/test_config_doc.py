"""docs/CONFIG.md against the schema (conf/config_doc.py): every leaf has a meaning and a reader, the tables of
exceptions name only real leaves, and the committed file is what the schema renders now (a schema change must
regenerate it: `python -m conf.config_doc --write`)."""

from __future__ import annotations

import subprocess
import sys

from conf import config_doc
from conf.config_doc import FALLBACK, GROUP_READERS, READER_EXCEPTIONS, leaves, meaning, readers
from conf.schema import ExperimentConfig


def test_leaves_walk_nested_and_optional_dataclasses():
    names = [leaf.name for leaf in leaves()]
    assert len(names) == len(set(names))
    assert {"spec.bs", "model.target.preset", "model.draft.preset", "sim.whatif.runtime_delta",
            "kernels.preset", "kernels.ablate", "seed"} <= set(names)
    assert not {"model.draft", "sim.whatif", "kernels.pdl_policy", "model.target"} & set(names)
    spec = next(leaf for leaf in leaves() if leaf.name == "spec.bs")
    assert spec.default == ExperimentConfig().spec.bs and spec.type == "int"


def test_every_leaf_has_a_meaning():
    missing = [leaf.name for leaf in leaves() if not meaning(leaf)]
    assert not missing, f"fields without a docstring in the schema (or a FALLBACK in conf/config_doc.py): {missing}"


def test_fallbacks_are_only_for_fields_without_a_docstring():
    owners = {leaf.owner.__name__: leaf.owner for leaf in leaves()}
    for key in FALLBACK:
        cls_name, field = key.split(".")
        assert cls_name in owners, f"FALLBACK {key}: no schema class {cls_name}"
        docs = config_doc.attribute_docstrings(owners[cls_name])
        names = [leaf.field for leaf in leaves() if leaf.owner is owners[cls_name]]
        targets = names if field == "*" else [field]
        assert set(targets) <= set(names), f"FALLBACK {key}: {cls_name} has no field {field}"
        documented = [n for n in targets if n in docs]
        assert not documented, f"FALLBACK {key}: {documented} now have a docstring; delete the FALLBACK entry"


def test_readers_cover_every_leaf_and_exceptions_name_real_leaves():
    names = {leaf.name for leaf in leaves()}
    assert set(READER_EXCEPTIONS) <= names, set(READER_EXCEPTIONS) - names
    for name in names:
        assert readers(name) in ("both", "generate.py", "simulate.py", "none"), name
    for name, (who, _) in READER_EXCEPTIONS.items():
        group = name.split(".")[0]
        assert who != GROUP_READERS[group], f"{name}: the exception says what its group already says"


def test_docs_config_md_is_up_to_date_with_the_schema():
    text = config_doc.render()
    assert config_doc.DOC.read_text() == text, "docs/CONFIG.md is stale: run python -m conf.config_doc --write"
    rows = [line for line in text.splitlines() if line.startswith("| `") and line.count(" | ") >= 4]
    table = [r for r in rows if r.split(" | ")[0].strip("| `") in {leaf.name for leaf in leaves()}]
    assert len(table) == len(leaves())


def test_the_check_flag_reports_a_stale_file(tmp_path, monkeypatch):
    stale = tmp_path / "CONFIG.md"
    stale.write_text("# old\n")
    monkeypatch.setattr(config_doc, "DOC", stale)
    assert config_doc.main(["--check"]) == 1
    stale.write_text(config_doc.render())
    assert config_doc.main(["--check"]) == 0


def test_the_module_prints_the_document():
    done = subprocess.run([sys.executable, "-m", "conf.config_doc"], capture_output=True, text=True, timeout=60,
                          cwd=config_doc.REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout == config_doc.render()


def test_the_config_surface_stays_small():
    """Issue 49: a user reads every field in one sitting: at most 60 leaves."""
    count = len(leaves(ExperimentConfig))
    assert count <= 60, f"ExperimentConfig has {count} leaves"
