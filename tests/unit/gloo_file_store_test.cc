// The file rendezvous store a worker uses (FULLSHARD_STORE_DIR): several threads of one process
// set and wait on it at once, as a CPU rank's streams do when they build their groups
// (NOTE [FileStore across threads] in backends/gloo/rendezvous.h).
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/store.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "backends/gloo/rendezvous.h"

namespace fullshard::gloo_test {
namespace {

std::string fresh_dir() {
  std::string t = (std::filesystem::temp_directory_path() / "fullshard-filestore-XXXXXX").string();
  return mkdtemp(t.data());
}

// gloo's bare FileStore aborts with "double free or corruption" in about 2 runs of 3 of this
// (its set appends to an unguarded vector); the worker's store serialises set. Each thread
// also waits for a key the next thread sets, so waits run beside sets, unlocked.
TEST(GlooFileStore, ThreadsSetAndWaitAtOnce) {
  const std::string dir = fresh_dir();
  auto store = gloo_backend::make_file_store(dir);
  constexpr int kThreads = 4, kKeys = 1500;
  auto key = [](int t, int i) { return std::to_string(t) + "/" + std::to_string(i); };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeys; ++i) store->set(key(t, i), {static_cast<char>(t), 'x'});
      store->wait({key((t + 1) % kThreads, kKeys - 1)}, std::chrono::seconds(60));
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kKeys; i += 97)
      EXPECT_EQ(store->get(key(t, i)), (std::vector<char>{static_cast<char>(t), 'x'}))
          << key(t, i);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fullshard::gloo_test
