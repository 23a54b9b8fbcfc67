#pragma once
// What the host program asks a backend to run: kernels (OpCall) and collectives
// (CollectiveCall). The simulator records them with their cost; real backends execute them.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor/shape.h"
#include "core/tensor/tensor_ref.h"

namespace fullshard {

// Kernel kinds, one row each in core/runtime/op_kinds.def (NOTE [One op table] in op_table.h:
// arity, typed arguments and properties live there).
enum class OpKind : uint16_t {
#define FS_OP(kind, ...) kind,
#include "core/runtime/op_kinds.def"
#undef FS_OP
};
// Read from the op table (op_table.h): the kinds a torch.compile'd region launches (inductor's
// generated kernels, no eager dispatch); the kinds PyTorch runs as cuBLAS matmuls (each uses
// its thread's cuBLAS workspace); the kind's name without its k.
bool is_compiled_region(OpKind k);
bool op_uses_blas(OpKind k);
const char* op_kind_name(OpKind k);

struct OpCall {
  OpKind kind = OpKind::kFill;
  std::string name;                // module path + op, e.g. "layers.3.attention.wq"
  std::vector<TensorRef> inputs;   // read
  std::vector<TensorRef> outputs;  // written (an in-place op lists its tensor in both)
  std::vector<int64_t> iargs;      // the kind's typed arguments, encoded (op_kinds.def's Args
  std::vector<double> fargs;       // struct: core/runtime/*_args.h)
  double flops = 0;                // floating-point operations (2 per multiply-add)
  double bytes = 0;                // bytes read + written in device memory
};

enum class CollectiveKind : uint8_t {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kBarrier,
  // all_to_all_single with split sizes (expert parallelism's token dispatch and combine): group
  // rank j receives send_numels[j] elements of this rank's input, in group order.
  kAllToAll
};
inline constexpr int kCollectiveKindCount = 6;
const char* collective_name(CollectiveKind k);

// c10d ReduceOp subset FSDP2 uses. kPremulSum multiplies by `scale` before summing.
enum class ReduceOp : uint8_t { kSum, kAvg, kPremulSum, kMax };
const char* reduce_op_name(ReduceOp op);

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kAllGather;
  ReduceOp op = ReduceOp::kSum;
  double scale = 1.0;  // kPremulSum factor
  std::string name;    // e.g. "layers.3 all_gather"
  // all_gather: input is this rank's slice, output the whole (W x input) buffer.
  // reduce_scatter: input is the whole buffer, output this rank's slice.
  // all_reduce / broadcast: input == output.
  TensorRef input;
  TensorRef output;
  int root = 0;  // broadcast
  // all_to_all: the elements this rank sends to / receives from each group rank, in group order
  // (all_to_all_single's input / output split sizes times the row width); input and output are
  // the concatenations, in that order.
  std::vector<int64_t> send_numels;
  std::vector<int64_t> recv_numels;
};

}  // namespace fullshard
