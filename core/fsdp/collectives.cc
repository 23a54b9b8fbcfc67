#include "core/fsdp/collectives.h"

#include "core/common/error.h"
#include "core/fsdp/float8_all_gather.h"
#include "core/model/ops.h"
#include "core/runtime/copy_args.h"
#include "core/runtime/eager_args.h"
#include "core/runtime/tensor_parallel_args.h"

namespace fullshard {
namespace {

constexpr StreamRole kCurrent = StreamRole::kDefault;

OpCall kernel(OpKind kind, std::string name, std::vector<TensorRef> in,
              std::vector<TensorRef> out) {
  OpCall op;
  op.kind = kind;
  op.name = std::move(name);
  for (auto& r : in) op.bytes += static_cast<double>(r.nbytes());
  for (auto& r : out) op.bytes += static_cast<double>(r.nbytes());
  op.inputs = std::move(in);
  op.outputs = std::move(out);
  return op;
}

// torch.cat(torch.chunk(in, a), dim) of a tensor whose dims before `dim` hold `b` elements: out
// viewed as [b][a][inner] takes in's [a][b][inner] (NOTE [Shard(i) placement] in fsdp_param.cc).
void transpose_blocks(Backend& b, StreamRole s, const Tensor& in, const Tensor& out, int64_t a,
                      int64_t bb, const std::string& name) {
  OpCall op = kernel(OpKind::kTransposeBlocks, name, {in.ref()}, {out.ref()});
  TransposeBlocksArgs t;
  t.a = a;
  t.b = bb;
  t.inner = in.numel() / (a * bb);
  t.encode(op);
  b.launch(s, op);
}

// Elements of `shape` before dim `d` (the leading blocks of a Shard(d) chunk).
int64_t leading(const Shape& shape, int d) {
  int64_t n = 1;
  for (int i = 0; i < d; ++i) n *= shape[static_cast<size_t>(i)];
  return n;
}

}  // namespace

AllGatherResult foreach_all_gather(Backend& b, const std::vector<FSDPParam*>& params,
                                   const ProcessGroup& group, bool post_forward,
                                   AllGatherStreams streams, const std::string& name) {
  FULLSHARD_CHECK(!params.empty(), "all-gather of an empty group");
  const int world = group.size();
  const int my = group.index_of(b.rank());
  AllGatherResult r;
  r.world = world;
  r.dtype = params[0]->all_gather_dtype();
  std::vector<Tensor> inputs;  // what gets copied into this rank's slice
  std::vector<Tensor> temps;   // dropped (freed) after the all-gather is issued
  bool any_float8 = false;
  for (FSDPParam* p : params) {
    FULLSHARD_CHECK(p->param_dtype() == params[0]->param_dtype(), "mixed param dtypes in " + name);
    // An extension's pre-all-gather: float8's cast, or NF4's three parts as they are (NOTE
    // [NF4 all-gather] in fsdp_param.cc).
    any_float8 = any_float8 || p->float8_all_gather() || p->nf4();
    // Mixed all-gather dtypes (float8 weights beside bf16 norms) all-gather bytes (NOTE
    // [Float8 all-gather] in float8_all_gather.cc).
    if (p->all_gather_dtype() != r.dtype) r.dtype = DType::kUInt8;
  }
  const DType cast_dtype = params[0]->param_dtype();

  // ---- copy-in stream: gather the inputs (H2D, cast) ----
  // use_foreach_copy per parameter: a frozen bf16 base under param_dtype bf16 has nothing to
  // cast, so its sharded storage is its own all-gather input beside the foreach-copied others
  // (NOTE [Frozen parameters] in core/model/lora.cc).
  auto uses_foreach_copy = [](const FSDPParam* p) {
    return p->param_dtype() != p->orig_dtype() && !p->offload();
  };
  bool foreach_copy = false;
  for (FSDPParam* p : params) foreach_copy = foreach_copy || uses_foreach_copy(p);
  if (any_float8) {
    FULLSHARD_CHECK(!post_forward && !params[0]->offload(),
                    name + ": float8 all-gather from post-forward shards or with offload");
    // The foreach-copy cast for the others, fsdp_pre_all_gather for each float8 weight.
    int64_t total = 0;
    for (FSDPParam* p : params)
      if (!p->float8_all_gather() && !p->nf4() && uses_foreach_copy(p))
        total += p->padded_sharded_numel();
    Tensor flat;
    if (foreach_copy && total > 0)
      flat = empty_tensor(b, {cast_dtype, {total}}, MemCategory::kAllGather, streams.copy_in,
                           name + " all_gather_input (foreach_copy)");
    std::vector<TensorRef> srcs, dsts;
    uint64_t off = 0;
    for (FSDPParam* p : params) {
      if (p->float8_all_gather()) {
        inputs.push_back(float8_pre_all_gather(b, *p, group, streams.copy_in, name));
      } else if (p->nf4()) {
        for (const Tensor& t : p->nf4_sharded_parts()) inputs.push_back(t);
      } else if (!uses_foreach_copy(p)) {
        inputs.push_back(p->sharded_data());
      } else {
        const Tensor& src = p->sharded_data();
        srcs.push_back(src.ref());
        Tensor v = flat.view({cast_dtype, {src.numel()}}, off);
        dsts.push_back(v.ref());
        inputs.push_back(v);
        off += static_cast<uint64_t>(src.numel()) * dtype_size(cast_dtype);
      }
    }
    if (!srcs.empty())
      b.launch(streams.copy_in, kernel(OpKind::kCopy, name + " foreach_copy", srcs, dsts));
    if (flat) temps.push_back(flat);
  } else if (foreach_copy) {
    // Fast path (mixed precision, no offload): one flat temporary in param dtype and a
    // _foreach_copy_ into it — the cast, or for post-forward shards a plain copy.
    int64_t total = 0;
    for (FSDPParam* p : params)
      if (uses_foreach_copy(p))
        total += post_forward ? p->post_forward_shard().numel() : p->padded_sharded_numel();
    Tensor flat = empty_tensor(b, {r.dtype, {total}}, MemCategory::kAllGather, streams.copy_in,
                                name + " all_gather_input (foreach_copy)");
    std::vector<TensorRef> srcs, dsts;
    uint64_t off = 0;
    for (FSDPParam* p : params) {
      const Tensor& src = post_forward ? p->post_forward_shard() : p->sharded_data();
      FULLSHARD_CHECK(static_cast<bool>(src), p->param().fqn + " has no all-gather input");
      if (!uses_foreach_copy(p)) {  // already in param_dtype: all_gather_inputs as is
        inputs.push_back(src);
        continue;
      }
      srcs.push_back(src.ref());
      Tensor v = flat.view({r.dtype, {src.numel()}}, off);
      dsts.push_back(v.ref());
      inputs.push_back(v);
      off += static_cast<uint64_t>(src.numel()) * dtype_size(r.dtype);
    }
    b.launch(streams.copy_in, kernel(OpKind::kCopy, name + " foreach_copy", srcs, dsts));
    temps.push_back(flat);
  } else if (post_forward) {
    for (FSDPParam* p : params) {
      FULLSHARD_CHECK(static_cast<bool>(p->post_forward_shard()),
                      p->param().fqn + " has no post-forward shard");
      inputs.push_back(p->post_forward_shard());
    }
  } else if (params[0]->offload()) {
    // all_gather_inputs: .to(device, non_blocking) then .to(param_dtype) per parameter.
    for (FSDPParam* p : params) {
      const Tensor& host = p->sharded_data();
      Tensor dev = empty_tensor(b, host.meta(), MemCategory::kAllGather, streams.copy_in,
                                 p->param().fqn + " (H2D)");
      ops::copy_into(b, streams.copy_in, dev, host, p->param().fqn + " H2D");
      if (p->param_dtype() != p->orig_dtype()) {
        dev = ops::cast(b, streams.copy_in, dev, p->param_dtype(), MemCategory::kAllGather,
                        p->param().fqn + " cast");
      }
      inputs.push_back(dev);
    }
  } else {
    for (FSDPParam* p : params) inputs.push_back(p->sharded_data());
  }

  int64_t row = 0;
  for (Tensor& t : inputs) {
    if (r.dtype == DType::kUInt8) t = t.view({DType::kUInt8, {static_cast<int64_t>(t.nbytes())}});
    r.input_numels.push_back(t.numel());
    row += t.numel();
  }
  // all_gather_copy_in: the output is allocated on the copy-in stream; the input is its
  // rank slice, so the all-gather runs in place.
  r.output = empty_tensor(b, {r.dtype, {row * world}}, MemCategory::kAllGather, streams.copy_in,
                           name + " all_gather_output");
  Tensor slice =
      r.output.view({r.dtype, {row}}, static_cast<uint64_t>(row) * my * dtype_size(r.dtype));
  std::vector<TensorRef> srcs;
  for (const Tensor& t : inputs) srcs.push_back(t.ref());
  b.launch(streams.copy_in,
           kernel(OpKind::kAllGatherCopyIn, name + " all_gather_copy_in", srcs, {slice.ref()}));

  // ---- all-gather stream ----
  b.wait_stream(streams.all_gather, streams.copy_in);
  CollectiveCall call;
  call.kind = CollectiveKind::kAllGather;
  call.name = name + " all_gather";
  call.input = slice.ref();
  call.output = r.output.ref();
  b.collective(streams.all_gather, call, group);
  r.event = b.record_event(streams.all_gather);
  inputs.clear();
  temps.clear();  // freed on the host now: their pool (copy-in) is the only stream using them
  return r;
}

void foreach_all_gather_copy_out(Backend& b, const AllGatherResult& r,
                                 const std::vector<FSDPParam*>& params, const std::string& name) {
  b.wait_event(kCurrent, r.event);
  // A Shard(i > 0) parameter's rows are copied out into a temporary (empty_like, allocated right
  // after its unsharded storage), then chunk-cat along dim i into that storage; the temporaries
  // live until the last cat.
  std::vector<TensorRef> outs;
  std::vector<Tensor> temps(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    FSDPParam* p = params[i];
    p->alloc_unsharded(b);
    if (p->nf4()) {  // three outputs, byte views (NOTE [NF4 all-gather] in fsdp_param.cc)
      for (const Tensor& u : p->all_gather_outputs())
        outs.push_back(u.view({DType::kUInt8, {static_cast<int64_t>(u.nbytes())}}).ref());
      continue;
    }
    if (p->shard_dim() != 0) {
      FULLSHARD_CHECK(r.dtype != DType::kUInt8,
                      p->param().fqn + ": a byte (float8) all-gather of a Shard(i > 0) parameter");
      temps[i] = empty_tensor(
          b, p->unsharded_storage().meta(), MemCategory::kAllGather, kCurrent,
          p->param().fqn + " all_gather_output (Shard(" + std::to_string(p->shard_dim()) + "))");
      outs.push_back(temps[i].ref());
      continue;
    }
    const Tensor& u = p->unsharded_storage();
    // A byte all-gather copies out into byte views of the unsharded storages.
    outs.push_back(r.dtype == DType::kUInt8 && u.dtype() != DType::kUInt8
                       ? u.view({DType::kUInt8, {static_cast<int64_t>(u.nbytes())}}).ref()
                       : u.ref());
  }
  OpCall op =
      kernel(OpKind::kAllGatherCopyOut, name + " all_gather_copy_out", {r.output.ref()}, outs);
  AllGatherCopyOutArgs a;  // core/runtime/copy_args.h
  a.sizes = r.input_numels;
  a.world = r.world;
  a.encode(op);
  b.launch(kCurrent, op);
  for (size_t i = 0; i < params.size(); ++i)
    if (temps[i])
      transpose_blocks(b, kCurrent, temps[i], params[i]->unsharded_storage(), r.world,
                       leading(params[i]->shape(), params[i]->shard_dim()),
                       params[i]->param().fqn + " cat(chunks, dim)");
}

// NOTE [Reduce-scatter layout]: torch._chunk_cat(grads, dim=0, num_chunks=W) pads every
// gradient to W * ceil(d0/W) rows and interleaves them so that row r of the RS input is the
// concatenation of every parameter's shard r — the same layout as the all-gather output.
ReduceResult foreach_reduce(Backend& b, const std::vector<FSDPParam*>& params,
                            std::vector<Tensor> grads, const ReduceOptions& o,
                            const std::string& name) {
  FULLSHARD_CHECK(params.size() == grads.size() && !params.empty(), "bad foreach_reduce arguments");
  const ProcessGroup& rs_group = *o.reduce_scatter_group;
  const int world = rs_group.size();
  const DType rd = o.reduce_dtype;
  int64_t row = 0;
  for (FSDPParam* p : params) row += p->padded_sharded_numel();
  ReduceResult res;
  // A Shard(i > 0) gradient becomes cat(chunk(g, W, dim=i), dim=0) first, a new tensor that
  // replaces it in the list (the old one is freed as it goes).
  for (size_t i = 0; i < params.size() && world > 1; ++i) {
    const int d = params[i]->shard_dim();
    if (d == 0) continue;
    Shape chunked = grads[i].shape();  // W chunks of dim d stacked on dim 0, as _chunk_cat sees it
    chunked[0] *= world;
    chunked[static_cast<size_t>(d)] /= world;
    Tensor g = empty_tensor(
        b, TensorMeta{grads[i].dtype(), chunked}, MemCategory::kUnshardedGrad, kCurrent,
        params[i]->param().fqn + " grad chunk-cat (Shard(" + std::to_string(d) + "))");
    transpose_blocks(b, kCurrent, grads[i], g, leading(params[i]->shape(), d), world,
                     params[i]->param().fqn + " cat(chunk(grad, dim), 0)");
    grads[i] = std::move(g);
  }

  // ---- current stream: copy-in (with the widening cast) ----
  Tensor rs_input = empty_tensor(b, {rd, {row * world}}, MemCategory::kReduceScatter, kCurrent,
                                  name + " reduce_scatter_input");
  std::vector<TensorRef> srcs;
  for (const Tensor& g : grads) srcs.push_back(g.ref());
  const DType grad_dtype = grads[0].dtype();
  ChunkCatArgs cat;  // core/runtime/copy_args.h
  cat.world = world;
  if (dtype_size(grad_dtype) > dtype_size(rd)) {
    // Narrowing (e.g. fp32 grads, bf16 reduce): chunk_cat into a buffer of the grad dtype,
    // then copy (cast) it into the reduce-scatter input (newer foreach_reduce).
    Tensor grad_buffer = empty_tensor(b, {grad_dtype, {row * world}}, MemCategory::kReduceScatter,
                                       kCurrent, name + " reduce_scatter grad_buffer");
    OpCall cc = kernel(OpKind::kChunkCat, name + " chunk_cat", srcs, {grad_buffer.ref()});
    cat.encode(cc);
    b.launch(kCurrent, cc);
    ops::copy_into(b, kCurrent, rs_input, grad_buffer, name + " reduce_scatter input cast");
  } else {
    OpCall cc = kernel(OpKind::kChunkCat, name + " chunk_cat", srcs, {rs_input.ref()});
    cat.encode(cc);
    b.launch(kCurrent, cc);
  }
  grads.clear();  // only after the copy-in may the unsharded gradients go

  // ---- reduce-scatter stream ----
  const StreamRole rs = StreamRole::kReduceScatter;
  b.wait_stream(rs, kCurrent);
  const bool cast_after = rd != params[0]->orig_dtype();
  Tensor out = empty_tensor(b, {rd, {row}},
                             cast_after ? MemCategory::kReduceScatter : MemCategory::kShardedGrad,
                             rs, name + " reduce_scatter_output");
  if (o.factors.pre != 1.0)
    ops::scale_inplace(b, rs, rs_input, 1.0 / o.factors.pre, name + " predivide");
  if (world == 1) {
    // No collective (NOTE [World-size-1 shortcut] in fsdp_param_group.cc): the output is a copy
    // of the input, through `input / gradient_divide_factor` (a temporary on this stream) when a
    // factor is set. FSDP2 divides so even where the post-divide below divides by the factor
    // again (set_force_sum_reduction_for_comms or an fp16 reduce with a factor set).
    if (o.gradient_divide_factor) {
      Tensor q = empty_tensor(b, rs_input.meta(), MemCategory::kReduceScatter, rs,
                               name + " reduce_scatter_input / factor");
      OpCall div = kernel(OpKind::kScale, name + " divide (world size 1)", {rs_input.ref()},
                          {q.ref()});
      div.flops = static_cast<double>(row);
      ScalarArgs{1.0 / *o.gradient_divide_factor}.encode(div);
      b.launch(rs, div);
      ops::copy_into(b, rs, out, q, name + " reduce_scatter copy (world size 1)");
    } else {
      ops::copy_into(b, rs, out, rs_input, name + " reduce_scatter copy (world size 1)");
    }
  } else {
    CollectiveCall call;
    call.kind = CollectiveKind::kReduceScatter;
    call.op = o.factors.reduce_scatter_op;
    call.scale = o.factors.reduce_scatter_scale;
    call.name = name + " reduce_scatter";
    call.input = rs_input.ref();
    call.output = out.ref();
    b.collective(rs, call, rs_group);
  }
  EventId rs_event = b.record_event(rs);
  StreamRole post = rs;
  if (o.all_reduce_group && !o.all_reduce_grads) {  // NOTE [Partial reduce without all-reduce]
    if (o.partial_reduce_output) {
      res.partial_reduce_output = o.partial_reduce_output;
      ops::add_into(b, res.partial_reduce_output, out, name + " partial reduce accumulate", rs);
    } else {
      res.partial_reduce_output = out;
    }
    res.post_reduce_event = b.record_event(rs);
    res.reduce_scatter_input = BufferWithEvent{rs_input, rs_event};
    return res;
  }
  if (o.all_reduce_group && o.partial_reduce_output)
    ops::add_into(b, out, o.partial_reduce_output, name + " add partial reduce", rs);
  if (o.all_reduce_group) {
    const StreamRole ar = StreamRole::kAllReduce;
    b.wait_stream(ar, rs);
    CollectiveCall arc;
    arc.kind = CollectiveKind::kAllReduce;
    arc.op = o.factors.all_reduce_op;
    arc.name = name + " all_reduce";
    arc.input = out.ref();
    arc.output = out.ref();
    b.collective(ar, arc, *o.all_reduce_group);
    res.all_reduce_input = BufferWithEvent{out, b.record_event(ar)};
    post = ar;
  }
  // ---- post-reduce stream: post-divide, cast back, view out / accumulate, offload ----
  if (o.factors.post != 1.0)
    ops::scale_inplace(b, post, out, 1.0 / o.factors.post, name + " postdivide");
  if (cast_after)
    out = ops::cast(b, post, out, params[0]->orig_dtype(), MemCategory::kShardedGrad,
                    name + " grad cast");
  const DType gd = out.dtype();
  uint64_t off = 0;
  for (FSDPParam* p : params) {
    Tensor view = out.view({gd, p->sharded_shape()}, off);
    off += static_cast<uint64_t>(p->padded_sharded_numel()) * dtype_size(gd);
    Tensor& grad = p->sharded_grad();
    const std::string gname = p->param().fqn + " sharded grad";
    // NOTE [Pageable offload]: FSDP2's foreach_reduce copies each offloaded gradient to the
    // host with non_blocking = pin_memory and not to_accumulate_grad, recording an event only
    // for a non-blocking copy (waited in finalize_backward). With pin_memory=False the copy is
    // blocking: the host waits for it (and everything before it on the post-reduce stream)
    // before it issues anything more, and the copy runs at the pageable bandwidth (the cost
    // model's fsdp.cpu_offload.pin_memory). An accumulating copy stays non-blocking here, with
    // the add launched on the post-reduce stream (docs/fsdp2-correspondence.md).
    if (p->offload()) {
      Buffer hb = b.allocate_host(view.nbytes(), MemCategory::kShardedGrad, gname + " (D2H)");
      Tensor host = adopt_buffer(b, hb, view.meta());
      ops::copy_into(b, post, host, view, gname + " D2H");
      if (!p->pin_memory())
        b.synchronize(b.record_event(post));
      else if (!grad)
        res.grad_offload_events.push_back(b.record_event(post));
      view = host;
    }
    if (grad) {
      Tensor g = grad;
      ops::add_into(b, g, view, gname + " accumulate", post);
    } else {
      grad = view;
    }
  }
  res.post_reduce_event = b.record_event(post);
  res.reduce_scatter_input = BufferWithEvent{rs_input, rs_event};
  return res;
}

}  // namespace fullshard
