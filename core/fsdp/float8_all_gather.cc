// FSDP2's float8 all-gather (core/fsdp/float8_all_gather.h).
#include "core/fsdp/float8_all_gather.h"

#include "core/common/error.h"
#include "core/model/float8_linear.h"
#include "core/runtime/float8_args.h"

// NOTE [Float8 all-gather]: with enable_fsdp_float8_all_gather (tensorwise only, with a shard
// dim) a converted weight is a WeightWithDynamicFloat8CastTensor, and FSDP2 (torch 2.11
// _fsdp_param.py) calls its fsdp_pre_all_gather on the copy-in stream instead of the foreach-copy
// cast: the fp32 shard's abs and max, an all-reduce (MAX) of the amax over the shard group, the
// scale, * scale, clamp, .to(e4m3); with a precomputed scale only the last three. The e4m3 shard
// (1 byte per element) is the all-gather input; the scale is metadata, not gathered. A group
// mixing float8 and bf16 inputs (the norms) all-gathers bytes (uint8), as
// _get_all_gather_input_metadatas decides. fsdp_post_all_gather wraps the gathered bytes: the
// unsharded weight is e4m3 and the float8 linear uses it uncast. The scale, from the copy-in
// pool and read by compute, is retired when the weight reshards and released at the next root
// pre-forward, after the all-gather streams waited for the current stream (PyTorch keeps it until
// the next all-gather: at most two 512-byte blocks per weight apart, every step alike).
// Post-forward shards and uneven shards fail in FSDP2 with an extension: check_float8 refuses them.

namespace fullshard {

Tensor float8_pre_all_gather(Backend& b, FSDPParam& p, const ProcessGroup& group, StreamRole stream,
                             const std::string& name) {
  FULLSHARD_CHECK(p.float8_all_gather() && !p.offload(),
                  p.param().fqn + ": float8 all-gather of a parameter without it");
  const Tensor& shard = p.sharded_data();
  const int64_t n = shard.numel();
  const Tensor& pre = p.precomputed_float8_scale();
  ops::Float8CastSpec spec;  // tensorwise e4m3, no power-of-two rounding
  ops::Float8Cast c = ops::cast_to_float8(b, stream, shard, 1, n, spec, false, pre ? &pre : nullptr,
                                          pre ? nullptr : &group, MemCategory::kAllGather,
                                          name + " " + p.param().fqn + " fsdp_pre_all_gather");
  p.set_float8_scale(c.scale);
  return c.data.view({DType::kFloat8E4M3FN, {n}});
}

void precompute_float8_dynamic_scale_for_fsdp(Backend& b, const std::vector<FSDPParam*>& params,
                                              const ProcessGroup& group) {
  std::vector<FSDPParam*> f8;
  for (FSDPParam* p : params)
    if (p->float8_all_gather()) f8.push_back(p);
  if (f8.empty()) return;
  const StreamRole s = StreamRole::kDefault;
  const int64_t n = static_cast<int64_t>(f8.size());
  const std::string name = "precompute_float8_dynamic_scale_for_fsdp";
  // torch._foreach_norm(weights, ord=inf) then torch.stack: written here straight into the
  // stacked [n] (one amax kernel per weight).
  Tensor amax =
      empty_tensor(b, {DType::kFloat32, {n}}, MemCategory::kTemporary, s, name + " amax");
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& x = f8[i]->sharded_data();
    Float8CastArgs a{0, -1, 1, x.numel(), 0};
    Tensor out = amax.view({DType::kFloat32, {1}}, static_cast<uint64_t>(i) * 4);
    OpCall op;
    op.kind = OpKind::kFloat8Amax;
    op.name = name + " " + f8[i]->param().fqn;
    op.inputs = {x.ref()};
    op.outputs = {out.ref()};
    op.flops = static_cast<double>(x.numel());
    op.bytes = static_cast<double>(x.nbytes() + 4);
    a.encode(op);
    b.launch(s, op);
  }
  // clamp(amax, EPS) on a Partial DTensor: a copy, then one all-reduce (MAX) over the shard group.
  CollectiveCall call;
  call.kind = CollectiveKind::kAllReduce;
  call.op = ReduceOp::kMax;
  call.name = name + " all_reduce";
  call.input = amax.ref();
  call.output = amax.ref();
  b.collective(s, call, group);
  // .to(float64), finfo.max / amax, .to(float32): three small kernels into the scales.
  Tensor scale =
      empty_tensor(b, {DType::kFloat32, {n}}, MemCategory::kTemporary, s, name + " scale");
  for (int64_t k = 1; k <= 3; ++k) {
    Float8CastArgs a{1, -1, n, 1, k};
    OpCall op;
    op.kind = OpKind::kFloat8Scale;
    op.name = name + " scale";
    op.inputs = {(k == 1 ? amax : scale).ref()};
    op.outputs = {scale.ref()};
    op.flops = static_cast<double>(n);
    op.bytes = static_cast<double>(8 * n);
    a.encode(op);
    b.launch(s, op);
  }
  for (int64_t i = 0; i < n; ++i)
    f8[i]->set_precomputed_float8_scale(
        scale.view({DType::kFloat32, {1}}, static_cast<uint64_t>(i) * 4));
}

}  // namespace fullshard
