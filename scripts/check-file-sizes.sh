#!/usr/bin/env bash
# Fails if a file tracked by git is larger than the limit (default 5 MiB, GG_MAX_FILE_BYTES):
# sources, the latest benchmark results and the docs' images belong in the repository, build
# outputs, logs and profiles do not. Run by ctest (repo_file_sizes); passes with a note outside a
# git checkout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
limit=$(( ${GG_MAX_FILE_BYTES:-5242880} ))
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-file-sizes: not a git checkout, nothing to check"; exit 0
fi
big=$(git ls-files -z | xargs -0 -r stat -c '%s %n' 2>/dev/null | awk -v m="$limit" '$1 > m')
if [ -n "$big" ]; then
  echo "check-file-sizes: tracked files over $limit bytes:"; echo "$big"; exit 1
fi
echo "check-file-sizes: $(git ls-files | wc -l) tracked files, none over $limit bytes"
