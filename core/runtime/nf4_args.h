#pragma once
// Argument struct of the NF4 kinds (op_kinds.def; NOTE [NF4] in core/tensor/nf4.cc): QLoRA's
// frozen base weights as torchao's NF4Tensor. encode / decode as every *_args.h
// (core/runtime/op_args.h).
#include <cstdint>

#include "core/runtime/op.h"
#include "core/tensor/nf4.h"

namespace fullshard {

// kNF4Quantize: to_nf4 of the whole bf16 weight (numel elements), keeping chunk `index` of
// `world` of each sharded part (FSDP2's chunk of the NF4Tensor); kNF4Dequantize: the whole
// unsharded weight (world 1, index 0) back to bf16.
// iargs {numel, block_size, scaler_block_size, world, index}
struct Nf4Args {
  int64_t numel = 0, block_size = 64, scaler_block_size = 256, world = 1, index = 0;

  Nf4Layout layout() const { return Nf4Layout{numel, block_size, scaler_block_size}; }
  void encode(OpCall& op) const { op.iargs = {numel, block_size, scaler_block_size, world, index}; }
  static Nf4Args decode(const OpCall& op);
};

}  // namespace fullshard
