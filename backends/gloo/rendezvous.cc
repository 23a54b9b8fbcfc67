#include "backends/gloo/rendezvous.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <system_error>
#include <utility>

#include "core/common/error.h"

#include "backends/gloo/ring.h"

namespace fullshard::gloo_backend {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  // A zero timeout means "wait forever" to gloo's FileStore.
  return std::max(left, std::chrono::milliseconds(1));
}

std::string arrival_key(int rank) { return "arrived/" + std::to_string(rank); }

}  // namespace

Connection connect_group(::gloo::rendezvous::Store& store, const std::string& prefix,
                         std::shared_ptr<::gloo::transport::Device> device, int rank, int size,
                         std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  ::gloo::rendezvous::PrefixStore ps(prefix, store);

  // 1. Arrival barrier, one member at a time so that a timeout names the member it waited on.
  try {
    ps.set(arrival_key(rank), std::vector<char>{1});
  } catch (const ::gloo::Exception& e) {
    throw TransportFailure(rank, "publishing the arrival of", e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    throw TransportFailure(rank, "publishing the arrival of", e.what());
  }
  for (int i = 0; i < size; ++i) {
    if (i == rank) continue;
    try {
      ps.wait({arrival_key(i)}, remaining(deadline));
    } catch (const ::gloo::Exception& e) {
      throw TransportFailure(i, "waiting for the arrival of",
                             "did not join within " + std::to_string(timeout.count()) +
                                 " ms (gloo: " + e.what() + ")");
    } catch (const ::gloo::EnforceNotMet& e) {
      throw TransportFailure(i, "waiting for the arrival of", e.what());
    }
  }

  // 2. Full mesh. Every member has published its arrival, so the keys connectFullMesh reads
  // are written promptly; its own waits and the pairs' connects use the context's timeout.
  Connection c;
  auto ctx = std::make_shared<::gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(remaining(deadline));
  try {
    ctx->connectFullMesh(ps, device);
  } catch (const ::gloo::Exception& e) {
    throw TransportFailure(-1, "connecting to", e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    throw TransportFailure(-1, "connecting to", e.what());
  } catch (const std::system_error& e) {
    throw TransportFailure(-1, "connecting to", e.what());
  }

  // 3. The addresses peers published for us, to name the peer in gloo's error messages. The
  // value under key "<i>" is member i's addresses for its pairs with every other member, in
  // rank order without i itself (gloo/rendezvous/context.cc). Best effort.
  c.peer_addresses.assign(size, "");
  for (int i = 0; i < size; ++i) {
    if (i == rank) continue;
    try {
      std::vector<char> all = ps.get(std::to_string(i));
      const size_t entry = all.size() / (size - 1);
      const size_t index = rank > i ? rank - 1 : rank;
      if (entry == 0 || (index + 1) * entry > all.size()) continue;
      std::vector<char> bytes(all.begin() + index * entry, all.begin() + (index + 1) * entry);
      c.peer_addresses[i] = ::gloo::transport::tcp::Address(bytes).str();
    } catch (const std::exception&) {
      c.peer_addresses[i].clear();
    }
  }
  c.context = std::move(ctx);
  return c;
}

int peer_named_in(const std::string& gloo_message, const std::vector<std::string>& peer_addresses) {
  for (size_t i = 0; i < peer_addresses.size(); ++i) {
    const std::string& a = peer_addresses[i];
    if (a.empty()) continue;
    size_t pos = gloo_message.find(a);
    // "[127.0.0.1]:4123$1" must not match "[127.0.0.1]:4123$12".
    while (pos != std::string::npos) {
      const size_t end = pos + a.size();
      if (end == gloo_message.size() ||
          !std::isdigit(static_cast<unsigned char>(gloo_message[end])))
        return static_cast<int>(i);
      pos = gloo_message.find(a, pos + 1);
    }
  }
  return -1;
}

namespace {

class OwningPrefixStore : public ::gloo::rendezvous::PrefixStore {
 public:
  OwningPrefixStore(const std::string& prefix, std::shared_ptr<::gloo::rendezvous::Store> s)
      : PrefixStore(prefix, *s), keep_(std::move(s)) {}

 private:
  std::shared_ptr<::gloo::rendezvous::Store> keep_;
};

// NOTE [FileStore across threads] (rendezvous.h).
class SerializedSetFileStore : public ::gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  void set(const std::string& key, const std::vector<char>& data) override {
    std::lock_guard<std::mutex> lock(set_mu_);
    FileStore::set(key, data);
  }

 private:
  std::mutex set_mu_;
};

}  // namespace

std::shared_ptr<::gloo::rendezvous::Store> make_file_store(const std::string& dir) {
  return std::make_shared<SerializedSetFileStore>(dir);
}

std::shared_ptr<::gloo::rendezvous::Store> make_prefix_store(
    const std::string& prefix, std::shared_ptr<::gloo::rendezvous::Store> store) {
  FULLSHARD_CHECK(store != nullptr, "make_prefix_store needs a store");
  return std::make_shared<OwningPrefixStore>(prefix, std::move(store));
}

}  // namespace fullshard::gloo_backend
