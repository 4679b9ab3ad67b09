#!/usr/bin/env bash
# Checks scripts/launch.sh (its path is $1) without a GPU: the variables each rank sees, a
# fresh init-file path, the exit status, and that a failing rank stops one that would wait.
set -u
launch=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "check_launch: $*" >&2; exit 1; }

bash "$launch" 3 bash -c 'echo "$RANK $LOCAL_RANK $WORLD_SIZE $GG_DIST_INIT_FILE" > '"$out"'/rank.$RANK' ||
  fail "three good ranks: non-zero exit"
for r in 0 1 2; do
  read -r rank local world init < "$out/rank.$r" || fail "rank $r wrote nothing"
  [[ $rank == "$r" && $local == "$r" && $world == 3 ]] || fail "rank $r saw RANK=$rank LOCAL_RANK=$local WORLD_SIZE=$world"
  [[ -n $init && ! -e $init ]] || fail "rank $r: init file '$init' is empty or left behind"
done
[[ $(cut -d' ' -f4 "$out"/rank.* | sort -u | wc -l) == 1 ]] || fail "the ranks saw different init files"

# Rank 1 fails at once; rank 0 would sleep for a minute: launch.sh must stop it and fail.
start=$SECONDS
bash "$launch" 2 bash -c 'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 60' 2> "$out/err"
rc=$?
((rc == 3)) || fail "a failing rank gave exit status $rc, expected 3"
((SECONDS - start < 30)) || fail "the surviving rank was not stopped"
grep -q "rank 1 exited with status 3" "$out/err" || fail "the failed rank is not named: $(cat "$out/err")"

bash "$launch" 0 true 2> /dev/null && fail "N = 0 accepted"
bash "$launch" 2 2> /dev/null && fail "a missing program accepted"
echo "launch.sh ok"
