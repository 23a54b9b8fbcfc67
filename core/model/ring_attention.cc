#include "core/model/ring_attention.h"

#include <optional>
#include <utility>
#include <vector>

#include "core/common/error.h"
#include "core/model/op_util.h"
#include "core/runtime/attention_args.h"
#include "core/runtime/context_parallel_args.h"
#include "core/runtime/copy_args.h"
#include "core/runtime/cp_layout.h"
#include "core/runtime/tensor_parallel_args.h"

// NOTE [Ring attention op sequence]: what PyTorch runs for one SDPA call under
// context_parallel (_attention.py at pytorch/pytorch@09b101c5, read for this; torchtitan
// pytorch/torchtitan@69cf2075 sets the rotate method), op by op:
// forward  key / value .contiguous() (torchtitan passes transposed views: two copies, here of
//          the same [B, L, Hkv*hd] layout); cp rounds (NOTE [Ring attention rounds]): before
//          round i > 0 the rotater's next buffer, before round i < cp - 1 torch.cat of the
//          round's key and value (a new buffer each round) handed to exchange_buffers; the
//          round's flash SDPA (a ring kAttention: causal, first half of K / V, or second half of
//          the queries); _SDPAMerger.step: the block's output .to(float32) (a copy unless fp32)
//          and, after the first round, the merge (kSdpaMerge) into new fp32 out / lse; at the
//          end out.to(dtype). Autograd saves q, k, v, O and the merged lse, as for one flash op.
// backward zeros_like(q / k / v, float32); key / value .contiguous(); per round the K / V
//          exchange again (for "allgather" one all-gather of the saved K / V), the round's flash
//          backward (the second half of lse .contiguous(): a copy), grad_key / grad_value: the
//          zeros in round 0, afterwards the buffer the dK / dV rotater received, += or
//          _partial_update (an add into a half, then torch.cat: a new tensor); the cat of both
//          in fp32 sent to the next rank by an all-to-all permute every round (whatever the
//          rotate method: PyTorch's dkv_rotater is always _AllToAllRotater); grad_query += or
//          _partial_update; at the end grad_query.to(dtype) and the last received dK / dV
//          .to(dtype), of which dK and dV are views.
// Exchanges run on the cp group's stream (StreamRole::kContextParallel: ProcessGroupNCCL's
// stream of the cp group) after the compute that made the buffer; the compute stream waits for
// them at next_buffer (wait_tensor). Send buffers stay allocated until then (c10d keeps a
// collective's tensors until its work is waited).

namespace fullshard::ops::cp {
using namespace detail;  // NOLINT: make_op, result, kCompute (op_util.h)

namespace {

constexpr StreamRole kCp = StreamRole::kContextParallel;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// _AllGatherRotater / _AllToAllRotater: exchange_buffers and next_buffer.
class Rotater {
 public:
  Rotater(Backend& b, const ContextParallel& cp, CpRotateMethod method, std::string name)
      : b_(b), cp_(cp), method_(method), name_(std::move(name)) {}

  // exchange_buffers(buf): all-to-all the buffer to the next cp rank, or all-gather it on the
  // first call (later calls only advance the chunk index).
  void exchange(const Tensor& buf) {
    ++calls_;
    const int n = cp_.degree;
    if (method_ == CpRotateMethod::kAllGather && gathered_) return;
    const int64_t numel = buf.numel();
    CollectiveCall call;
    call.input = buf.ref();
    Tensor out;
    if (method_ == CpRotateMethod::kAllGather) {
      out = empty_tensor(b_, {buf.dtype(), {n * numel}}, MemCategory::kTemporary, kCompute,
                          name_ + " all_gather buffer");
      call.kind = CollectiveKind::kAllGather;
      call.name = name_ + " all_gather(kv)";
    } else {
      out = empty_tensor(b_, buf.meta(), MemCategory::kTemporary, kCompute, name_ + " recv");
      call.kind = CollectiveKind::kAllToAll;
      call.name = name_ + " all_to_all(permute)";
      call.send_numels.assign(static_cast<size_t>(n), 0);
      call.recv_numels.assign(static_cast<size_t>(n), 0);
      call.send_numels[static_cast<size_t>((cp_.index + 1) % n)] = numel;
      call.recv_numels[static_cast<size_t>((cp_.index + n - 1) % n)] = numel;
    }
    call.output = out.ref();
    b_.wait_stream(kCp, kCompute);  // the buffer is computed
    b_.collective(kCp, call, cp_.group);
    FULLSHARD_CHECK(!pending_, name_ + ": an exchange before the previous one was waited");
    pending_ = Pending{buf, out, b_.record_event(kCp)};
    if (method_ == CpRotateMethod::kAllGather) gathered_ = true;
  }

  // next_buffer(): the compute stream waits for the exchange; the send buffer is released.
  Tensor next() {
    if (pending_) {
      b_.wait_event(kCompute, pending_->done);
      received_ = std::move(pending_->out);
      pending_.reset();
    }
    FULLSHARD_CHECK(static_cast<bool>(received_), name_ + ": next buffer without an exchange");
    if (method_ == CpRotateMethod::kAllToAll) {
      Tensor r = std::move(received_);
      received_ = Tensor();
      return r;
    }
    const int n = cp_.degree;
    const int64_t chunk = received_.numel() / n;
    const int64_t idx = ((cp_.index - calls_) % n + n) % n;
    return received_.view({received_.dtype(), {chunk}},
                          static_cast<uint64_t>(idx * chunk) * dtype_size(received_.dtype()));
  }

 private:
  struct Pending {
    Tensor send, out;
    EventId done = 0;
  };
  Backend& b_;
  const ContextParallel& cp_;
  CpRotateMethod method_;
  std::string name_;
  int calls_ = 0;
  bool gathered_ = false;
  std::optional<Pending> pending_;
  Tensor received_;  // the all-to-all's output until next(); the whole all-gather output
};

// torch.cat([a.flatten(), b.flatten()]) into a new buffer of a's dtype.
Tensor cat2(Backend& b, const Tensor& a, const Tensor& c, const std::string& name) {
  Tensor out = empty_tensor(b, {a.dtype(), {a.numel() + c.numel()}}, MemCategory::kTemporary,
                             kCompute, name);
  CopyArgs args;
  args.rows = 1;
  b.launch(kCompute, make_op(OpKind::kCopy, name, {a.ref(), c.ref()}, {out.ref()}, 0, args));
  return out;
}

// A copy of `t` (x.contiguous() of a view, x.to(dtype)).
Tensor copy_of(Backend& b, const Tensor& t, DType dt, MemCategory cat, const std::string& name) {
  return cast(b, kCompute, t, dt, cat, name);
}

// The views of one round's operands (NOTE [Ring attention rounds]): `rows` of a [B, L, W]
// tensor starting at row `begin` of each batch (strided when rows < L and B > 1; the kernel
// reads the batch stride from AttentionArgs).
Tensor rows_view(const Tensor& t, int64_t batch, int64_t begin, int64_t rows) {
  const int64_t width = t.numel() / (batch * t.shape()[1]);
  return t.view({t.dtype(), {batch, rows, width}},
                static_cast<uint64_t>(begin * width) * dtype_size(t.dtype()));
}

AttentionArgs round_args(const AttentionShape& s, const CpRound& rd) {
  AttentionArgs a;
  a.batch = s.batch, a.seq = rd.q_len, a.heads = s.heads, a.kv_heads = s.kv_heads;
  a.head_dim = s.head_dim, a.packed = false, a.lse_len = rd.q_len;
  a.kv_seq = rd.kv_len, a.causal = rd.causal, a.q_batch_rows = s.seq, a.kv_batch_rows = s.seq;
  return a;
}

// FLOPs of a round: half of the q x kv scores when causal, all of them otherwise.
double round_flops(const AttentionShape& s, const CpRound& rd) {
  const double pairs = static_cast<double>(rd.q_len) * static_cast<double>(rd.kv_len);
  return (rd.causal ? 2.0 : 4.0) * s.batch * s.heads * pairs * s.head_dim;
}

struct Forward {
  Tensor out, lse;  // O [B, L, H, hd] in q's dtype, the merged lse [B, H, L] fp32
};

Forward ring_forward(Backend& b, const Tensor& q, const Tensor& k, const Tensor& v,
                     const AttentionShape& s, const ContextParallel& cp, const std::string& name) {
  const int n = cp.degree, r = cp.index;
  const int64_t B = s.batch, L = s.seq, H = s.heads, hd = s.head_dim;
  const DType dt = q.dtype();
  FULLSHARD_CHECK(L % 2 == 0, name + ": a cp shard holds two chunks (even local length)");
  const TensorMeta kv_meta = k.meta();
  const uint64_t kv_bytes = kv_meta.nbytes();
  Tensor key = copy_of(b, k, dt, MemCategory::kTemporary, name + " key.contiguous");
  Tensor value = copy_of(b, v, dt, MemCategory::kTemporary, name + " value.contiguous");
  Rotater rot(b, cp, cp.rotate, name);
  Tensor acc_out, acc_lse, kv_buf;
  for (int i = 0; i < n; ++i) {
    if (i > 0) {
      kv_buf = rot.next();
      key = kv_buf.view(kv_meta, 0);
      value = kv_buf.view(kv_meta, kv_bytes);
    }
    if (i < n - 1) rot.exchange(cat2(b, key, value, name + " cat(kv)"));
    const CpRound rd = cp_round(i, r, n, L);
    Tensor o = empty_tensor(b, {dt, {B, rd.q_len, H * hd}}, MemCategory::kTemporary, kCompute,
                             name + " round out");
    Tensor lse = empty_tensor(b, {DType::kFloat32, {B, H, rd.q_len}}, MemCategory::kTemporary,
                               kCompute, name + " round logsumexp");
    b.launch(kCompute, make_op(OpKind::kAttention, name + " round",
                               {rows_view(q, B, rd.q_begin, rd.q_len).ref(),
                                rows_view(key, B, rd.kv_begin, rd.kv_len).ref(),
                                rows_view(value, B, rd.kv_begin, rd.kv_len).ref()},
                               {o.ref(), lse.ref()}, round_flops(s, rd), round_args(s, rd)));
    // _SDPAMerger.step: the block in fp32, then the merge (the first block is the running one).
    Tensor o32 = dt == DType::kFloat32 ? o
                                       : copy_of(b, o, DType::kFloat32, MemCategory::kTemporary,
                                                 name + " round out.float");
    o = Tensor();
    if (i == 0) {
      acc_out = std::move(o32);
      acc_lse = std::move(lse);
      continue;
    }
    Tensor new_out = empty_tensor(b, {DType::kFloat32, {B, L, H * hd}}, MemCategory::kTemporary,
                                   kCompute, name + " merged out");
    Tensor new_lse = empty_tensor(b, {DType::kFloat32, {B, H, L}}, MemCategory::kTemporary,
                                   kCompute, name + " merged logsumexp");
    {
      // The eager merge's scratch: (out - block_out), and sigmoid(block_lse - lse).
      Tensor diff =
          empty_tensor(b, o32.meta(), MemCategory::kTemporary, kCompute, name + " merge scratch");
      Tensor weight =
          empty_tensor(b, lse.meta(), MemCategory::kTemporary, kCompute, name + " merge weight");
      // Bytes: the eager kernels' (8 over the block's elements and 14 over its lse rows, 4 and
      // 4 more for a partial update's two cats), 3 FLOPs an element and 10 an lse row.
      const double e = static_cast<double>(o32.numel()) * 4,
                   l = static_cast<double>(lse.numel()) * 4;
      SdpaMergeArgs args;
      args.partial = rd.partial;
      OpCall op = make_op(OpKind::kSdpaMerge, name + " merge",
                          {acc_out.ref(), acc_lse.ref(), o32.ref(), lse.ref()},
                          {new_out.ref(), new_lse.ref(), diff.ref(), weight.ref()},
                          3.0 * static_cast<double>(o32.numel()) + 10.0 * lse.numel(), args);
      op.bytes = rd.partial ? 12 * e + 18 * l : 8 * e + 14 * l;
      b.launch(kCompute, op);
    }
    acc_out = std::move(new_out);
    acc_lse = std::move(new_lse);
  }
  kv_buf = key = value = Tensor();
  Forward f;
  f.out = dt == DType::kFloat32
              ? acc_out
              : copy_of(b, acc_out, dt, MemCategory::kActivation, name + " out.to(dtype)");
  f.out = f.out.view({dt, {B, L, H, hd}});
  f.lse = acc_lse;
  return f;
}

// The flash backward's scratch (NOTE [Flash attention backward temporaries] in ops.cc) for a
// round of q_len queries and kv_len keys.
std::vector<Tensor> round_bwd_temps(Backend& b, const AttentionShape& s, const CpRound& rd,
                                    DType dt, const std::string& name) {
  std::vector<Tensor> t;
  const int64_t sr = round_up(rd.q_len, 128);
  t.push_back(empty_tensor(b, {DType::kFloat32, {s.batch, s.heads, sr}}, MemCategory::kTemporary,
                            kCompute, name + " softmax_d"));
  t.push_back(empty_tensor(b, {DType::kFloat32, {s.batch, sr, s.heads, round_up(s.head_dim, 32)}},
                            MemCategory::kTemporary, kCompute, name + " dq_accum"));
  if (s.kv_heads != s.heads)
    for (const char* w : {" dk_expanded", " dv_expanded"})
      t.push_back(empty_tensor(b, {dt, {s.batch, rd.kv_len, s.heads, s.head_dim}},
                                MemCategory::kTemporary, kCompute, name + w));
  return t;
}

// dst rows [begin, begin + src rows) of each batch += src.
void add_rows(Backend& b, const Tensor& dst, const Tensor& src, int64_t batch, int64_t begin,
              const std::string& name) {
  const int64_t rows = dst.shape()[1], n = src.shape()[1];
  const int64_t width = dst.numel() / (batch * rows);
  b.launch(kCompute,
           make_op(OpKind::kSeqRowsAdd, name, {dst.ref(), src.ref()}, {dst.ref()},
                   static_cast<double>(src.numel()), SeqRowsArgs{batch, rows, begin, n, width}));
}

// _partial_update(original, new, dim=seq, n_chunks=2, idx, add=True): the half += new, then
// torch.cat of the halves: a new tensor.
Tensor partial_update(Backend& b, const Tensor& original, const Tensor& update, int64_t batch,
                      int64_t begin, const std::string& name) {
  add_rows(b, original, update, batch, begin, name + " partial add");
  return copy_of(b, original, original.dtype(), MemCategory::kTemporary, name + " partial cat");
}

std::vector<Tensor> ring_backward(Backend& b, const Tensor& g, const Tensor& qs, const Tensor& ks,
                                  const Tensor& vs, const Tensor& out, const Tensor& lse,
                                  const AttentionShape& s, const ContextParallel& cp,
                                  const std::string& name) {
  const int n = cp.degree, r = cp.index;
  const int64_t B = s.batch, L = s.seq, H = s.heads, hd = s.head_dim, C = L / 2;
  const DType dt = qs.dtype();
  const std::string bn = name + " backward";
  const TensorMeta kv_meta = ks.meta(), kv32{DType::kFloat32, kv_meta.shape};
  const Tensor dout = g.view({g.dtype(), {B, L, H * hd}});
  const Tensor o = out.view({out.dtype(), {B, L, H * hd}});
  Tensor grad_q = empty_tensor(b, {DType::kFloat32, qs.shape()}, MemCategory::kTemporary, kCompute,
                                bn + " grad_query");
  Tensor grad_k = empty_tensor(b, kv32, MemCategory::kTemporary, kCompute, bn + " grad_key");
  Tensor grad_v = empty_tensor(b, kv32, MemCategory::kTemporary, kCompute, bn + " grad_value");
  fill_zero(b, kCompute, grad_q, bn + " zeros_like(query)");
  fill_zero(b, kCompute, grad_k, bn + " zeros_like(key)");
  fill_zero(b, kCompute, grad_v, bn + " zeros_like(value)");
  Tensor key = copy_of(b, ks, dt, MemCategory::kTemporary, bn + " key.contiguous");
  Tensor value = copy_of(b, vs, dt, MemCategory::kTemporary, bn + " value.contiguous");
  Rotater kv_rot(b, cp, cp.rotate, bn + " kv");
  Rotater dkv_rot(b, cp, CpRotateMethod::kAllToAll, bn + " dkv");
  Tensor kv_buf;
  const uint64_t kv_bytes = kv_meta.nbytes(), kv32_bytes = kv32.nbytes();
  for (int i = 0; i < n; ++i) {
    if (i > 0) {
      kv_buf = kv_rot.next();
      key = kv_buf.view(kv_meta, 0);
      value = kv_buf.view(kv_meta, kv_bytes);
    }
    if (i != n - 1) kv_rot.exchange(cat2(b, key, value, bn + " cat(kv)"));
    const CpRound rd = cp_round(i, r, n, L);
    Tensor lse_r = lse;
    if (rd.partial) {  // logsumexp.chunk(2, dim=seq)[1].contiguous()
      lse_r = empty_tensor(b, {DType::kFloat32, {B, H, C}}, MemCategory::kTemporary, kCompute,
                            bn + " logsumexp half");
      b.launch(kCompute,
               make_op(OpKind::kNarrowCopy, bn + " logsumexp half", {lse.ref()}, {lse_r.ref()}, 0,
                       NarrowCopyArgs{.n = C,
                                      .in_width = L,
                                      .in_offset = C,
                                      .out_width = C,
                                      .out_offset = 0,
                                      .scale = 1,
                                      .blocks = B * H}));
    }
    Tensor dq = empty_tensor(b, {dt, {B, rd.q_len, H * hd}}, MemCategory::kTemporary, kCompute,
                              bn + " round grad_q");
    Tensor dk = empty_tensor(b, {dt, {B, rd.kv_len, kv_meta.shape[2]}}, MemCategory::kTemporary,
                              kCompute, bn + " round grad_k");
    Tensor dv =
        empty_tensor(b, dk.meta(), MemCategory::kTemporary, kCompute, bn + " round grad_v");
    {
      std::vector<Tensor> temps = round_bwd_temps(b, s, rd, dt, bn);
      OpCall op =
          make_op(OpKind::kAttentionBackward, bn + " round",
                  {rows_view(dout, B, rd.q_begin, rd.q_len).ref(),
                   rows_view(qs, B, rd.q_begin, rd.q_len).ref(),
                   rows_view(key, B, rd.kv_begin, rd.kv_len).ref(),
                   rows_view(value, B, rd.kv_begin, rd.kv_len).ref(),
                   rows_view(o, B, rd.q_begin, rd.q_len).ref(), lse_r.ref()},
                  {dq.ref(), dk.ref(), dv.ref()}, 2.5 * round_flops(s, rd), round_args(s, rd));
      for (const Tensor& t : temps) op.outputs.push_back(t.ref());  // scratch after dq, dk, dv
      b.launch(kCompute, op);
    }
    lse_r = Tensor();
    if (i == 0) {
      add_rows(b, grad_k, dk, B, 0, bn + " grad_key +=");
      add_rows(b, grad_v, dv, B, 0, bn + " grad_value +=");
    } else {
      Tensor recv = dkv_rot.next();  // dK / dV of this round's K / V so far, from rank r - 1
      grad_k = recv.view(kv32, 0);
      grad_v = recv.view(kv32, kv32_bytes);
      recv = Tensor();
      if (rd.kv_len < L) {  // i <= r: the first half of K / V
        grad_k = partial_update(b, grad_k, dk, B, 0, bn + " grad_key");
        grad_v = partial_update(b, grad_v, dv, B, 0, bn + " grad_value");
      } else {
        add_rows(b, grad_k, dk, B, 0, bn + " grad_key +=");
        add_rows(b, grad_v, dv, B, 0, bn + " grad_value +=");
      }
    }
    dk = dv = Tensor();
    dkv_rot.exchange(cat2(b, grad_k, grad_v, bn + " cat(dkv)"));
    if (rd.partial)
      grad_q = partial_update(b, grad_q, dq, B, C, bn + " grad_query");
    else
      add_rows(b, grad_q, dq, B, 0, bn + " grad_query +=");
  }
  kv_buf = key = value = grad_k = grad_v = Tensor();
  Tensor dq_out = dt == DType::kFloat32
                      ? grad_q
                      : copy_of(b, grad_q, dt, MemCategory::kTemporary, bn + " grad_q.to(dtype)");
  grad_q = Tensor();
  Tensor last = dkv_rot.next();  // this rank's own dK / dV, back after cp hops
  Tensor dkv = dt == DType::kFloat32
                   ? last
                   : copy_of(b, last, dt, MemCategory::kTemporary, bn + " grad_kv.to(dtype)");
  last = Tensor();
  return {dq_out, dkv.view(kv_meta, 0), dkv.view(kv_meta, kv_bytes)};
}

}  // namespace

Value ring_attention(ExecContext& c, Value q, Value k, Value v, const AttentionShape& s,
                     const ContextParallel& cp, const std::string& name) {
  Backend& b = c.backend();
  FULLSHARD_CHECK(cp.enabled(), name + ": ring attention without a cp group");
  const bool saves = sac_saves(c, false);  // SDPA's outputs are in op-level SAC's save list
  Forward f;
  if (auto* cached = sac_cached(c, saves)) {
    f.out = (*cached)[0];
    f.lse = (*cached)[1];
  } else {
    f = ring_forward(b, q.t, k.t, v.t, s, cp, name);
    sac_store(c, saves, {f.out, f.lse});
  }
  const bool rg = q.requires_grad() || k.requires_grad() || v.requires_grad();
  Value out = result(c, f.out, rg);
  if (c.recording() && rg) {
    Tensor qs = q.t, ks = k.t, vs = v.t, o = f.out, lse = f.lse;
    c.record(Node{name,
                  {q.id, k.id, v.id},
                  {out.id},
                  [&b, qs, ks, vs, o, lse, s, cp, name](std::vector<Tensor>& g) {
                    return ring_backward(b, g[0], qs, ks, vs, o, lse, s, cp, name);
                  }});
  }
  return out;
}

}  // namespace fullshard::ops::cp
