#!/usr/bin/env bash
# Prints the git tree id of the working tree as it is (tracked files and the untracked ones git
# does not ignore, with their current contents), through a scratch index, so that results carry
# the exact code they ran even where .git is an older snapshot (the GPU machine's copy). For a
# clean checkout it is the tree of HEAD; find the commit with: git log --format='%h %T' | grep ID
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=$(mktemp -d)
idx="$dir/index"  # a fresh index (git refuses an empty file as one)
trap 'rm -rf "$dir"' EXIT
if GIT_INDEX_FILE="$idx" git add -A . >/dev/null 2>&1 && id=$(GIT_INDEX_FILE="$idx" git write-tree 2>/dev/null); then
  echo "$id"
else
  echo unknown
fi
