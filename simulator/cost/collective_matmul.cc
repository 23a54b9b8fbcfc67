#include "simulator/cost/collective_matmul.h"

#include <algorithm>

namespace fullshard::sim {

// NOTE [Collective-matmul pipeline]: what PyTorch runs, read in
// torch/distributed/_symmetric_memory/__init__.py (pytorch/pytorch @ 006b161):
//  - fused_all_gather_matmul (_pipelined_all_gather_and_consume): the rank copies its shard
//    into its symmetric buffer ("mv"), barriers, runs the products of its own shard on the
//    current stream, then for step k = 1 .. tp-1 pulls the shard of rank (rank + k) % tp
//    ("cp", a copy-engine read over NVLink) and runs that chunk's products, on the backend
//    stream for odd k and the current stream for even k; a last barrier ends it. Copies from
//    the two streams never overlap each other; the products share the SMs, so they run one
//    after another; a copy overlaps the product before it.
//  - fused_matmul_reduce_scatter (_pipelined_produce_and_all2all): for step k = 1 .. tp-1, on
//    the alternating streams, the rank computes the partial product of the rows rank
//    (rank + k) % tp owns into one of two symmetric buffers, barriers, pulls its own rows'
//    partial from rank (rank - k) % tp and barriers again; then it computes its own rows'
//    partial, joins the streams and sums the tp partials (reduce_partials).
// Every rank runs the same schedule, so the barriers cost their latency only. The recurrences
// below play these two schedules with one compute resource and one copy engine.
CollectiveMatmulTimes all_gather_matmul_times(const CollectiveMatmulCosts& c) {
  const int n = std::max(1, c.parts);
  const double start = c.local_copy_s + c.barrier_s;
  double compute_end = start + c.chunk_matmul_s;  // the own shard's products
  double copy_end = start;
  double stream_end[2] = {compute_end, start};  // current stream, backend stream
  for (int k = 1; k < n; ++k) {
    double& stream = stream_end[k % 2];
    copy_end = std::max(copy_end, stream) + c.chunk_copy_s;
    compute_end = std::max(copy_end, compute_end) + c.chunk_matmul_s;
    stream = compute_end;
  }
  CollectiveMatmulTimes t;
  t.total_s = std::max(stream_end[0], stream_end[1]) + (n > 1 ? c.barrier_s : 0.0);
  t.compute_s = n * c.chunk_matmul_s;
  t.comm_s = c.local_copy_s + (n > 1 ? 2 * c.barrier_s + (n - 1) * c.chunk_copy_s : 0.0);
  return t;
}

CollectiveMatmulTimes matmul_reduce_scatter_times(const CollectiveMatmulCosts& c) {
  const int n = std::max(1, c.parts);
  double compute_end = 0, copy_end = 0;
  double stream_end[2] = {0, 0};
  for (int k = 1; k < n; ++k) {
    double& stream = stream_end[k % 2];
    compute_end = std::max(stream, compute_end) + c.chunk_matmul_s;
    copy_end = std::max(compute_end + c.barrier_s, copy_end) + c.chunk_copy_s;
    stream = copy_end + c.barrier_s;
  }
  compute_end =
      std::max(stream_end[0], compute_end) + c.chunk_matmul_s;  // the own rows, current stream
  CollectiveMatmulTimes t;
  t.total_s = std::max(compute_end, stream_end[1]) + (n > 1 ? c.barrier_s : 0.0) + c.reduce_s;
  t.compute_s = n * c.chunk_matmul_s + c.reduce_s;
  t.comm_s = n > 1 ? (n - 1) * (c.chunk_copy_s + 2 * c.barrier_s) + c.barrier_s : 0.0;
  return t;
}

}  // namespace fullshard::sim
