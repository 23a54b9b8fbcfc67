#pragma once
// Pure mapping of fullshard's collective arguments to NCCL's (no NCCL call; host-testable).
//
// NOTE [Reductions on NCCL]: kSum -> ncclSum, kAvg -> ncclAvg (NCCL divides by the group size
// in the kernel), kMax -> ncclMax, kPremulSum -> a per-call op from ncclRedOpCreatePreMulSum
// with the scale as a host-immediate scalar of the reduction's dtype (NCCL reads `*scalar` as
// that type: a bf16 reduction takes a bf16 scalar), destroyed with ncclRedOpDestroy after the
// call is enqueued, as ProcessGroupNCCL does for FSDP2's _make_nccl_premul_sum. FSDP2's
// pre/post divide factors arrive here as kPremulSum(1/factor) on the reduce-scatter and a later
// kScale kernel (core/fsdp/reduce_policy.h). A premul scale of exactly 1 is a plain sum.
// Rounding: the scale is rounded to the dtype (nearest even), so a bf16 premul-sum multiplies
// by bf16(scale), as NCCL's FuncPreMulSum does; the Gloo path multiplies in fp32 instead. Both
// are within the bf16 tolerance the training tests use, not bit-identical.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <nccl.h>

#include "core/runtime/op.h"
#include "core/tensor/dtype.h"

namespace fullshard::cuda {

// Every DType has an NCCL type (uint8 for byte all-gathers, int64 for token broadcasts).
ncclDataType_t nccl_dtype(DType d);
// Reductions (reduce_scatter, all_reduce) take fp32, bf16 and fp16 only.
bool nccl_reducible(DType d);

struct NcclReduction {
  ncclRedOp_t builtin = ncclSum;          // the op when !premul
  bool premul = false;                    // create a PreMulSum op from `scalar`
  std::array<unsigned char, 8> scalar{};  // the scale in the reduction's dtype, host-immediate
  size_t scalar_bytes = 0;
};

// Throws InternalError for a dtype that cannot be reduced.
NcclReduction nccl_reduction(ReduceOp op, double scale, DType dtype);

// NOTE [All-to-all over NCCL]: NCCL has no all-to-all-v; PyTorch's ProcessGroupNCCL runs
// all_to_all_single with split sizes as one ncclGroupStart / ncclGroupEnd around an ncclSend and
// an ncclRecv per peer, itself included, skipping empty splits (torch/csrc/cuda/nccl.cpp,
// all2all_single_unequal_split). The splits (CollectiveArgs::send_counts / recv_counts, decoded
// once: collective_args.h) fill a prefix of each buffer in group-rank order: peer j's chunk
// starts at the sum of the splits before it. The transfers, in launch order (per peer: send,
// then receive); offsets and counts in elements.
struct NcclTransfer {
  bool send = false;
  int peer = 0;
  size_t offset = 0, count = 0;
};
std::vector<NcclTransfer> nccl_all_to_all_transfers(const std::vector<size_t>& send_counts,
                                                    const std::vector<size_t>& recv_counts);

}  // namespace fullshard::cuda
