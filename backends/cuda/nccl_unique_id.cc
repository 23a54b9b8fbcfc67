#include "backends/cuda/nccl_unique_id.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "backends/gloo/process_group.h"

namespace fullshard::cuda {

std::string nccl_unique_id_key(const std::string& instance, const ProcessGroup& group,
                               int generation) {
  return "nccl/" + instance + "/" + group.key() + "#" + std::to_string(generation) + "/unique_id";
}

int next_unique_id_generation(const std::shared_ptr<::gloo::rendezvous::Store>& store,
                              int global_rank, const std::string& instance,
                              const ProcessGroup& group) {
  struct Entry {
    std::weak_ptr<::gloo::rendezvous::Store> store;
    std::map<std::tuple<int, std::string, std::string>, int> counts;
  };
  static std::mutex mu;
  static std::vector<Entry> entries;
  std::lock_guard<std::mutex> lock(mu);
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [](const Entry& e) { return e.store.expired(); }),
                entries.end());
  const auto key = std::make_tuple(global_rank, instance, group.key());
  for (Entry& e : entries)
    if (e.store.lock() == store) return e.counts[key]++;
  entries.push_back(Entry{store, {}});
  return entries.back().counts[key]++;
}

ncclUniqueId exchange_unique_id(::gloo::rendezvous::Store& store, const std::string& key,
                                bool is_root, const ncclUniqueId& root_id,
                                std::chrono::milliseconds timeout, const std::string& who,
                                int root_rank) {
  if (is_root) {
    std::vector<char> bytes(sizeof(ncclUniqueId));
    std::memcpy(bytes.data(), &root_id, sizeof root_id);
    store.set(key, bytes);
    return root_id;
  }
  std::vector<char> bytes;
  try {
    store.wait({key}, timeout);
    bytes = store.get(key);
  } catch (const std::exception& e) {
    throw gloo_backend::CollectiveError(
        who + ": the NCCL unique id of rank " + std::to_string(root_rank) + " (store key '" + key +
        "') did not arrive within " + std::to_string(timeout.count()) + " ms: " + e.what());
  }
  if (bytes.size() != sizeof(ncclUniqueId))
    throw gloo_backend::CollectiveError(
        who + ": store key '" + key + "' holds " + std::to_string(bytes.size()) +
        " bytes, not an NCCL unique id (" + std::to_string(sizeof(ncclUniqueId)) +
        "); is the store shared with another job?");
  ncclUniqueId id;
  std::memcpy(&id, bytes.data(), sizeof id);
  return id;
}

}  // namespace fullshard::cuda
