#pragma once
// Collectives over Gloo's TCP transport for one ProcessGroup (core/mesh/device_mesh.h):
// what the CPU backend's communication streams run. One GlooProcessGroup per group a rank
// belongs to; every member must construct it (rendezvous through the shared store).
//
// Buffers are raw host memory. Counts are elements of `dtype`. Reductions of bf16/fp16 are
// done in fp32 and rounded to nearest even per step (core/tensor/float_convert.h); the order
// of each reduction is fixed (see reduce_kernels.h and docs/gloo-backend.md), so results are
// deterministic and identical on every member.
//
// NOTE [Gloo threading rule]: each GlooProcessGroup owns its own gloo context (its own TCP
// connections), so different GlooProcessGroups, of one rank or of several ranks in one
// process, may run collectives concurrently from different threads. One GlooProcessGroup
// must be used by one thread at a time: a concurrent call throws CollectiveError instead of
// interleaving. Members must issue a group's collectives in the same order. For two streams
// that run collectives over the same ranks concurrently, construct one GlooProcessGroup per
// (group, stream), e.g. with `options.instance` set to the stream's name. Constructions of
// the same (group, instance) on one store are matched by their order (generation counter),
// so every member must construct them in the same order.
//
// Errors: any failure (a peer died, a timeout, a mismatch found by check_fingerprints) throws
// CollectiveError; no gloo exception escapes. After a transport failure the group is broken:
// later calls throw CollectiveError at once, naming the first failure. Validation of the
// arguments (dtype not reducible, root out of range) throws InternalError (FULLSHARD_CHECK).
#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

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
  // End to end, per collective (fingerprint exchange included) and for the construction's
  // rendezvous. Must be positive.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Before every collective, exchange a fingerprint (kind, count, dtype, op, name) and fail
  // with a CollectiveError naming the differing rank, like TORCH_DISTRIBUTED_DEBUG=DETAIL.
  bool check_fingerprints = false;
  // Tells apart several GlooProcessGroups over the same group (e.g. one per stream); every
  // member must pass the same string. Part of the rendezvous prefix in the store.
  std::string instance;
};

class GlooProcessGroup {
 public:
  // `store`: shared rendezvous store (FileStore / HashStore); `global_rank` must be in
  // `group.ranks`. Connects a full mesh among the members (blocking until all arrive, at most
  // options.timeout; then CollectiveError naming the first member that did not come).
  // A group of one needs no store nor device (both may be null) and never touches the network.
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
  void all_gather(const void* input, void* output, size_t count, DType dtype,
                  const std::string& name);
  // reduce_scatter_tensor: `input` holds size() * count elements; rank r receives the
  // reduction of every member's chunk r in `output` (count elements).
  // kAvg divides by size(); kPremulSum multiplies each input by `scale` first. Reductions take
  // fp32, bf16 and fp16; all_gather and broadcast take every dtype. `output` may alias
  // input + rank() * count.
  void reduce_scatter(const void* input, void* output, size_t count, DType dtype, ReduceOp op,
                      double scale, const std::string& name);
  // In place over `count` elements.
  void all_reduce(void* buffer, size_t count, DType dtype, ReduceOp op, double scale,
                  const std::string& name);
  // `root` is a group rank (an index into group().ranks), not a global rank.
  void broadcast(void* buffer, size_t count, DType dtype, int root, const std::string& name);
  void barrier(const std::string& name);
  // all_to_all_single with split sizes: send_counts[j] elements of `input` (the chunks back to
  // back in group order) go to member j, and recv_counts[j] elements from member j land in
  // `output` (likewise). Counts must agree pairwise across members; `input` and `output` must
  // not overlap. Every dtype.
  void all_to_all(const void* input, const std::vector<size_t>& send_counts, void* output,
                  const std::vector<size_t>& recv_counts, DType dtype, const std::string& name);

  // NOTE [Gloo send / recv]: point-to-point, as ProcessGroupGloo's send / recv: `count`
  // elements go from this rank to member `dst` (a group rank), which receives them with recv()
  // from member `src` with the same `tag`. Gloo's unbound buffers pair a send with the recv of
  // the same (peer, slot), the slot made from the tag (apart from the collectives' slots), and
  // pairs of one (peer, tag) in issue order, so only the two members take part and the others
  // may run other work meanwhile. A send returns once its bytes were handed to the peer (gloo
  // waits for the recv to be posted). No fingerprint exchange (check_fingerprints needs every
  // member); every dtype; tags below 2^56.
  void send(const void* buffer, size_t count, DType dtype, int dst, uint64_t tag,
            const std::string& name);
  void recv(void* buffer, size_t count, DType dtype, int src, uint64_t tag,
            const std::string& name);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A TCP device on `hostname` (default loopback) for GlooProcessGroup.
std::shared_ptr<::gloo::transport::Device> make_tcp_device(
    const std::string& hostname = "127.0.0.1");

}  // namespace fullshard::gloo_backend
