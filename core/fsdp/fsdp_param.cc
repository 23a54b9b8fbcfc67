#include "core/fsdp/fsdp_param.h"

#include "core/common/error.h"
#include "core/model/ops.h"
#include "core/runtime/nf4_args.h"

namespace fullshard {

namespace {

// NOTE [Shard(i) placement]: shard_placement_fn may return Shard(i), i > 0 (torchtitan's routed
// experts when the efsdp degree exceeds the experts per rank). FSDP2 (_fsdp_param.py,
// _init_sharded_param) then requires dim i to split evenly over the shard group
// (NotImplementedError otherwise; the scenario checks it), so there is no padding: every rank
// stores [.., d_i / W, ..] made contiguous, numel / W elements. The all-gather output is W such
// chunks, rank-major; copy-out goes through a temporary and torch.cat(chunks, dim=i), and the
// reduce-scatter's copy-in first rewrites each gradient as cat(chunk(g, W, dim=i), dim=0)
// (foreach_all_gather_copy_out, foreach_reduce in _fsdp_collectives.py).
Shape dim_sharded_shape(const Shape& shape, int world, int dim) {
  FULLSHARD_CHECK(dim >= 0 && static_cast<size_t>(dim) < shape.size() &&
                      shape[static_cast<size_t>(dim)] % world == 0,
                  "Shard(" + std::to_string(dim) + ") needs an even split");
  Shape s = shape;
  s[static_cast<size_t>(dim)] /= world;
  return s;
}

}  // namespace

FSDPParam::FSDPParam(Backend& b, Param& param, int shard_world, int shard_rank, DType orig_dtype,
                     DType param_dtype, bool offload, int shard_dim, const Tensor* full)
    : param_(&param),
      world_(shard_world),
      rank_(shard_rank),
      shard_dim_(shard_dim),
      orig_dtype_(orig_dtype),
      param_dtype_(param_dtype),
      offload_(offload),
      padded_numel_(shard_dim == 0 ? fullshard::padded_sharded_numel(param.shape, shard_world)
                                   : fullshard::numel(param.shape) / shard_world),
      sharded_shape_(shard_dim == 0 ? fullshard::sharded_shape(param.shape, shard_world, shard_rank)
                                    : dim_sharded_shape(param.shape, shard_world, shard_dim)) {
  if (param.nf4()) {
    FULLSHARD_CHECK(shard_dim == 0 && !offload && full == nullptr,
                    param.fqn + ": an NF4 weight is sharded on dim 0, on the device, from meta");
    init_nf4(b);
    param.binding = this;
    return;
  }
  // NOTE [Sharded storage]: FSDP2 allocates ceil(d0/W) rows on every rank (new_zeros, then
  // the real rows are copied to the front), so the storage is padded even on ranks whose
  // chunk is short or empty.
  TensorMeta meta{orig_dtype, {padded_numel_}};
  const std::string what = param.fqn + " (sharded)";
  if (offload) {
    Buffer buf = b.allocate_host(meta.nbytes(), MemCategory::kShardedParam, what);
    sharded_data_ = adopt_buffer(b, buf, meta);
  } else {
    sharded_data_ = empty_tensor(b, meta, MemCategory::kShardedParam, StreamRole::kDefault, what);
  }
  // The model's init_weights() on the sharded parameter (torchtitan: to_empty + init after
  // fully_shard): this rank's rows of the full tensor, zero padding. A Shard(1) shard is each
  // row's column block (init_param_dim1_shard), the same values as the unsharded tensor's.
  const int64_t d0 = param.shape.empty() ? 1 : param.shape[0];
  if (full) {  // new_zeros(padded_sharded_size), then this rank's rows copied in
    FULLSHARD_CHECK(shard_dim == 0 && !offload && full->numel() == fullshard::numel(param.shape),
                    param.fqn + ": a full tensor needs Shard(0) on the device");
    ops::fill_zero(b, StreamRole::kDefault, sharded_data_, what);
    const int64_t rows = shard_rows(d0, shard_world, shard_rank);
    if (rows > 0) {
      const int64_t row_numel = fullshard::numel(param.shape) / std::max<int64_t>(d0, 1);
      const int64_t n = rows * row_numel;
      const uint64_t esize = dtype_size(orig_dtype);
      const uint64_t from =
          static_cast<uint64_t>(shard_row_offset(d0, shard_world, shard_rank) * row_numel) * esize;
      ops::copy_into(b, StreamRole::kDefault, sharded_data_.view(TensorMeta{orig_dtype, {n}}),
                     full->view(TensorMeta{full->dtype(), {n}}, from), param.fqn + " shard copy");
    }
  } else if (shard_dim != 0) {
    FULLSHARD_CHECK(shard_dim == 1, param.fqn + ": FSDP shards on dim 0 or 1 only");
    ops::init_param_dim1_shard(b, StreamRole::kDefault, sharded_data_, param, shard_world,
                               shard_rank);
  } else
    ops::init_param(b, StreamRole::kDefault, sharded_data_, param,
                    shard_row_offset(d0, shard_world, shard_rank),
                    shard_rows(d0, shard_world, shard_rank));
  param.binding = this;
}

// NOTE [NF4 all-gather]: torchtune's QLoRA builds each base linear's weight with to_nf4 and
// loads it rank by rank (load_from_full_model_state_dict: to_nf4 of the full bf16 tensor, then
// torch.chunk and new_zeros + copy_ of this rank's chunk, as FSDP2's _init_sharded_param
// would): NF4Tensor's aten.split and new_zeros chunk each inner tensor, so a rank keeps 1/W of
// quantized_data (numel / 2 bytes), quantized_scalers (numel / block_size int8) and
// quantization_factor (numel / (block_size * scaler_block_size) bf16), and the whole
// scaler_mean and level table, shared by every chunk. Here the init draws the full bf16 tensor
// into a temporary, quantises it and keeps this rank's chunks (kNF4Quantize). FSDP2
// (_fsdp_param.py) calls NF4Tensor.fsdp_pre_all_gather, which returns those three chunks as
// they are (no copy, no cast): they join the group's byte all-gather (mixed dtypes) as three
// inputs. init_all_gather_outputs allocates one output per input (W times its size, its own
// dtype), the copy-out splits into them, and fsdp_post_all_gather wraps them as the unsharded
// NF4Tensor; resharding frees the three. The weight is bf16 only where a linear dequantises it.
void FSDPParam::init_nf4(Backend& b) {
  const Param& p = *param_;
  const Nf4Layout whole{fullshard::numel(p.shape), p.nf4_block_size, p.nf4_scaler_block_size};
  const int64_t w = world_;
  FULLSHARD_CHECK(whole.valid() && p.shape.size() == 2 && p.shape[0] % w == 0 &&
                      whole.n_scaler_blocks() % w == 0,
                  p.fqn + ": an NF4 weight that does not split evenly (refused by check_nf4)");
  const StreamRole s = StreamRole::kDefault;
  Tensor full = empty_tensor(b, {DType::kBFloat16, {whole.numel}}, MemCategory::kTemporary, s,
                              p.fqn + " (full bf16, for to_nf4)");
  ops::init_param(b, s, full, p, 0, p.shape[0]);
  auto part = [&](DType d, uint64_t bytes, const char* what) {
    return empty_tensor(b, {d, {static_cast<int64_t>(bytes / dtype_size(d))}},
                         MemCategory::kShardedParam, s, p.fqn + " (sharded " + what + ")");
  };
  const uint64_t uw = static_cast<uint64_t>(w);
  nf4_sharded_ = {part(DType::kUInt8, whole.scalers_bytes() / uw, "nf4 quantized_scalers"),
                  part(DType::kBFloat16, whole.factors_bytes() / uw, "nf4 quantization_factor"),
                  part(DType::kUInt8, whole.data_bytes() / uw, "nf4 quantized_data")};
  nf4_mean_ = part(DType::kBFloat16, 2, "nf4 scaler_mean");
  nf4_table_ = part(DType::kBFloat16, 32, "nf4 table");
  sharded_data_ = nf4_sharded_[2];
  OpCall op;
  op.kind = OpKind::kNF4Quantize;
  op.name = p.fqn + " to_nf4";
  op.inputs = {full.ref()};
  op.outputs = {nf4_sharded_[2].ref(), nf4_sharded_[0].ref(), nf4_sharded_[1].ref(),
                nf4_mean_.ref(), nf4_table_.ref()};
  // Read the weight, absmax and scale it, 16 comparisons per element; write the chunk.
  op.flops = 20.0 * static_cast<double>(whole.numel);
  op.bytes = static_cast<double>(full.nbytes());
  for (const TensorRef& r : op.outputs) op.bytes += static_cast<double>(r.nbytes());
  Nf4Args{whole.numel, whole.block_size, whole.scaler_block_size, w, rank_}.encode(op);
  b.launch(s, op);
}

std::vector<Tensor> FSDPParam::nf4_weight() const {
  if (!nf4() || nf4_unsharded_.empty()) return {};
  return {nf4_unsharded_[2], nf4_unsharded_[0], nf4_unsharded_[1], nf4_mean_, nf4_table_};
}

Tensor FSDPParam::unsharded() const {
  if (!unsharded_storage_) return Tensor();
  if (nf4()) return unsharded_storage_;  // quantized_data; a linear reads nf4_weight()
  return unsharded_storage_.view(TensorMeta{all_gather_dtype(), param_->shape});
}

Tensor FSDPParam::sharded_local() const {
  FULLSHARD_CHECK(!nf4(), param_->fqn + ": an NF4 shard has no local bf16 tensor");
  return sharded_data_.view(TensorMeta{orig_dtype_, sharded_shape_});
}

void FSDPParam::alloc_unsharded(Backend& b) {
  FULLSHARD_CHECK(!unsharded_storage_, param_->fqn + " is already unsharded");
  if (nf4()) {  // init_all_gather_outputs: one per fsdp_pre_all_gather output (NOTE above)
    const char* what[3] = {"quantized_scalers", "quantization_factor", "quantized_data"};
    for (size_t i = 0; i < 3; ++i) {
      const Tensor& sh = nf4_sharded_[i];
      nf4_unsharded_.push_back(empty_tensor(b, TensorMeta{sh.dtype(), {sh.numel() * world_}},
                                             MemCategory::kUnshardedParam, StreamRole::kDefault,
                                             param_->fqn + " (unsharded nf4 " + what[i] + ")"));
    }
    unsharded_storage_ = nf4_unsharded_[2];
    return;
  }
  unsharded_storage_ = empty_tensor(b, TensorMeta{all_gather_dtype(), {unsharded_storage_numel()}},
                                     MemCategory::kUnshardedParam, StreamRole::kDefault,
                                     param_->fqn + " (unsharded)");
}

// NOTE [AccumulateGrad]: the first gradient of a backward becomes .grad without a copy; a
// later one (tied weights, gradient accumulation without sync) is added in place into the
// existing .grad and then freed, as torch's AccumulateGrad does.
void FSDPParam::accumulate_grad(Backend& b, Tensor grad) {
  if (!unsharded_grad_) {
    unsharded_grad_ = std::move(grad);
    return;
  }
  ops::add_into(b, unsharded_grad_, grad, param_->fqn + " grad accumulate");
}

}  // namespace fullshard
