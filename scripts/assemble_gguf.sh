#!/usr/bin/env bash
# Put the SmolLM2 GGUF at .cache/models/ from its parts (a device call carries at most 64 MiB with the working tree
# and the wheels, so the 98 MB file travels as smollm2-135m-instruct.gguf.part-00, -01, ... over as many calls of one
# warm machine: `split -b 45000000 -d -a 2 FILE FILE.part-` makes three, 2026-11-30) and check its sha256 against
# runtime.fetch_smollm2.SHA256. A complete file already in place is only checked.
#
#   bash scripts/assemble_gguf.sh      (parts in .cache/models/ or /tmp/gguf-parts/)
set -euo pipefail
cd "$(dirname "$0")/.."
GGUF=.cache/models/smollm2-135m-instruct.gguf
if [ ! -f "$GGUF" ]; then
  # each part once, by name: a machine can hold a part both in .cache/models and /tmp/gguf-parts (2026-11-30,
  # twice: an old image's parts beside the staged ones), and concatenating both copies doubles the file
  parts=$(for p in /tmp/gguf-parts/smollm2-135m-instruct.gguf.part-* .cache/models/smollm2-135m-instruct.gguf.part-*; do
            [ -f "$p" ] && echo "$(basename "$p") $p"; done | sort -s -u -k1,1 | cut -d' ' -f2 || true)
  [ -n "$parts" ] || { echo "missing $GGUF (and no parts)"; exit 2; }
  mkdir -p .cache/models
  # shellcheck disable=SC2086
  cat $parts > "$GGUF.tmp" && mv "$GGUF.tmp" "$GGUF"
fi
want=$(python3 -c "import runtime.fetch_smollm2 as f; print(f.SHA256)")
have=$(sha256sum "$GGUF" | cut -d' ' -f1)
[ "$want" = "$have" ] || { rm -f "$GGUF"; echo "$GGUF: sha256 $have != $want (a part is missing or stale; removed)"; exit 2; }
echo "$GGUF: sha256 ok"
