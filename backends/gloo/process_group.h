#pragma once
// Collectives over Gloo's TCP transport for one ProcessGroup (core/mesh/device_mesh.h):
// what the CPU backend's communication streams run. One GlooProcessGroup per group a rank
// belongs to; every member must construct it (rendezvous through the shared store).
//
// Buffers are raw host memory. Counts are elements of `dtype`. Reductions of bf16/fp16 are
// done in fp32 and rounded to nearest even per step (core/tensor/float_convert.h).
#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/mesh/device_mesh.h"
#include "core/runtime/op.h"
#include "core/tensor/dtype.h"

namespace gloo::rendezvous {
class Store;
}
namespace gloo::transport {
class Device;
}

namespace fullshard::gloo_backend {

// A collective that failed: a peer died or stalled past the timeout, or (debug mode) peers
// issued a different collective. what() names this rank, the peer(s) and the collective.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ProcessGroupOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Before every collective, exchange a fingerprint (kind, count, dtype, op, name) and fail
  // with a CollectiveError naming the differing rank, like TORCH_DISTRIBUTED_DEBUG=DETAIL.
  bool check_fingerprints = false;
};

class GlooProcessGroup {
 public:
  // `store`: shared rendezvous store (FileStore / HashStore); `global_rank` must be in
  // `group.ranks`. Connects a full mesh among the members (blocking until all arrive).
  GlooProcessGroup(std::shared_ptr<::gloo::rendezvous::Store> store,
                   std::shared_ptr<::gloo::transport::Device> device, const ProcessGroup& group,
                   int global_rank, ProcessGroupOptions options = {});
  ~GlooProcessGroup();
  GlooProcessGroup(const GlooProcessGroup&) = delete;
  GlooProcessGroup& operator=(const GlooProcessGroup&) = delete;

  int rank() const;  // index in the group
  int size() const;
  const ProcessGroup& group() const;

  // all_gather_into_tensor: `output` holds size() * count elements; this rank's input is
  // `input` (which may alias output + rank() * count, FSDP2's in-place all-gather).
  void all_gather(const void* input, void* output, size_t count, DType dtype, const std::string& name);
  // reduce_scatter_tensor: `input` holds size() * count elements; rank r receives the
  // reduction of every member's chunk r in `output` (count elements).
  // kAvg divides by size(); kPremulSum multiplies each input by `scale` first.
  void reduce_scatter(const void* input, void* output, size_t count, DType dtype, ReduceOp op,
                      double scale, const std::string& name);
  // In place over `count` elements.
  void all_reduce(void* buffer, size_t count, DType dtype, ReduceOp op, double scale,
                  const std::string& name);
  void broadcast(void* buffer, size_t count, DType dtype, int root, const std::string& name);
  void barrier(const std::string& name);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A TCP device on `hostname` (default loopback) for GlooProcessGroup.
std::shared_ptr<::gloo::transport::Device> make_tcp_device(const std::string& hostname = "127.0.0.1");

}  // namespace fullshard::gloo_backend
