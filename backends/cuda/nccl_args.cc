#include "backends/cuda/nccl_args.h"

#include <cstring>
#include <string>

#include "core/common/error.h"
#include "core/tensor/float_convert.h"

namespace fullshard::cuda {

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat16: return ncclFloat16;
    case DType::kUInt8:
    case DType::kFloat8E4M3FN:  // float8 travels as bytes (all-gathers only; never reduced)
    case DType::kFloat8E5M2: return ncclUint8;
    case DType::kInt64: return ncclInt64;
  }
  FULLSHARD_CHECK(false, "unknown dtype");
  return ncclUint8;
}

bool nccl_reducible(DType d) {
  return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16;
}

NcclReduction nccl_reduction(ReduceOp op, double scale, DType dtype) {
  FULLSHARD_CHECK(nccl_reducible(dtype), "NCCL reduction of " + std::string(dtype_name(dtype)) +
                                             ": only fp32, bf16 and fp16 are reduced");
  NcclReduction r;
  switch (op) {
    case ReduceOp::kSum: r.builtin = ncclSum; return r;
    case ReduceOp::kAvg: r.builtin = ncclAvg; return r;
    case ReduceOp::kMax: r.builtin = ncclMax; return r;
    case ReduceOp::kPremulSum: break;
  }
  if (scale == 1.0) {
    r.builtin = ncclSum;
    return r;
  }
  r.premul = true;
  const auto f = static_cast<float>(scale);
  if (dtype == DType::kFloat32) {
    std::memcpy(r.scalar.data(), &f, sizeof f);
    r.scalar_bytes = sizeof f;
  } else {
    const uint16_t h = dtype == DType::kBFloat16 ? float_to_bf16(f) : float_to_fp16(f);
    std::memcpy(r.scalar.data(), &h, sizeof h);
    r.scalar_bytes = sizeof h;
  }
  return r;
}

std::vector<NcclTransfer> nccl_all_to_all_transfers(const std::vector<size_t>& send_counts,
                                                    const std::vector<size_t>& recv_counts) {
  FULLSHARD_CHECK(send_counts.size() == recv_counts.size(),
                  "NCCL all_to_all: send and receive splits name different group sizes");
  std::vector<NcclTransfer> t;
  size_t sent = 0, received = 0;
  for (size_t j = 0; j < send_counts.size(); ++j) {
    const int peer = static_cast<int>(j);
    if (send_counts[j] > 0) t.push_back({true, peer, sent, send_counts[j]});
    if (recv_counts[j] > 0) t.push_back({false, peer, received, recv_counts[j]});
    sent += send_counts[j];
    received += recv_counts[j];
  }
  return t;
}

}  // namespace fullshard::cuda
