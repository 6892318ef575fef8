"""Every shell script under scripts/ parses (`bash -n`): the device scripts run once per GPU session, where a syntax
error would cost a call."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "scripts").glob("*.sh"))


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_parses(script):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, f"{script.name}: {proc.stderr}"


def test_the_scripts_are_found():
    assert any(p.name == "gpu.sh" for p in SCRIPTS) and any(p.name == "test.sh" for p in SCRIPTS)
