#pragma once
// Collective schedules over one connected gloo context, written on gloo's UnboundBuffer
// send/recv so that every wait knows which peer it waits on (for error messages) and ends at
// the collective's deadline. Used by GlooProcessGroup; one Link is used by one thread at a time.
//
// Group ranks here are indices in the group (the gloo context's ranks), not global ranks.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/gloo/reduce_kernels.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace fullshard::gloo_backend {

// A send or receive that failed (a gloo exception, a timeout, a closed connection).
class TransportFailure : public std::runtime_error {
 public:
  // peer: the group rank exchanged with, -1 when unknown; action: "receiving from",
  // "sending to", ...; gloo_message: what gloo said.
  TransportFailure(int peer, std::string action, std::string gloo_message);
  int peer;
  std::string action;
  std::string gloo_message;
};

// A range of a buffer (elements or bytes, as the function taking it says).
struct Span {
  size_t offset = 0;
  size_t length = 0;
};

// `count` elements split over n chunks as evenly as possible: the first count % n chunks hold
// one element more (the all-reduce's chunks).
std::vector<Span> even_chunks(size_t count, int n);
// n chunks of `count` elements each, chunk i at i * count (reduce-scatter / all-gather layout).
std::vector<Span> equal_chunks(size_t count, int n);
// The same spans in bytes.
std::vector<Span> to_bytes(const std::vector<Span>& elems, size_t element_size);

class Link {
 public:
  explicit Link(std::shared_ptr<::gloo::Context> context);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int rank() const;
  int size() const;
  int left() const { return (rank() + size() - 1) % size(); }
  int right() const { return (rank() + 1) % size(); }

  // Starts one collective: a fresh range of slots (every member starts the same collectives in
  // the same order, so slots match), and every wait until the next begin() ends by `deadline`.
  void begin(std::chrono::steady_clock::time_point deadline);
  // The next slot of the current collective; every member takes slots in the same order.
  uint64_t next_slot();
  // A point-to-point transfer (NOTE [Gloo send / recv] in process_group.h): its waits end by
  // `deadline`; the collectives' sequence is not advanced. Returns the slot of `tag`.
  uint64_t begin_p2p(std::chrono::steady_clock::time_point deadline, uint64_t tag);

  std::unique_ptr<::gloo::transport::UnboundBuffer> buffer(const void* ptr, size_t bytes);
  void send(::gloo::transport::UnboundBuffer& buf, int peer, uint64_t slot, size_t offset,
            size_t bytes);
  void recv(::gloo::transport::UnboundBuffer& buf, int peer, uint64_t slot, size_t offset,
            size_t bytes);
  void wait_send(::gloo::transport::UnboundBuffer& buf, int peer);
  void wait_recv(::gloo::transport::UnboundBuffer& buf, int peer);

  // Scratch memory owned by the link (kept between collectives): i in {0, 1}.
  uint8_t* scratch(int i, size_t bytes);

 private:
  std::chrono::milliseconds remaining() const;

  std::shared_ptr<::gloo::Context> context_;
  std::chrono::steady_clock::time_point deadline_;
  uint64_t sequence_ = 0;
  uint64_t slot_base_ = 0;
  uint64_t step_ = 0;
  std::vector<uint8_t> scratch_[2];
};

// Ring all-gather in place: this rank's bytes are already at byte_chunks[rank()]; afterwards
// buf holds every member's chunk. Chunks may differ in size (0 too).
void ring_all_gather(Link& link, uint8_t* buf, const std::vector<Span>& byte_chunks);

// Ring reduce-scatter (reduce_kernels.h): element chunk c of the result is the reduction of
// every member's chunk c of `in`, visiting members c+1, c+2, ..., c+N-1, c (mod N); this rank's
// chunk rank() is written to `out`. `in` is not modified; `out` may alias
// in + chunks[rank()].offset but must not overlap the other chunks.
void ring_reduce_scatter(Link& link, const ReduceSpec& spec, const uint8_t* in,
                         const std::vector<Span>& elem_chunks, uint8_t* out);

// The root (a group rank) sends `bytes` of buf to every other member directly.
void direct_broadcast(Link& link, uint8_t* buf, size_t bytes, int root);

// All-to-all-v: bytes send[p] of `in` go to member p, which receives them at recv[rank()] of its
// `out`; every pair exchanges directly, all at once (as NCCL's grouped send / recv). This
// rank's own chunk is not touched (the caller copies it). `in` and `out` must not overlap.
void direct_all_to_all(Link& link, const uint8_t* in, const std::vector<Span>& send, uint8_t* out,
                       const std::vector<Span>& recv);

}  // namespace fullshard::gloo_backend
