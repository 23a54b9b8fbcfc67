#!/usr/bin/env bash
# Issue 13, item 4: inputs that used to crash, hang, overflow or reach an internal error give a
# one-line error with exit code 2 (or the right result), and user text is never echoed raw.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0
# expect NAME RC SUBSTRING -- ARGS...: exit code RC, one line on stderr containing SUBSTRING.
expect() {
  local name="$1" want_rc="$2" want="$3"; shift 4
  timeout 120 "$bin" "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null; local rc=$?
  local lines; lines=$(wc -l < "$tmp/err")
  if [ "$rc" -ne "$want_rc" ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL $name: rc=$rc (want $want_rc) lines=$lines stderr:"; head -c 2000 "$tmp/err"; echo; fail=1
  else
    echo "ok   $name: $(cat "$tmp/err")"
  fi
}
scenario="$src/scenarios/tiny-llama-cpu2.json"

# ---- JSON nested 100,000 deep, in every JSON input
python3 -c "print('[' * 100000 + ']' * 100000)" > "$tmp/deep.json"
python3 -c "print('{\"model\": ' + '{\"a\": ' * 100000 + '1' + '}' * 100000 + '}')" > "$tmp/deep-obj.json"
expect deep-scenario 2 "nested deeper than 64 levels" -- simulate "$tmp/deep.json"
expect deep-scenario-object 2 "deep-obj.json:1:" -- simulate "$tmp/deep-obj.json"
expect deep-plan-scenario 2 "nested deeper than 64 levels" -- plan --scenario "$tmp/deep.json" --gpus 2 --gpu cpu --seq-len 8
expect deep-hf-config 2 "nested deeper than 64 levels" -- plan --hf-config "$tmp/deep.json" --gpus 2 --gpu cpu --seq-len 8
expect deep-profile 2 "nested deeper than 64 levels" -- calibrate "$src/tests/data/hf/gpt2.json" --hardware "$tmp/deep.json"
expect deep-measurements 2 "nested deeper than 64 levels" -- calibrate "$tmp/deep.json" --hardware h100
expect deep-report 2 "nested deeper than 64 levels" -- plot "$tmp/deep.json" -o "$tmp/p.html"

# ---- planner: a 2-block proxy that runs out of even "unlimited" memory is a bound, not a bug
timeout 300 "$bin" plan --model llama3.1-8b --gpus 8 --gpus-per-node 8 --gpu h100 --seq-len 524288 --top 3 \
  > "$tmp/out" 2> "$tmp/err"; rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] || grep -q "internal error" "$tmp/err"; then
  echo "FAIL plan-long-seq: rc=$rc"; cat "$tmp/err"; fail=1
else
  echo "ok   plan-long-seq: rc=$rc, $(tail -1 "$tmp/out")"
fi

# ---- calibrate: non-finite numbers from CSV and JSON
for v in nan inf -inf infinity 1e999; do
  printf 'collective,nodes,gpus_per_node,bytes,time_us\nall_reduce,1,8,1048576,%s\n' "$v" > "$tmp/m.csv"
  expect "csv-$v" 2 "m.csv: line 2 column time_us: is '$v', not a finite number" -- calibrate "$tmp/m.csv" --hardware h100
done
printf '{"collectives": [{"collective": "all_reduce", "gpus_per_node": 8, "bytes": 1e999, "time_us": 3}]}' > "$tmp/m.json"
expect json-1e999 2 "number overflow parsing '1e999'" -- calibrate "$tmp/m.json" --hardware h100
printf '{"collectives": [{"collective": "all_reduce", "gpus_per_node": 8, "bytes": 1e300, "time_us": 3}]}' > "$tmp/m.json"
expect json-1e300-bytes 2 "collectives[0].bytes: is 1e+300" -- calibrate "$tmp/m.json" --hardware h100

# ---- plan flags: overflow and negative counts
expect plan-gpus-intmax 2 "--gpus: is 2147483647" -- plan --model tiny-llama --gpus 2147483647 --gpus-per-node 8 --gpu cpu --seq-len 8
expect plan-gpus-not-multiple 2 "not a multiple" -- plan --model tiny-llama --gpus 131071 --gpus-per-node 8 --gpu cpu --seq-len 8
expect plan-gpus-above-sim 2 "between 1 and 131072 (the simulator's limit)" -- plan --model tiny-llama --gpus 262144 --gpus-per-node 8 --gpu cpu --seq-len 8
expect plan-global-batch-huge 2 "--global-batch" -- plan --model tiny-llama --gpus 8 --gpus-per-node 8 --gpu cpu --seq-len 8 --global-batch 9223372036854775807
expect plan-top-negative 2 "--top: is -1" -- plan --model tiny-llama --gpus 2 --gpus-per-node 2 --gpu cpu --seq-len 8 --top -1
expect plan-threads-negative 2 "--threads: is -3" -- plan --model tiny-llama --gpus 2 --gpus-per-node 2 --gpu cpu --seq-len 8 --threads -3

# ---- one rank out of memory: exit 3 (out of memory), not 1 (protocol problem)
python3 - "$src/scenarios/llama3.1-8b-fsdp8-h100.json" "$tmp/oom.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("$schema", None)
j["training"]["rank_batch"] = [{"rank": 3, "batch": 8}]
j["hardware"]["profile"] = "h100-sxm-80gb"
json.dump(j, open(sys.argv[2], "w"))
P
timeout 300 "$bin" simulate "$tmp/oom.json" > "$tmp/out" 2> "$tmp/err"; rc=$?
if [ "$rc" -ne 3 ] || ! grep -q "rank 3: .*" "$tmp/out" || ! grep -q "OUT OF MEMORY" "$tmp/out"; then
  echo "FAIL one-rank-oom: rc=$rc (want 3)"; cat "$tmp/out" "$tmp/err"; fail=1
else
  echo "ok   one-rank-oom: rc=3"
fi

# ---- inputs that are not regular files, or too large
mkfifo "$tmp/fifo.json"
expect fifo-scenario 2 "is a FIFO (named pipe), not a regular file" -- simulate "$tmp/fifo.json"
expect fifo-csv 2 "is a FIFO (named pipe), not a regular file" -- calibrate "$tmp/fifo.json" --hardware h100
expect dev-zero 2 "/dev/zero: is a character device, not a regular file" -- simulate /dev/zero
ln -s /dev/zero "$tmp/zero.csv"
expect dev-zero-csv 2 "zero.csv: is a character device" -- calibrate "$tmp/zero.csv" --hardware h100
expect dev-zero-report 2 "is a character device" -- plot /dev/zero -o "$tmp/p.html"
expect directory 2 "is a directory" -- simulate "$tmp"
truncate -s 300M "$tmp/huge.json"
expect too-large 2 "more than the 256 MiB limit for inputs" -- simulate "$tmp/huge.json"
rm -f "$tmp/huge.json"

# ---- user text is printed escaped and bounded
python3 - "$scenario" "$tmp" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("$schema", None)
j["name"] = "evil\u001b[2J\u001b[31mred\u0007"
json.dump(j, open(sys.argv[2] + "/ansi.json", "w"))
j["name"] = "n" * (2 << 20)
json.dump(j, open(sys.argv[2] + "/long-name.json", "w"))
j["name"] = "ok"; j["training"]["x" * (2 << 20)] = 1
json.dump(j, open(sys.argv[2] + "/long-key.json", "w"))
j = json.load(open(sys.argv[1])); j.pop("$schema", None)
j["training"]["seq\u001b[2Jlen"] = 1
json.dump(j, open(sys.argv[2] + "/ansi-key.json", "w"))
P
timeout 120 "$bin" simulate "$tmp/ansi.json" > "$tmp/out" 2>&1
if grep -q $'\x1b' "$tmp/out" || ! grep -qF 'evil\x1b[2J\x1b[31mred\x07' "$tmp/out"; then
  echo "FAIL ansi-name: raw escape printed or name not shown escaped"; cat -v "$tmp/out"; fail=1
else
  echo "ok   ansi-name: $(grep -F 'scenario evil' "$tmp/out")"
fi
timeout 120 "$bin" simulate "$tmp/long-name.json" > "$tmp/out" 2>&1
if [ "$(wc -c < "$tmp/out")" -gt 20000 ] || ! grep -qF "... (2097152 bytes)" "$tmp/out"; then
  echo "FAIL long-name: $(wc -c < "$tmp/out") bytes of output"; fail=1
else
  echo "ok   long-name: $(wc -c < "$tmp/out") bytes of output"
fi
expect long-key 2 "bytes)" -- simulate "$tmp/long-key.json"
[ "$(wc -c < "$tmp/err")" -lt 4000 ] || { echo "FAIL long-key: $(wc -c < "$tmp/err") bytes on stderr"; fail=1; }
expect ansi-key 2 'seq\x1b[2Jlen' -- simulate "$tmp/ansi-key.json"
if grep -q $'\x1b' "$tmp/err"; then echo "FAIL ansi-key: raw escape on stderr"; fail=1; fi
printf 'collective,nodes,gpus_per_node,bytes,time_us\nall_reduce,1,8,1048576,3\nall\x1b]0;pwned\x07\xff\xfe,1,8,1048576,3\n' > "$tmp/bin.csv"
expect binary-csv-cell 2 'line 3 (collectives[1].collective)' -- calibrate "$tmp/bin.csv" --hardware h100
if grep -q $'\x1b' "$tmp/err"; then echo "FAIL binary-csv-cell: raw escape on stderr"; fail=1; fi
printf 'collective,\x1b[31mbytes\xff\n' > "$tmp/bin2.csv"
expect binary-csv-header 2 "has the unknown column '\\x1b[31mbytes\\xff'" -- calibrate "$tmp/bin2.csv" --hardware h100
if grep -q $'\x1b' "$tmp/err"; then echo "FAIL binary-csv-header: raw escape on stderr"; fail=1; fi

# ---- hardware figures that made a simulated time infinite (NOTE [Figure bounds])
for fig in 'peak_flops_fp32 1e-320 must be >= 1' 'hbm_bandwidth 0.5 must be >= 1' \
           'launch_overhead_s 1e+308 must be >= 0 and <= 1' 'matmul_small_dim 1e+300 must be >= 0 and <= 65536' \
           'sustained_clock_ratio 5e-324 must be >= 0.001'; do
  set -- $fig; name="$1" value="$2"; shift 2
  python3 - "$scenario" "$tmp/fig.json" "$name" "$value" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("$schema", None)
j["hardware"][sys.argv[3]] = float(sys.argv[4])
json.dump(j, open(sys.argv[2], "w"))
P
  expect "figure-$name" 2 "hardware.$name: is $value, $*" -- simulate "$tmp/fig.json"
done
python3 - "$scenario" "$tmp/speed.json" <<'P'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("$schema", None)
j["hardware"]["rank_speed"] = [{"rank": 0, "speed": 1e-320}]
json.dump(j, open(sys.argv[2], "w"))
P
expect rank-speed-tiny 2 "hardware.rank_speed[0].speed: is 1e-320, must be >= 0.001" -- simulate "$tmp/speed.json"

# ---- JSON text with a NUL byte: nlohmann ended the text there and dropped the rest
{ cat "$scenario"; printf '\0{"garbage": 1}'; } > "$tmp/nul.json"
expect nul-scenario 2 "malformed JSON: a NUL byte" -- simulate "$tmp/nul.json"

# ---- plot: a --metrics line nested 100,000 deep (was a stack overflow); a report whose
# optional summary fields have another type (was nlohmann's type_error, exit 1)
python3 -c "print('{\"step\": ' + '[' * 100000 + ']' * 100000 + '}')" > "$tmp/deep.jsonl"
expect deep-metrics-line 2 "deep.jsonl:1: is not a JSON object" -- plot "$tmp/deep.jsonl" -o "$tmp/p.html"
sed 's/"steps": [0-9]*/"steps": 2/' "$scenario" > "$tmp/two.json"
"$bin" simulate "$tmp/two.json" --json "$tmp/r.json" > /dev/null 2>&1
python3 - "$tmp/r.json" <<'P'
import json, sys
r = json.load(open(sys.argv[1])); r["ok"] = 5; r["out_of_memory"] = "no"; r["scenario"] = []
json.dump(r, open(sys.argv[1], "w"))
P
if "$bin" plot "$tmp/r.json" -o "$tmp/p.svg" > "$tmp/out" 2> "$tmp/err"; then
  echo "ok   report-odd-types: $(cat "$tmp/out")"
else
  echo "FAIL report-odd-types: rc=$?"; cat "$tmp/err"; fail=1
fi
exit $fail
