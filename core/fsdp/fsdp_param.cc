#include "core/fsdp/fsdp_param.h"

#include "core/common/error.h"
#include "core/model/ops.h"

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
  // NOTE [Sharded storage]: FSDP2 allocates ceil(d0/W) rows on every rank (new_zeros, then
  // the real rows are copied to the front), so the storage is padded even on ranks whose
  // chunk is short or empty.
  TensorMeta meta{orig_dtype, {padded_numel_}};
  const std::string what = param.fqn + " (sharded)";
  if (offload) {
    Buffer buf = b.allocate_host(meta.nbytes(), MemCategory::kShardedParam, what);
    sharded_data_ = Tensor(std::make_shared<Storage>(b, buf), meta);
  } else {
    sharded_data_ = Tensor::empty(b, meta, MemCategory::kShardedParam, StreamRole::kDefault, what);
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

Tensor FSDPParam::unsharded() const {
  if (!unsharded_storage_) return Tensor();
  return unsharded_storage_.view(TensorMeta{all_gather_dtype(), param_->shape});
}

Tensor FSDPParam::sharded_local() const {
  return sharded_data_.view(TensorMeta{orig_dtype_, sharded_shape_});
}

void FSDPParam::alloc_unsharded(Backend& b) {
  FULLSHARD_CHECK(!unsharded_storage_, param_->fqn + " is already unsharded");
  unsharded_storage_ = Tensor::empty(b, TensorMeta{all_gather_dtype(), {unsharded_storage_numel()}},
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
