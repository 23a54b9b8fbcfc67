#pragma once
// The ops whose values are defined on the host (core/data), as every real backend runs them
// into host memory: kLoadBatch (tokens and labels from the BatchSource) and kInitParam (a
// parameter shard's initial values). The CPU backend runs them on the stream's thread; the CUDA
// backend into pinned memory (staged to the device, NOTE [Staged host data]) or, for offloaded
// tensors, as host work in stream order (NOTE [Host work on the stream]).
#include <vector>

#include "core/data/text_corpus.h"
#include "core/runtime/op.h"

namespace fullshard::backends {

// What a host fill needs besides the op.
struct HostFillContext {
  const BatchSource* batches = nullptr;  // kLoadBatch's data
  int rank = 0, world_size = 1;
};

// True for the kinds run_host_fill runs.
bool is_host_fill(OpKind kind);

// kLoadBatch into tokens / labels (op.outputs[0] and [1], int64 host memory).
void fill_batch(const OpCall& op, const HostFillContext& ctx, void* tokens, void* labels);

// Runs `op` when it is a host fill (out: op.outputs' host addresses) and returns true; false,
// doing nothing, for any other kind.
bool run_host_fill(const OpCall& op, const HostFillContext& ctx, const std::vector<void*>& out);

}  // namespace fullshard::backends
