#!/usr/bin/env bash
# `fullshard pipeline`: PyTorch's schedules, their bubble and the microbatches in flight; every
# bad flag refused in one line with exit 2.
set -u
bin="$1"
fail=0
check() {  # NAME EXPECTED-SUBSTRING COMMAND...
  local name="$1" want="$2"; shift 2
  local out; out="$("$@" 2>&1)"
  if grep -qF -- "$want" <<< "$out"; then echo "ok   $name"; else echo "FAIL $name: want '$want'"; echo "$out"; fail=1; fi
}
refused() {  # NAME FLAG COMMAND...
  local name="$1" flag="$2"; shift 2
  local out; out="$("$@" 2>&1)"; local rc=$?
  if [ "$rc" = 2 ] && [ "$(wc -l <<< "$out")" = 1 ] && grep -qF -- "error: $flag:" <<< "$out"; then
    echo "ok   refused $name"
  else
    echo "FAIL refused $name (rc $rc)"; echo "$out"; fail=1
  fi
}
# GPipe idles (pp - 1) / (m + pp - 1) = 3/11 and holds every microbatch; 1F1B holds pp - r.
check gpipe-bubble "step 33, bubble 27.3%" "$bin" pipeline --schedule GPipe --pp 4 --microbatches 8
check 1f1b-last-rank '"peak_in_flight_microbatches": 1,' "$bin" pipeline --schedule 1f1b --pp 4 --microbatches 8 --json
# torchtitan's split: embeddings and output count as a layer each; 2 stages per rank by default.
check split "3:13-17 7:29-32o" "$bin" pipeline --schedule Interleaved1F1B --pp 4 --microbatches 8 --layers 32
check split-per-stage "3 stages per rank (12 stages)" "$bin" pipeline --schedule Interleaved1F1B --pp 4 \
  --microbatches 8 --layers 32 --layers-per-stage 3
check interleaved-bubble "bubble 15.8%" "$bin" pipeline --schedule Interleaved1F1B --pp 4 \
  --stages-per-rank 2 --microbatches 8 --forward 0.5 --backward-input 0.5 --backward-weight 0.5
check dualpipev-overlap "(0F3;3B1)OVERLAP_F_B" "$bin" pipeline --schedule DualPipeV --pp 2 --microbatches 4 --actions
check zbv-json '"actions": "1F0 2F0 1F1 2F1 2I0 2W0' "$bin" pipeline --schedule ZBVZeroBubble --pp 2 --microbatches 4 --json
refused schedule --schedule "$bin" pipeline --schedule 1F2B --pp 2 --microbatches 4
refused microbatches --microbatches "$bin" pipeline --schedule 1F1B --pp 4 --microbatches 3
refused stages --stages-per-rank "$bin" pipeline --schedule GPipe --pp 4 --microbatches 8 --stages-per-rank 2
refused pp --pp "$bin" pipeline --pp 0 --microbatches 8
refused forward --forward "$bin" pipeline --pp 2 --microbatches 2 --forward nan
refused layers-per-stage --layers-per-stage "$bin" pipeline --schedule Interleaved1F1B --pp 4 --microbatches 8 --layers 32 --layers-per-stage 4
refused too-many-stages --pp "$bin" pipeline --pp 16 --microbatches 16 --layers 8
refused p2p --p2p "$bin" pipeline --pp 2 --microbatches 2 --p2p -1
exit $fail
