#!/usr/bin/env bash
# expect_exit.sh CODE REGEX PROGRAM [ARG...]: runs PROGRAM and passes when it exits with CODE and
# a line of its output (stdout and stderr together) matches the extended regular expression REGEX.
set -uo pipefail
code=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if ((rc != code)); then
  echo "expect_exit: exit code $rc, expected $code"
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "expect_exit: no line matches /$regex/"
  exit 1
fi
echo "expect_exit: exit code $code and a line matching /$regex/"
