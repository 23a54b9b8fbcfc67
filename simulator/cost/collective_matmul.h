#pragma once
// Asynchronous tensor parallelism's collective-matmuls (tensor_parallel.async): PyTorch's
// symm_mem.fused_all_gather_matmul and fused_matmul_reduce_scatter micro-pipeline a tp
// all-gather or reduce-scatter with the product that consumes or produces it, chunk by chunk
// over two streams, moving each chunk by a copy-engine pull from a peer's symmetric-memory
// buffer. NOTE [Collective-matmul pipeline] in collective_matmul.cc. Pure functions.

namespace fullshard::sim {

// What one fused op's pieces cost on their own.
struct CollectiveMatmulCosts {
  int parts = 1;              // the tp group's size: the chunks (one per rank)
  double chunk_matmul_s = 0;  // the products of one chunk (every weight of the op)
  double chunk_copy_s = 0;    // one chunk pulled from a peer over NVLink
  double local_copy_s = 0;    // all-gather: the own shard into the symmetric buffer
  double barrier_s = 0;       // one symmetric-memory barrier (a signal-pad exchange)
  double reduce_s = 0;        // reduce-scatter: summing the parts partial products
};

// The fused op's span on its stream, the part of it the products alone take
// (parts x chunk_matmul_s), and its communication (copies and barriers). exposed = total - compute.
struct CollectiveMatmulTimes {
  double total_s = 0;
  double compute_s = 0;
  double comm_s = 0;
};

CollectiveMatmulTimes all_gather_matmul_times(const CollectiveMatmulCosts& c);
CollectiveMatmulTimes matmul_reduce_scatter_times(const CollectiveMatmulCosts& c);

}  // namespace fullshard::sim
