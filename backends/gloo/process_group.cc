#include "backends/gloo/process_group.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "backends/gloo/fingerprint.h"
#include "backends/gloo/reduce_kernels.h"
#include "backends/gloo/rendezvous.h"
#include "backends/gloo/ring.h"
#include "core/common/error.h"

namespace fullshard::gloo_backend {
namespace {

using Clock = std::chrono::steady_clock;

// NOTE [Rendezvous generations]: constructing a GlooProcessGroup for a (group, instance) that
// was already constructed on the same store must not read the previous rendezvous' keys. Each
// process counts constructions per (live store, global rank, prefix); members construct in the
// same order, so the n-th construction of every member meets under the same "#n" prefix.
// Stores are tracked by weak_ptr so that a new store at a dead store's address starts at 0.
class GenerationRegistry {
 public:
  int next(const std::shared_ptr<::gloo::rendezvous::Store>& store, int global_rank,
           const std::string& prefix) {
    std::lock_guard<std::mutex> lock(m_);
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                  [](const Entry& e) { return e.store.expired(); }),
                   entries_.end());
    for (Entry& e : entries_)
      if (e.store.lock() == store) return e.counts[{global_rank, prefix}]++;
    entries_.push_back(Entry{store, {}});
    return entries_.back().counts[{global_rank, prefix}]++;
  }

 private:
  struct Entry {
    std::weak_ptr<::gloo::rendezvous::Store> store;
    std::map<std::pair<int, std::string>, int> counts;
  };
  std::mutex m_;
  std::vector<Entry> entries_;
};

GenerationRegistry& generations() {
  static GenerationRegistry r;
  return r;
}

std::string ranks_text(const ProcessGroup& g) {
  // Appended piecewise: `"[" + g.key() + "]"` trips GCC 12's -Wrestrict false positive.
  std::string s(1, '[');
  s += g.key();
  s += ']';
  return s;
}

bool contains(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

}  // namespace

struct GlooProcessGroup::Impl {
  ProcessGroup group;
  int global_rank = 0;
  int rank = 0;
  ProcessGroupOptions options;
  std::shared_ptr<::gloo::Context> context;  // null for a group of one
  std::unique_ptr<Link> link;
  std::vector<std::string> peer_addresses;
  std::string broken;              // the first transport failure; the group is unusable after it
  std::mutex in_use;               // detects concurrent use (NOTE [Gloo threading rule])
  Clock::time_point p2p_deadline;  // the running send / recv's

  std::string who() const {
    return "gloo: rank " + std::to_string(global_rank) + " (member " + std::to_string(rank) +
           " of group '" + group.name + "' " + ranks_text(group) + ")";
  }

  int global(int group_rank) const {
    return group_rank >= 0 && group_rank < group.size() ? group.ranks[group_rank] : -1;
  }

  // What went wrong, in words, from a failed send/recv.
  std::string explain(const TransportFailure& f) const {
    const std::string& msg = f.gloo_message;
    const int named = peer_named_in(msg, peer_addresses);
    const int peer = named >= 0 ? named : f.peer;
    const std::string peer_text =
        peer >= 0 ? "rank " + std::to_string(global(peer)) : std::string("a peer");
    std::string what;
    if (contains(msg, "Timed out")) {
      what = "timed out after " + std::to_string(options.timeout.count()) + " ms " + f.action +
             " " + peer_text + " (it stalled, or is waiting on another member)";
    } else if (contains(msg, "closed by peer") || contains(msg, "Connection reset") ||
               contains(msg, "Read error") || contains(msg, "writev") ||
               contains(msg, "Socket unexpectedly closed")) {
      what = "the connection to " + peer_text +
             " was closed (that process died, or gave up on this collective)";
    } else if (contains(msg, "Application timeout caused pair closure")) {
      what = "an earlier wait of this rank in this collective timed out; " + f.action + " " +
             peer_text + " was cancelled";
    } else {
      what = f.action + " " + peer_text + " failed";
    }
    return what + "; gloo: " + msg;
  }

  [[noreturn]] void fail(const CallInfo& call, const std::string& why) {
    std::string m = who() + ": " + describe(call) + " failed: " + why;
    broken = m;
    throw CollectiveError(m);
  }

  void check_fingerprints(const CallInfo& call, Clock::time_point deadline) {
    std::vector<Fingerprint> all(group.size());
    all[rank] = make_fingerprint(call);
    link->begin(deadline);
    ring_all_gather(*link, reinterpret_cast<uint8_t*>(all.data()),
                    to_bytes(equal_chunks(1, group.size()), sizeof(Fingerprint)));
    const int bad = first_mismatch(all);
    if (bad < 0) return;
    // Every member saw the same fingerprints and throws the same mismatch; the transport is
    // intact, so the group stays usable.
    throw CollectiveError(who() + ": collective mismatch at " + describe(call) + ": rank " +
                          std::to_string(global(bad)) + " issued " +
                          describe(from_fingerprint(all[bad])) + " while rank " +
                          std::to_string(global(0)) + " issued " +
                          describe(from_fingerprint(all[0])));
  }

  // Runs one collective: concurrency and broken-group checks, the fingerprint exchange, the
  // deadline, and the translation of every gloo failure into CollectiveError.
  // `collective`: false for send / recv (no fingerprint exchange, no Link::begin: the body
  // starts its transfer with Link::begin_p2p).
  template <class Body>
  void run(const CallInfo& call, Body&& body, bool collective = true) {
    std::unique_lock<std::mutex> lock(in_use, std::try_to_lock);
    if (!lock.owns_lock())
      throw CollectiveError(who() + ": " + describe(call) +
                            " was issued while another thread runs a collective on the same "
                            "GlooProcessGroup; use one GlooProcessGroup per (group, stream)");
    if (!broken.empty())
      throw CollectiveError(who() + ": " + describe(call) +
                            " cannot run: the group failed earlier: " + broken);
    if (group.size() == 1) {
      body(static_cast<Link*>(nullptr));
      return;
    }
    const auto deadline = Clock::now() + options.timeout;
    try {
      if (collective) {
        if (options.check_fingerprints) check_fingerprints(call, deadline);
        link->begin(deadline);
      } else {
        p2p_deadline = deadline;
      }
      body(link.get());
    } catch (const TransportFailure& f) {
      fail(call, explain(f));
    } catch (const ::gloo::Exception& e) {
      fail(call, std::string("gloo: ") + e.what());
    } catch (const ::gloo::EnforceNotMet& e) {
      fail(call, std::string("gloo: ") + e.what());
    }
  }

  // One side of a point-to-point transfer (NOTE [Gloo send / recv]): `peer` is the other
  // member; `sending` chooses the direction (a recv writes `buffer`, through Link::buffer).
  void p2p(const void* buffer, size_t count, DType dtype, int peer, uint64_t tag,
           const std::string& name, bool sending) {
    const char* verb = sending ? "send" : "recv";
    FULLSHARD_CHECK(peer >= 0 && peer < group.size() && peer != rank,
                    std::string("gloo: ") + verb + " '" + name + "' " + (sending ? "to" : "from") +
                        " member " + std::to_string(peer) +
                        ", which is not another member of the group");
    CallInfo call{
        CollectiveKind::kBroadcast, count, dtype, false, ReduceOp::kSum, peer, name, verb, tag};
    run(
        call,
        [&](Link* l) {
          if (!l) return;  // a group of one has no other member (checked above)
          const size_t bytes = count * dtype_size(dtype);
          const uint64_t slot = l->begin_p2p(p2p_deadline, tag);
          if (bytes == 0) return;
          auto b = l->buffer(buffer, bytes);
          if (sending) {
            l->send(*b, peer, slot, 0, bytes);
            l->wait_send(*b, peer);
          } else {
            l->recv(*b, peer, slot, 0, bytes);
            l->wait_recv(*b, peer);
          }
        },
        /*collective=*/false);
  }
};

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<::gloo::rendezvous::Store> store,
                                   std::shared_ptr<::gloo::transport::Device> device,
                                   const ProcessGroup& group, int global_rank,
                                   ProcessGroupOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.group = group;
  m.global_rank = global_rank;
  m.options = options;
  m.rank = group.index_of(global_rank);
  FULLSHARD_CHECK(m.rank >= 0, "gloo: rank " + std::to_string(global_rank) +
                                   " is not a member of group '" + group.name + "' " +
                                   ranks_text(group));
  FULLSHARD_CHECK(options.timeout.count() > 0, "gloo: the timeout must be positive");
  if (group.size() == 1) return;
  FULLSHARD_CHECK(store != nullptr && device != nullptr,
                  "gloo: a group of several members needs a store and a device");

  // Built with += throughout (GCC 12's -Wrestrict misfires on "literal" + std::string).
  std::string prefix = "fullshard.pg/";
  prefix += group.name;
  prefix += '/';
  prefix += group.key();
  if (!options.instance.empty()) {
    prefix += '/';
    prefix += options.instance;
  }
  const int generation = generations().next(store, global_rank, prefix);
  prefix += '#';
  prefix += std::to_string(generation);
  try {
    Connection c = connect_group(*store, prefix, device, m.rank, group.size(), options.timeout);
    m.context = std::move(c.context);
    m.peer_addresses = std::move(c.peer_addresses);
    m.link = std::make_unique<Link>(m.context);
  } catch (const TransportFailure& f) {
    std::string why;
    if (f.action == "waiting for the arrival of")
      why = "rank " + std::to_string(m.global(f.peer)) + " " + f.gloo_message;
    else if (f.action == "publishing the arrival of")
      why =
          "cannot publish this rank's arrival in the store (a store directory reused from an "
          "earlier job?): " +
          f.gloo_message;
    else
      why = m.explain(f);
    throw CollectiveError(m.who() + ": rendezvous (store prefix '" + prefix + "') failed: " + why);
  } catch (const ::gloo::Exception& e) {
    throw CollectiveError(m.who() + ": rendezvous (store prefix '" + prefix +
                          "') failed: gloo: " + e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    throw CollectiveError(m.who() + ": rendezvous (store prefix '" + prefix +
                          "') failed: gloo: " + e.what());
  }
}

GlooProcessGroup::~GlooProcessGroup() = default;

int GlooProcessGroup::rank() const { return impl_->rank; }
int GlooProcessGroup::size() const { return impl_->group.size(); }
const ProcessGroup& GlooProcessGroup::group() const { return impl_->group; }

void GlooProcessGroup::all_gather(const void* input, void* output, size_t count, DType dtype,
                                  const std::string& name) {
  CallInfo call{CollectiveKind::kAllGather, count, dtype, false, ReduceOp::kSum, -1, name};
  const size_t bytes = count * dtype_size(dtype);
  impl_->run(call, [&](Link* link) {
    if (bytes == 0) return;
    uint8_t* out = static_cast<uint8_t*>(output);
    uint8_t* mine = out + static_cast<size_t>(impl_->rank) * bytes;
    // In place when input == mine (FSDP2); memmove also covers any other overlap, and the ring
    // below reads only `output` after this copy.
    if (input != mine) std::memmove(mine, input, bytes);
    if (link) ring_all_gather(*link, out, equal_chunks(bytes, size()));
  });
}

void GlooProcessGroup::reduce_scatter(const void* input, void* output, size_t count, DType dtype,
                                      ReduceOp op, double scale, const std::string& name) {
  FULLSHARD_CHECK(reducible(dtype), "gloo: reduce_scatter '" + name + "' cannot reduce " +
                                        std::string(dtype_name(dtype)));
  CallInfo call{CollectiveKind::kReduceScatter, count, dtype, true, op, -1, name};
  const ReduceSpec spec{dtype, op, static_cast<float>(scale), size()};
  impl_->run(call, [&](Link* link) {
    if (count == 0) return;
    const size_t es = dtype_size(dtype);
    const uint8_t* in = static_cast<const uint8_t*>(input);
    uint8_t* out = static_cast<uint8_t*>(output);
    const uint8_t* in_mine = in + static_cast<size_t>(impl_->rank) * count * es;
    if (!link) {
      reduce_first(spec, out, in_mine, count, /*last=*/true);
      return;
    }
    // The ring reads the other chunks of `input` before it writes `output`, and chunk rank()
    // element by element as it writes; any other overlap goes through a temporary.
    const size_t in_bytes = static_cast<size_t>(size()) * count * es;
    const bool overlaps = out < in + in_bytes && in < out + count * es;
    if (overlaps && out != in_mine) {
      std::vector<uint8_t> tmp(count * es);
      ring_reduce_scatter(*link, spec, in, equal_chunks(count, size()), tmp.data());
      std::memcpy(out, tmp.data(), tmp.size());
    } else {
      ring_reduce_scatter(*link, spec, in, equal_chunks(count, size()), out);
    }
  });
}

void GlooProcessGroup::all_reduce(void* buffer, size_t count, DType dtype, ReduceOp op,
                                  double scale, const std::string& name) {
  FULLSHARD_CHECK(reducible(dtype), "gloo: all_reduce '" + name + "' cannot reduce " +
                                        std::string(dtype_name(dtype)));
  CallInfo call{CollectiveKind::kAllReduce, count, dtype, true, op, -1, name};
  const ReduceSpec spec{dtype, op, static_cast<float>(scale), size()};
  impl_->run(call, [&](Link* link) {
    if (count == 0) return;
    uint8_t* buf = static_cast<uint8_t*>(buffer);
    if (!link) {
      reduce_first(spec, buf, buf, count, /*last=*/true);
      return;
    }
    // Reduce-scatter over uneven chunks (in place: chunk r is written where it was read),
    // then all-gather the reduced chunks.
    const auto chunks = even_chunks(count, size());
    const size_t es = dtype_size(dtype);
    ring_reduce_scatter(*link, spec, buf, chunks, buf + chunks[impl_->rank].offset * es);
    ring_all_gather(*link, buf, to_bytes(chunks, es));
  });
}

void GlooProcessGroup::broadcast(void* buffer, size_t count, DType dtype, int root,
                                 const std::string& name) {
  FULLSHARD_CHECK(root >= 0 && root < size(), "gloo: broadcast '" + name + "' root " +
                                                  std::to_string(root) + " is not a group rank");
  CallInfo call{CollectiveKind::kBroadcast, count, dtype, false, ReduceOp::kSum, root, name};
  impl_->run(call, [&](Link* link) {
    const size_t bytes = count * dtype_size(dtype);
    if (bytes == 0 || !link) return;
    direct_broadcast(*link, static_cast<uint8_t*>(buffer), bytes, root);
  });
}

void GlooProcessGroup::all_to_all(const void* input, const std::vector<size_t>& send_counts,
                                  void* output, const std::vector<size_t>& recv_counts, DType dtype,
                                  const std::string& name) {
  const int n = size(), me = impl_->rank;
  FULLSHARD_CHECK(
      static_cast<int>(send_counts.size()) == n && static_cast<int>(recv_counts.size()) == n,
      "gloo: all_to_all '" + name + "' needs one send and one recv count per member");
  const size_t es = dtype_size(dtype);
  std::vector<Span> send(n), recv(n);
  size_t so = 0, ro = 0;
  for (int p = 0; p < n; ++p) {
    send[p] = Span{so, send_counts[p] * es};
    recv[p] = Span{ro, recv_counts[p] * es};
    so += send[p].length;
    ro += recv[p].length;
  }
  FULLSHARD_CHECK(
      send[me].length == recv[me].length,
      "gloo: all_to_all '" + name + "' sends itself a different count than it receives");
  const uint8_t* in = static_cast<const uint8_t*>(input);
  uint8_t* out = static_cast<uint8_t*>(output);
  FULLSHARD_CHECK(so == 0 || ro == 0 || in + so <= out || out + ro <= in,
                  "gloo: all_to_all '" + name + "' input and output overlap");
  // The fingerprint's count is this rank's (members' counts differ by design): 0 in the call.
  CallInfo call{CollectiveKind::kAllToAll, 0, dtype, false, ReduceOp::kSum, -1, name};
  impl_->run(call, [&](Link* link) {
    if (send[me].length) std::memcpy(out + recv[me].offset, in + send[me].offset, send[me].length);
    if (link) direct_all_to_all(*link, in, send, out, recv);
  });
}

void GlooProcessGroup::send(const void* buffer, size_t count, DType dtype, int dst, uint64_t tag,
                            const std::string& name) {
  impl_->p2p(buffer, count, dtype, dst, tag, name, /*sending=*/true);
}

void GlooProcessGroup::recv(void* buffer, size_t count, DType dtype, int src, uint64_t tag,
                            const std::string& name) {
  impl_->p2p(buffer, count, dtype, src, tag, name, /*sending=*/false);
}

void GlooProcessGroup::barrier(const std::string& name) {
  CallInfo call{CollectiveKind::kBarrier, 0, DType::kUInt8, false, ReduceOp::kSum, -1, name};
  impl_->run(call, [&](Link* link) {
    if (!link) return;
    // Everyone has entered once everyone's byte went round the ring.
    std::vector<uint8_t> tokens(size(), 0);
    tokens[impl_->rank] = 1;
    ring_all_gather(*link, tokens.data(), equal_chunks(1, size()));
  });
}

std::shared_ptr<::gloo::transport::Device> make_tcp_device(const std::string& hostname) {
  ::gloo::transport::tcp::attr attr;
  attr.hostname = hostname;
  try {
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw CollectiveError("gloo: cannot create a TCP device on '" + hostname + "': " + e.what());
  }
}

}  // namespace fullshard::gloo_backend
