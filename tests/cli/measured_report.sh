#!/usr/bin/env bash
# Issue 14 item 2: every field of a measured report (`fullshard train --json`) is filled from the
# real run and checked here against what is computed independently: model FLOPs from the model
# config, the collectives, host-program instructions and allocated-after-step bytes the
# simulator predicts for the same program, and the last step's split summing to its time.
set -u
bin="$1"; src="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp"
fail() { echo "FAIL: $*"; exit 1; }
python3 - "$src/scenarios/tiny-llama-cpu2.json" "$tmp/s.json" <<'P'
import json, sys
s = json.load(open(sys.argv[1])); s["training"]["steps"] = 3  # all played by the simulator (no extrapolation)
# The zoo's tiny-llama, written out so that the checks below read the dims from the file.
s["model"] = {"arch": "llama", "name": "tiny-llama-inline", "vocab_size": 256, "dim": 64, "n_layers": 2,
              "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 128, "max_seq_len": 128}
json.dump(s, open(sys.argv[2], "w"))
P
"$bin" train "$tmp/s.json" --json "$tmp/real.json" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/err"; fail "train"; }
grep -q "median step after the first:" "$tmp/out" || { cat "$tmp/out"; fail "no median step line"; }
"$bin" simulate "$tmp/s.json" --json "$tmp/sim.json" > /dev/null 2>&1 || fail "simulate"
"$bin" --version > "$tmp/version" || fail "--version"
grep -Eq "^fullshard [0-9.]+ \(.*(portable code|host-tuned -march=native code)" "$tmp/version" || { cat "$tmp/version"; fail "--version"; }
python3 - "$tmp/s.json" "$tmp/real.json" "$tmp/sim.json" "$tmp/version" "$tmp/out" <<'P' || fail "measured report"
import json, sys
s, real, sim = (json.load(open(p)) for p in sys.argv[1:4])
assert real["build"] == open(sys.argv[4]).read().strip(), real["build"]
m = s["model"]
assert real["measured"] is True
assert real["steps"] == real["simulated_steps"] == 3 and real["extrapolated_steps"] == 0, real["steps"]
assert real["total_time_s"] >= real["step_time_s"] > 0 and real["total_tokens"] > 0
# Model FLOPs per token, torchtitan's count, from the config alone (Llama: untied output).
D, L, V, F, H = m["dim"], m["n_layers"], m["vocab_size"], m["ffn_dim"], m["n_heads"]
kv = m.get("n_kv_heads", H) * (D // H)
params = V * D + L * (2 * D + D * D + 2 * kv * D + D * D + 3 * F * D) + D + V * D
assert real["parameters"] == params, (real["parameters"], params)
want = 6 * (params - V * D) + 12 * L * H * (D // H) * s["training"]["seq_len"]
assert real["model_flops_per_token"] == want == sim["model_flops_per_token"], (real["model_flops_per_token"], want)
peak = real["mfu_peak_flops_per_s"]
assert "peak_flops_fp32" in real["mfu_peak"] and peak > 0, real["mfu_peak"]
assert abs(real["mfu"] - want * real["tokens_per_s_per_gpu"] / peak) < 1e-12
assert real["hardware_flops_per_s_per_gpu"] > 0
# The sgemm probe each worker ran at start-up: the mean of the ranks', and MFU against it.
g = real["sgemm_gflops_per_rank"]
assert len(g) == len(real["rank_classes"]) and all(0.1 < x < 1e5 for x in g), g
assert abs(real["sgemm_gflops"] - sum(g) / len(g)) < 1e-9 * real["sgemm_gflops"]
assert real["sgemm_source"].startswith("OpenBLAS sgemm 512x512x512, 1 thread,"), real["sgemm_source"]
assert abs(real["mfu_of_sgemm"] - want * real["tokens_per_s_per_gpu"] / (real["sgemm_gflops"] * 1e9)) < 1e-12
# The kernels' FLOP rate over a whole step stays below what a pure sgemm loop does.
assert real["hardware_flops_per_s_per_gpu"] < 2 * real["sgemm_gflops"] * 1e9
line = [l for l in open(sys.argv[5]) if l.startswith("  last step: MFU")][0]
assert "%.1f%% of measured sgemm (%.1f GFLOP/s per rank" % (100 * real["mfu_of_sgemm"], real["sgemm_gflops"]) in line, line
# The same host program as the simulator's: instructions, collectives, memory after each step.
for rc, pc in zip(real["rank_classes"], sim["rank_classes"] * len(real["rank_classes"])):
    assert rc["instructions"] == pc["instructions"], (rc["instructions"], pc["instructions"])
    assert rc["collectives_last_step"] == pc["collectives_last_step"], (rc["collectives_last_step"], pc["collectives_last_step"])
    assert rc["allocated_after_step"] == pc["allocated_after_step"], (rc["allocated_after_step"], pc["allocated_after_step"])
    busy = rc["stream_busy_s"]
    assert busy["compute"] > 0 and busy["all_gather"] > 0 and busy["reduce_scatter"] > 0, busy
    assert rc["comm_s"] > 0 and rc["compute_s"] > 0
    assert rc["end_time_s"] >= rc["peak_time_s"] > 0
# Timeline points at stream times (NOTE [Measured timeline times]): non-decreasing, inside the
# run, the peak's time one of them.
for tl, rc in zip(real["memory_timeline"], real["rank_classes"]):
    ts = tl["time_s"]
    assert all(a <= b for a, b in zip(ts, ts[1:])), "timeline times decrease"
    assert 0 < ts[0] and ts[-1] <= rc["end_time_s"], (ts[0], ts[-1], rc["end_time_s"])
    assert rc["peak_time_s"] in ts
# The slowest rank's last step: its split sums to its time, which is the report's step time.
ls = real["last_step"]
assert abs(sum(ls["critical_path_s"].values()) - ls["step_time_s"]) < 1e-9, ls
assert abs(ls["step_time_s"] - (ls["end_s"] - ls["begin_s"])) < 1e-9
assert ls["critical_path_s"]["compute"] > 0 and ls["comm_s"] > 0, ls
# The compute stream's collectives (clipping's all-reduce) are communication, by mesh dim.
dims = ls["comm_by_dim"]
assert dims["shard"]["comm_s"] > 0 and dims["tp"]["comm_s"] == 0 and dims["replicate"]["comm_s"] == 0, dims
assert 0 <= ls["stream_busy_s"]["compute"] - ls["compute_s"] <= dims["shard"]["comm_s"] + 1e-12, ls
assert real["comm_s"] > 0 and real["compute_s"] > 0 and real["exposed_comm_s"] >= 0
P
echo "ok: measured report fields"
