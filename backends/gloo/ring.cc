#include "backends/gloo/ring.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>

#include "core/common/error.h"

namespace fullshard::gloo_backend {

using ::gloo::transport::UnboundBuffer;

TransportFailure::TransportFailure(int peer_, std::string action_, std::string gloo_message_)
    : std::runtime_error(action_ + " rank " + std::to_string(peer_) + ": " + gloo_message_),
      peer(peer_),
      action(std::move(action_)),
      gloo_message(std::move(gloo_message_)) {}

std::vector<Span> even_chunks(size_t count, int n) {
  std::vector<Span> out(n);
  const size_t base = count / n, extra = count % n;
  size_t off = 0;
  for (int i = 0; i < n; ++i) {
    out[i].offset = off;
    out[i].length = base + (static_cast<size_t>(i) < extra ? 1 : 0);
    off += out[i].length;
  }
  return out;
}

std::vector<Span> equal_chunks(size_t count, int n) {
  std::vector<Span> out(n);
  for (int i = 0; i < n; ++i) out[i] = {static_cast<size_t>(i) * count, count};
  return out;
}

std::vector<Span> to_bytes(const std::vector<Span>& elems, size_t element_size) {
  std::vector<Span> out(elems.size());
  for (size_t i = 0; i < elems.size(); ++i)
    out[i] = {elems[i].offset * element_size, elems[i].length * element_size};
  return out;
}

// ---------------------------------------------------------------------------------------------
// Link

// Our slots live apart from gloo's own algorithms' (whose prefixes are 0x01..0x08 in the top
// byte): top byte 0xF5, then 40 bits of collective sequence, then 16 bits of step.
constexpr uint64_t kSlotPrefix = 0xF5ull << 56;
constexpr uint64_t kSequenceMask = (1ull << 40) - 1;
constexpr uint64_t kStepsPerCollective = 1ull << 16;
// Point-to-point slots: top byte 0xF6, then 56 bits of tag.
constexpr uint64_t kP2PSlotPrefix = 0xF6ull << 56;
constexpr uint64_t kTagMask = (1ull << 56) - 1;

Link::Link(std::shared_ptr<::gloo::Context> context) : context_(std::move(context)) {}
Link::~Link() = default;

int Link::rank() const { return context_->rank; }
int Link::size() const { return context_->size; }

void Link::begin(std::chrono::steady_clock::time_point deadline) {
  deadline_ = deadline;
  slot_base_ = kSlotPrefix | ((sequence_ & kSequenceMask) << 16);
  ++sequence_;
  step_ = 0;
}

uint64_t Link::next_slot() {
  FULLSHARD_CHECK(step_ < kStepsPerCollective, "gloo: too many steps in one collective");
  return slot_base_ + step_++;
}

uint64_t Link::begin_p2p(std::chrono::steady_clock::time_point deadline, uint64_t tag) {
  FULLSHARD_CHECK(tag <= kTagMask, "gloo: a send / recv tag must be below 2^56");
  deadline_ = deadline;
  return kP2PSlotPrefix | tag;
}

std::chrono::milliseconds Link::remaining() const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline_ - std::chrono::steady_clock::now());
  // 0 and negative values mean "no timeout" / "the context's default" to parts of gloo: a wait
  // past the deadline still gets 1 ms, then fails.
  return std::max(left, std::chrono::milliseconds(1));
}

namespace {

// Runs a gloo call; whatever gloo throws (its Exception family, or EnforceNotMet, which is a
// plain std::exception) becomes a TransportFailure naming the peer.
template <class F>
auto guarded(int peer, const char* action, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ::gloo::Exception& e) {
    throw TransportFailure(peer, action, e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    throw TransportFailure(peer, action, e.what());
  }
}

}  // namespace

std::unique_ptr<UnboundBuffer> Link::buffer(const void* ptr, size_t bytes) {
  return guarded(-1, "creating a buffer for",
                 [&] { return context_->createUnboundBuffer(const_cast<void*>(ptr), bytes); });
}

void Link::send(UnboundBuffer& buf, int peer, uint64_t slot, size_t offset, size_t bytes) {
  guarded(peer, "sending to", [&] { buf.send(peer, slot, offset, bytes); });
}

void Link::recv(UnboundBuffer& buf, int peer, uint64_t slot, size_t offset, size_t bytes) {
  guarded(peer, "receiving from", [&] { buf.recv(peer, slot, offset, bytes); });
}

void Link::wait_send(UnboundBuffer& buf, int peer) {
  if (!guarded(peer, "sending to", [&] { return buf.waitSend(nullptr, remaining()); }))
    throw TransportFailure(peer, "sending to", "send aborted");
}

void Link::wait_recv(UnboundBuffer& buf, int peer) {
  if (!guarded(peer, "receiving from", [&] { return buf.waitRecv(nullptr, remaining()); }))
    throw TransportFailure(peer, "receiving from", "receive aborted");
}

uint8_t* Link::scratch(int i, size_t bytes) {
  auto& s = scratch_[i];
  if (s.size() < bytes) s.resize(bytes);
  return s.data();
}

// ---------------------------------------------------------------------------------------------
// Schedules

void ring_all_gather(Link& link, uint8_t* buf, const std::vector<Span>& byte_chunks) {
  const int n = link.size(), r = link.rank();
  FULLSHARD_CHECK(static_cast<int>(byte_chunks.size()) == n, "one chunk per member");
  const Span& last = byte_chunks.back();
  const size_t total = last.offset + last.length;
  auto send_buf = link.buffer(buf, total);
  auto recv_buf = link.buffer(buf, total);
  // Step s: send the chunk received at step s-1 (own chunk at step 0) to the right, receive
  // the chunk of member r-s-1 from the left.
  for (int s = 0; s < n - 1; ++s) {
    const uint64_t slot = link.next_slot();
    const Span& out = byte_chunks[(r - s + n) % n];
    const Span& in = byte_chunks[(r - s - 1 + 2 * n) % n];
    if (in.length) link.recv(*recv_buf, link.left(), slot, in.offset, in.length);
    if (out.length) link.send(*send_buf, link.right(), slot, out.offset, out.length);
    if (in.length) link.wait_recv(*recv_buf, link.left());
    if (out.length) link.wait_send(*send_buf, link.right());
  }
}

void ring_reduce_scatter(Link& link, const ReduceSpec& spec, const uint8_t* in,
                         const std::vector<Span>& elem_chunks, uint8_t* out) {
  const int n = link.size(), r = link.rank();
  FULLSHARD_CHECK(static_cast<int>(elem_chunks.size()) == n, "one chunk per member");
  const size_t es = dtype_size(spec.dtype);
  size_t max_len = 0;
  for (const Span& c : elem_chunks) max_len = std::max(max_len, c.length);
  uint8_t* partial = link.scratch(0, max_len * es);   // what goes right
  uint8_t* received = link.scratch(1, max_len * es);  // what came from the left
  auto recv_buf = link.buffer(received, max_len * es);
  auto send_partial = link.buffer(partial, max_len * es);
  const uint8_t* input_end = in + (elem_chunks.back().offset + elem_chunks.back().length) * es;
  std::unique_ptr<UnboundBuffer> send_input;  // step 0 sends its input as is when it can
  // Step s sends the partial of chunk r-s-1 and receives the partial of chunk r-s-2, which it
  // combines with its own input; the last step (s = n-2) receives chunk r and writes `out`.
  for (int s = 0; s < n - 1; ++s) {
    const uint64_t slot = link.next_slot();
    const int send_idx = (r - s - 1 + 2 * n) % n;
    const int recv_idx = (r - s - 2 + 2 * n) % n;
    const Span& sc = elem_chunks[send_idx];
    const Span& rc = elem_chunks[recv_idx];
    UnboundBuffer* sb = send_partial.get();
    size_t send_offset = 0;
    if (s == 0 && sc.length) {
      if (first_step_is_identity(spec)) {
        if (!send_input) send_input = link.buffer(in, input_end - in);
        sb = send_input.get();
        send_offset = sc.offset * es;
      } else {
        reduce_first(spec, partial, in + sc.offset * es, sc.length, /*last=*/false);
      }
    }
    if (rc.length) link.recv(*recv_buf, link.left(), slot, 0, rc.length * es);
    if (sc.length) link.send(*sb, link.right(), slot, send_offset, sc.length * es);
    if (rc.length) link.wait_recv(*recv_buf, link.left());
    if (sc.length) link.wait_send(*sb, link.right());
    if (rc.length == 0) continue;
    const bool last = s == n - 2;
    reduce_step(spec, last ? out : partial, received, in + rc.offset * es, rc.length, last);
  }
}

void direct_broadcast(Link& link, uint8_t* buf, size_t bytes, int root) {
  const int n = link.size(), r = link.rank();
  const uint64_t slot = link.next_slot();
  if (r != root) {
    auto b = link.buffer(buf, bytes);
    link.recv(*b, root, slot, 0, bytes);
    link.wait_recv(*b, root);
    return;
  }
  // One buffer per destination, so that a failed wait names its peer.
  std::vector<std::unique_ptr<UnboundBuffer>> bufs(n);
  for (int p = 0; p < n; ++p) {
    if (p == root) continue;
    bufs[p] = link.buffer(buf, bytes);
    link.send(*bufs[p], p, slot, 0, bytes);
  }
  for (int p = 0; p < n; ++p)
    if (p != root) link.wait_send(*bufs[p], p);
}

void direct_all_to_all(Link& link, const uint8_t* in, const std::vector<Span>& send, uint8_t* out,
                       const std::vector<Span>& recv) {
  const int n = link.size(), r = link.rank();
  FULLSHARD_CHECK(static_cast<int>(send.size()) == n && static_cast<int>(recv.size()) == n,
                  "one chunk per member");
  const uint64_t slot = link.next_slot();
  // One buffer per peer and direction, so that a failed wait names its peer.
  std::vector<std::unique_ptr<UnboundBuffer>> sb(n), rb(n);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    if (recv[p].length) {
      rb[p] = link.buffer(out + recv[p].offset, recv[p].length);
      link.recv(*rb[p], p, slot, 0, recv[p].length);
    }
    if (send[p].length) {
      sb[p] = link.buffer(in + send[p].offset, send[p].length);
      link.send(*sb[p], p, slot, 0, send[p].length);
    }
  }
  for (int p = 0; p < n; ++p) {
    if (rb[p]) link.wait_recv(*rb[p], p);
    if (sb[p]) link.wait_send(*sb[p], p);
  }
}

}  // namespace fullshard::gloo_backend
