#pragma once
// Context parallelism's sequence layout and ring schedule, as pure functions of (cp degree,
// cp index, local length): the data loader, the RoPE kernels and the ring attention
// (core/model/ring_attention.cc) all read them, so every backend places and pairs tokens alike.
//
// NOTE [Context-parallel layout]: torchtitan shards each sequence with PyTorch's default load
// balancer for causal SDPA (the "headtail" one, _HeadTailLoadBalancer in
// torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py; before it the
// round-robin rule of _attention.py's _context_parallel_buffers): a sequence of S tokens is cut
// into 2 x cp chunks of S / (2 cp), and cp rank r holds chunk r then chunk 2 cp - 1 - r, so its
// L = S / cp local tokens are in increasing global position. A causal mask then costs every rank
// the same: the head chunk sees little, the tail chunk much. seq_len must be divisible by 2 x cp
// (torchtitan's ParallelDims.seq_len_divisor), which the scenario checks.
//
// NOTE [Ring attention rounds]: _templated_ring_attention (PyTorch's _attention.py) runs cp
// rounds; in round i rank r attends with the K / V of source rank (r - i) mod cp. Round 0 is the
// local causal attention; a round with i <= r uses all of its queries and only the first half of
// the source's K / V (the source's head chunk precedes both of r's chunks, its tail chunk follows
// them); a round with i > r uses only its second half of queries (its tail chunk) against all of
// the source's K / V, and updates only the second half of the output and logsumexp ("partial").
// Each needed (query, key) pair is computed exactly once, and every round after the first costs
// L x L / 2 pairs on every rank: the work is balanced (tests/property/model_cp_layout_test.cc).
#include <cstdint>

namespace fullshard {

// The global position of local token `local` (0 <= local < local_len) of cp rank `r` of `cp`.
inline int64_t cp_global_position(int64_t local, int64_t local_len, int64_t cp, int64_t r) {
  if (cp <= 1) return local;
  const int64_t c = local_len / 2;
  return local < c ? r * c + local : (2 * cp - 1 - r) * c + (local - c);
}

// What round `i` of rank `r` computes (NOTE [Ring attention rounds]).
struct CpRound {
  int source = 0;                    // the cp rank whose K / V this round reads
  bool causal = false;               // the local causal block (round 0)
  bool partial = false;              // only the second half of the queries, output and logsumexp
  int64_t q_begin = 0, q_len = 0;    // local query rows
  int64_t kv_begin = 0, kv_len = 0;  // rows of the source's K / V
};

inline CpRound cp_round(int i, int r, int cp, int64_t local_len) {
  CpRound x;
  const int64_t c = local_len / 2;
  x.source = ((r - i) % cp + cp) % cp;
  x.q_len = x.kv_len = local_len;
  if (i == 0) {
    x.causal = true;
  } else if (i <= r) {
    x.kv_len = c;
  } else {
    x.q_begin = c;
    x.q_len = c;
    x.partial = true;
  }
  return x;
}

}  // namespace fullshard
