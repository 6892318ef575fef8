#!/usr/bin/env bash
# Shrink what the device tool copies (tracked + untracked-not-ignored files, 64 MiB with the carried paths)
# so that half of the 98 MB SmolLM2 GGUF and the wheels fit next to the working tree:
#
#   bash scripts/device_slim.sh on     # branch device-slim: the shipped draft and data/measured/
#                                      # untracked and ignored (still on disk); prints the tracked size
#   ... device calls (carry .whl and .cache/models/smollm2-135m-instruct.gguf.part-0N) ...
#   bash scripts/device_slim.sh off    # back to the branch you were on; the exclude file restored
#
# The device-slim branch is never merged or pushed. Commit (or stash) your work before `on`: the switch
# refuses a dirty tree. Results the device writes (e.g. a retrained models/smollm2-draft) are unpacked after
# `off`.
set -euo pipefail
cd "$(dirname "$0")/.."
BIG=(models/smollm2-draft data/measured)
STATE=.git/device-slim.state
case "${1:-}" in
  on)
    [ -f "$STATE" ] && { echo "device_slim: already on (see $STATE)"; exit 1; }
    [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "device_slim: commit or stash first"; exit 1; }
    branch=$(git rev-parse --abbrev-ref HEAD)
    [ "$branch" != HEAD ] || { echo "device_slim: check out a branch first (detached HEAD)"; exit 1; }
    present=()
    for p in "${BIG[@]}"; do [ -e "$p" ] && present+=("$p"); done
    [ ${#present[@]} -gt 0 ] || { echo "device_slim: none of ${BIG[*]} exists: nothing to untrack"; exit 1; }
    echo "$branch" > "$STATE"
    cp .git/info/exclude "$STATE.exclude"
    git checkout -q -b device-slim
    for p in "${present[@]}"; do echo "/$p/" >> .git/info/exclude; done
    git rm -r -q --cached "${present[@]}"
    git commit -q -m "device-slim: big tracked data untracked for device transfers (never merged)"
    echo "tracked bytes now: $(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)"  # one du: xargs would split the total
    ;;
  off)
    [ -f "$STATE" ] || { echo "device_slim: not on"; exit 1; }
    git checkout -q "$(cat "$STATE")"
    cp "$STATE.exclude" .git/info/exclude
    git branch -q -D device-slim
    rm -f "$STATE" "$STATE.exclude"
    git status --short | head
    ;;
  *) echo "usage: scripts/device_slim.sh on|off"; exit 2 ;;
esac
