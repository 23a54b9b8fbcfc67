#pragma once
// How the members of one process group agree on an ncclUniqueId: group rank 0 creates it
// (ncclGetUniqueId) and publishes its 128 bytes in the rendezvous store the CPU backend uses
// (gloo::rendezvous::Store: FileStore across processes, HashStore across threads); the others
// wait for the key and read it.
//
// NOTE [Unique id keys]: the key is "nccl/<instance>/<group key>#<generation>/unique_id": the
// group key lists the member ranks ("0,1,2,3"), so disjoint groups (HSDP's shard and replicate
// groups) never meet on one key; `instance` tells apart several communicators over the same
// ranks; `generation` counts constructions of the same (instance, group) by this rank on this
// store, so a second communicator over a group (a new backend on the same store, in tests)
// never reads the previous one's id. Members construct in the same order, as for Gloo (NOTE
// [Rendezvous generations] in backends/gloo/process_group.cc).
#include <chrono>
#include <memory>
#include <string>

#include <nccl.h>

#include "core/mesh/device_mesh.h"

namespace gloo::rendezvous {
class Store;
}

namespace fullshard::cuda {

std::string nccl_unique_id_key(const std::string& instance, const ProcessGroup& group,
                               int generation);

// The next generation for (store, global_rank, instance, group): 0, 1, 2, ...
int next_unique_id_generation(const std::shared_ptr<::gloo::rendezvous::Store>& store,
                              int global_rank, const std::string& instance,
                              const ProcessGroup& group);

// Root: stores `id` under `key`. Others: wait for `key` at most `timeout`, then read it.
// Throws gloo_backend::CollectiveError naming `who`, the key and the group's root rank when
// the id does not arrive in time or has the wrong size.
ncclUniqueId exchange_unique_id(::gloo::rendezvous::Store& store, const std::string& key,
                                bool is_root, const ncclUniqueId& root_id,
                                std::chrono::milliseconds timeout, const std::string& who,
                                int root_rank);

}  // namespace fullshard::cuda
