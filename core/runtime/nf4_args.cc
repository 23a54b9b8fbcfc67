#include "core/runtime/nf4_args.h"

#include <string>

#include "core/common/error.h"
#include "core/runtime/op_args.h"

namespace fullshard {

Nf4Args Nf4Args::decode(const OpCall& op) {
  check_table_arity(op);
  FULLSHARD_CHECK(
      op.iargs.size() >= 5,
      op_where(op) + "needs iargs = {numel, block_size, scaler_block_size, world, index}");
  const Nf4Args a{op.iargs[0], op.iargs[1], op.iargs[2], op.iargs[3], op.iargs[4]};
  const Nf4Layout l = a.layout();
  FULLSHARD_CHECK(l.valid() && a.world >= 1 && a.index >= 0 && a.index < a.world &&
                      l.n_scaler_blocks() % a.world == 0,
                  op_where(op) + "has a bad NF4 layout or chunk");
  // The parts in torchao's order: quantized_data, quantized_scalers, quantization_factor, then
  // scaler_mean and the 16-level table (one each, not chunked).
  const uint64_t w = static_cast<uint64_t>(a.world);
  const std::vector<TensorRef>& parts = op.kind == OpKind::kNF4Quantize ? op.outputs : op.inputs;
  const std::vector<TensorRef>& whole = op.kind == OpKind::kNF4Quantize ? op.inputs : op.outputs;
  const uint64_t want[5] = {l.data_bytes() / w, l.scalers_bytes() / w, l.factors_bytes() / w, 2,
                            32};
  const DType dt[5] = {DType::kUInt8, DType::kUInt8, DType::kBFloat16, DType::kBFloat16,
                       DType::kBFloat16};
  for (size_t i = 0; i < 5; ++i)
    FULLSHARD_CHECK(
        parts[i].meta.dtype == dt[i] && parts[i].meta.nbytes() == want[i],
        op_where(op) + "NF4 part " + std::to_string(i) + " has the wrong dtype or size");
  FULLSHARD_CHECK(whole[0].meta.dtype == DType::kBFloat16 && whole[0].meta.numel() == a.numel,
                  op_where(op) + "expects the whole weight in bf16");
  FULLSHARD_CHECK(op.kind == OpKind::kNF4Quantize || a.world == 1,
                  op_where(op) + "dequantises a whole (unsharded) weight only");
  return a;
}

}  // namespace fullshard
