#!/usr/bin/env bash
# Prints an id of the code in the working tree as it is: the git tree id of the files git tracks
# and of the untracked ones it does not ignore, with their current contents (through a scratch
# index), leaving out bench/results/, where benchmark runs write their output; so a run's id does
# not depend on what the run itself wrote, and it names the code even where .git is an older
# snapshot (the GPU machine's copy). For a clean checkout it is the id of HEAD's code.
#   scripts/tree-id.sh            the id of the working tree's code
#   scripts/tree-id.sh --commit REV  the id of a commit's code
#   scripts/tree-id.sh --find ID  the commits (of HEAD's history) whose code has that id
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The same id for a commit: its tree with bench/results left out.
commit_code_id() {
  local bench
  bench=$(git ls-tree "$1:bench" 2>/dev/null | grep -v $'\tresults$' | git mktree)
  git ls-tree "$1" | while IFS= read -r entry; do
    if [ "${entry#*$'\t'}" = bench ]; then printf '040000 tree %s\tbench\n' "$bench"; else printf '%s\n' "$entry"; fi
  done | git mktree
}

if [ "${1:-}" = --commit ]; then
  commit_code_id "${2:?usage: scripts/tree-id.sh --commit REV}"
  exit 0
fi
if [ "${1:-}" = --find ]; then
  want=${2:?usage: scripts/tree-id.sh --find ID}
  for c in $(git rev-list HEAD); do
    id=$(commit_code_id "$c")
    case "$id" in "$want"*) git log -1 --format='%h %ad %s' --date=iso-strict "$c" | cut -c1-120 ;; esac
  done
  exit 0
fi

dir=$(mktemp -d)
idx="$dir/index"  # a fresh index (git refuses an empty file as one)
trap 'rm -rf "$dir"' EXIT
if GIT_INDEX_FILE="$idx" git add -A . >/dev/null 2>&1 &&
   GIT_INDEX_FILE="$idx" git rm -r -q --cached --ignore-unmatch bench/results >/dev/null 2>&1 &&
   id=$(GIT_INDEX_FILE="$idx" git write-tree 2>/dev/null); then
  echo "$id"
else
  echo unknown
fi
