#pragma once
// Connecting the members of one group: an arrival barrier in the store (so that a member that
// never comes fails the others within the timeout; gloo's own connectFullMesh reads some keys
// with the store's fixed 30 s default), then gloo's connectFullMesh under a PrefixStore.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
namespace transport {
class Device;
}
}  // namespace gloo

namespace fullshard::gloo_backend {

struct Connection {
  std::shared_ptr<::gloo::Context> context;
  // Per group rank: the address that member published for its connection to this rank, as
  // gloo prints it in errors ("[127.0.0.1]:41234$3"); empty for this rank or when unknown.
  std::vector<std::string> peer_addresses;
};

// Every member calls this with the same `prefix` (unique per group instance in `store`).
// Throws TransportFailure (ring.h) naming the first member that did not arrive, or what gloo
// said.
Connection connect_group(::gloo::rendezvous::Store& store, const std::string& prefix,
                         std::shared_ptr<::gloo::transport::Device> device, int rank, int size,
                         std::chrono::milliseconds timeout);

// A view of `store` whose keys all start with `prefix` (gloo's PrefixStore) that keeps `store`
// alive for as long as it lives (a process group holds its store by shared_ptr).
std::shared_ptr<::gloo::rendezvous::Store> make_prefix_store(
    const std::string& prefix, std::shared_ptr<::gloo::rendezvous::Store> store);

// NOTE [FileStore across threads]: gloo's FileStore::set appends every key's path to a
// std::vector (keyFilePaths_) without a lock; its get, wait and check only read files. A CPU
// rank builds the groups of its streams on those streams' threads at once (NOTE [Rendezvous
// outside the lock] in backends/cpu/cpu_communicator.cc), so two sets raced on that vector and
// corrupted the heap ("double free", "malloc(): unaligned tcache chunk"; 4 threads x 3,000 sets
// on a bare FileStore abort 2 runs in 3). The file store a worker uses serialises set; waits
// stay unlocked, so a thread waiting for a peer's key never holds up another thread's set.
std::shared_ptr<::gloo::rendezvous::Store> make_file_store(const std::string& dir);

// The group rank whose address appears in a gloo message, or -1.
int peer_named_in(const std::string& gloo_message, const std::vector<std::string>& peer_addresses);

}  // namespace fullshard::gloo_backend
