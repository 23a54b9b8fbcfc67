#pragma once
// A schedule's compute order lowered as PyTorch's _PipelineScheduleRuntime lowers it
// (torch/distributed/pipelining/schedules.py in PyTorch 2.11, `_prepare_schedule_with_comms`):
// each rank's compute actions with the UNSHARD / RESHARD, REDUCE_GRAD and SEND / RECV actions
// its runtime executes, in order. Pure functions; tests/unit/pipeline_lowering_test.cc matches
// every rank's lowered list with PyTorch's (tests/data/oracle/pipeline_lowered.json).
//
// NOTE [Lowered send and recv order]: PyTorch places each rank's sends and recvs by a lockstep
// pass over the ranks' lists (`_add_send_recv`): in each round every rank, in rank order, takes
// its next action if its input is there (a RECV of it, or the producing action on the same rank
// for two adjacent stages on one rank), and a compute action whose output crosses to another
// rank appends its SEND right after it and the matching RECV to the peer's list at once. A rank
// never places its own recv. So the lists' actions, taken in the order the pass appended them,
// are an execution in which every send meets its recv the moment both ranks reach them: run in
// that order, no rank waits forever, however many sends cross (a gradient one way before an
// activation the other way, as the zero-bubble schedules and DualPipeV past pp 2 do). Before the
// pass each list gets UNSHARD / RESHARD (`_add_unshard_reshard`, 3 stages resident) and
// REDUCE_GRAD (`_add_reduce_grad`) actions; they take rounds too, so the recvs fall where
// PyTorch's do. The runtime posts a RECV where it sits and waits for it before the compute that
// reads it; a SEND where it sits, waited at the step's end.
#include <string>
#include <vector>

#include "core/pipeline/pipeline_schedule.h"

namespace fullshard {

enum class LoweredKind {
  kCompute,     // F, B, I, W, or DualPipeV's OVERLAP_F_B pair
  kSendF,       // "SEND_F": the stage's output to the next stage's rank
  kRecvF,       // "RECV_F": the stage's input from the previous stage's rank
  kSendB,       // "SEND_B": the stage's input gradient to the previous stage's rank
  kRecvB,       // "RECV_B": the stage's output gradient from the next stage's rank
  kUnshard,     // "UNSHARD": FSDP all-gather of the stage's parameters
  kReshard,     // "RESHARD"
  kReduceGrad,  // "REDUCE_GRAD": after the stage's last B or W
};

struct LoweredAction {
  LoweredKind kind = LoweredKind::kCompute;
  int stage = 0;        // not a compute action's: its compute[..].stage
  int microbatch = -1;  // sends and recvs; -1 for UNSHARD, RESHARD, REDUCE_GRAD
  // kCompute: one action, or the two of an OVERLAP_F_B pair (run one after the other).
  std::vector<PipelineAction> compute;

  bool operator==(const LoweredAction&) const = default;
};

using LoweredOrder = std::vector<std::vector<LoweredAction>>;

// "SEND_F", "RECV_B", "UNSHARD", ...; "" for kCompute.
const char* lowered_kind_name(LoweredKind kind);
// One rank's lowered list as PyTorch prints it: "0UNSHARD 0F0 0SEND_F0 0RECV_B0 0B0 ...".
std::string format_lowered_actions(const std::vector<LoweredAction>& actions);

// Every rank's lowered list from the compute order `order` of `o` (build_pipeline_order's).
// `max_active_stages`: `_add_unshard_reshard`'s stages kept unsharded at once. Throws (an
// internal check) where the lockstep pass stalls, which a checked order never does.
LoweredOrder lower_pipeline_order(const PipelineScheduleOptions& o, const PipelineOrder& order,
                                  int max_active_stages = 3);

// "" when every rank can run its lowered list in order with each send and recv meeting (both
// ranks at them at once, the strictest pairing): every SEND has one RECV on its peer, matched in
// order per (stage boundary, direction), every compute that reads a transfer comes after its
// RECV, and playing the lists rank by rank never stalls. Otherwise the first problem, or the
// actions each rank is blocked at, in one line.
std::string check_lowered_order(const PipelineScheduleOptions& o, const LoweredOrder& lowered);

}  // namespace fullshard
