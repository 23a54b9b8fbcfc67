#!/usr/bin/env bash
# Workers started the way torchrun (or Slurm, mpirun) starts them: RANK, WORLD_SIZE, LOCAL_RANK
# and MASTER_ADDR/MASTER_PORT, no launcher and no shared directory (NOTE [Worker rendezvous]).
# Rank 0 hosts the TCP store; the run computes what the launcher's run computes; a missing or
# bad rendezvous setting is a one-line error.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"; kill $(jobs -p) 2> /dev/null' EXIT
fail() { echo "FAIL: $*"; exit 1; }
sc="$src/scenarios/tiny-llama-cpu2.json"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
unset FULLSHARD_STORE_DIR

# 1. Two workers, rank 1 started first (it waits for rank 0's store), 3 steps; each writes its
# step records to fd 3 (FULLSHARD_REPORT_FD, what the launcher reads), rank 0 also prints.
env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port FULLSHARD_REPORT_FD=3 \
  "$bin" train "$sc" --steps 3 > "$tmp/out1" 2> "$tmp/err1" 3> "$tmp/rec1" &
p1=$!
sleep 0.5
env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port FULLSHARD_REPORT_FD=3 \
  "$bin" train "$sc" --steps 3 > "$tmp/out0" 2> "$tmp/err0" 3> "$tmp/rec0"; rc0=$?
wait $p1; rc1=$?
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || { cat "$tmp/err0" "$tmp/err1"; fail "workers exit $rc0/$rc1"; }

# 2. The same run through the launcher (file store): its loss per step is the mean over ranks.
"$bin" train "$sc" --steps 3 --metrics "$tmp/m.jsonl" > /dev/null 2> "$tmp/errl" || { cat "$tmp/errl"; fail "launcher run"; }
python3 - "$tmp/m.jsonl" "$tmp/rec0" "$tmp/rec1" <<'P' || fail "losses differ"
import json, sys
want = [r["loss"] for r in map(json.loads, open(sys.argv[1]))]
ranks = [[r["loss"] for r in map(json.loads, open(f)) if r["type"] == "step"] for f in sys.argv[2:]]
got = [(a + b) / 2 for a, b in zip(*ranks)]
assert len(got) == 3 and all(abs(g - w) <= 1e-9 * abs(w) for g, w in zip(got, want)), (got, want)
P

# 3. Without the report fd, rank 0 prints its own loss per step.
port2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port2 "$bin" train "$sc" --steps 2 > /dev/null 2>&1 &
p1=$!
env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port2 "$bin" train "$sc" --steps 2 > /dev/null 2> "$tmp/err0"
wait $p1 || fail "rank 1 of the printing run"
[ "$(grep -c "step [12]: rank 0 loss" "$tmp/err0")" -eq 2 ] || { cat "$tmp/err0"; fail "rank 0 did not print 2 steps"; }
echo "ok: MASTER_ADDR/MASTER_PORT run equals the launcher's"

# 4. Errors: one line, exit 2, naming the variable and the fix.
expect_error() {  # expect_error PATTERN ENV...
  local pat="$1"; shift
  env "$@" "$bin" train "$sc" --steps 1 --timeout 2 > /dev/null 2> "$tmp/e"; local rc=$?
  [ $rc -eq 2 ] || { cat "$tmp/e"; fail "exit $rc for $*"; }
  grep -q -- "$pat" "$tmp/e" || { cat "$tmp/e"; fail "no '$pat' for $*"; }
  [ "$(wc -l < "$tmp/e")" -eq 1 ] || { cat "$tmp/e"; fail "more than one line for $*"; }
}
expect_error 'nor are MASTER_ADDR and MASTER_PORT' RANK=1 WORLD_SIZE=2
expect_error "MASTER_PORT: is 'http'" RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=http
expect_error 'use a TCP port in 1-65535' RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=70000
expect_error "cannot connect to 127.0.0.1:$port within 2000 ms" RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
expect_error "cannot resolve MASTER_ADDR 'no-such-host.invalid'" RANK=1 WORLD_SIZE=2 MASTER_ADDR=no-such-host.invalid MASTER_PORT=$port
echo "ok: rendezvous errors"
