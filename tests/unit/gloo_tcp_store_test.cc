// The TCP rendezvous store (MASTER_ADDR/MASTER_PORT): store semantics over real loopback
// sockets, its failures as one-line gloo::IoExceptions, and Gloo process groups connecting
// through it.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gloo/common/error.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "backends/gloo/tcp_store.h"
#include "tests/unit/gloo_test_support.h"

namespace fullshard::gloo_test {
namespace {

using gloo_backend::TcpStore;
using gloo_backend::TcpStoreOptions;
using namespace std::chrono_literals;

TcpStoreOptions server_options(std::chrono::milliseconds timeout = 5s) {
  TcpStoreOptions o;
  o.port = 0;
  o.is_server = true;
  o.timeout = timeout;
  return o;
}

TcpStoreOptions client_options(int port, std::chrono::milliseconds timeout = 5s) {
  TcpStoreOptions o;
  o.port = port;
  o.timeout = timeout;
  return o;
}

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// A port nothing listens on: bound, then released.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

template <class Fn>
std::string io_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ::gloo::IoException& e) {
    return e.what();
  }
  return "(no error)";
}

// Any keys and values (binary, empty, up to 64 KiB), set by one client, read back by another;
// a later set overwrites.
RC_GTEST_PROP(TcpStore, ValuesRoundTripBetweenClients, ()) {
  TcpStore server(server_options());
  TcpStore other(client_options(server.port()));
  const auto n = *rc::gen::inRange(1, 20);
  std::map<std::string, std::vector<char>> want;
  for (int i = 0; i < n; ++i) {
    const std::string key = *rc::gen::container<std::string>(rc::gen::inRange<char>(32, 127));
    const auto len = *rc::gen::inRange<size_t>(0, 65536);
    std::vector<char> v(len);
    for (size_t j = 0; j < len; ++j) v[j] = static_cast<char>((j * 131 + i) & 0xff);
    (i % 2 ? server : other).set(key, v);
    want[key] = v;
  }
  for (const auto& [k, v] : want) {
    RC_ASSERT(server.get(k) == v);
    RC_ASSERT(other.get(k) == v);
  }
}

TEST(TcpStore, GetAndWaitBlockUntilAnotherRankSetsTheKey) {
  TcpStore server(server_options());
  std::thread late([&] {
    TcpStore c(client_options(server.port()));
    std::this_thread::sleep_for(200ms);
    c.set("late", bytes("value"));
    c.set("late2", bytes(""));
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(server.get("late"), bytes("value"));
  server.wait({"late", "late2"}, 5000ms);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  late.join();
}

TEST(TcpStore, WaitTimesOutNamingTheKeyAndTheTime) {
  TcpStore server(server_options(300ms));
  const std::string e = io_error_of([&] { server.wait({"never"}, 200ms); });
  EXPECT_NE(e.find("timed out after 200 ms waiting for key 'never'"), std::string::npos) << e;
  const std::string g = io_error_of([&] { server.get("never"); });
  EXPECT_NE(g.find("timed out after 300 ms"), std::string::npos) << g;
}

TEST(TcpStore, ClientStartedBeforeTheServerConnectsWhenItComesUp) {
  const int port = free_port();
  std::vector<char> got;
  std::thread client([&] {
    TcpStore c(client_options(port));
    got = c.get("k");
  });
  std::this_thread::sleep_for(300ms);
  TcpStoreOptions o = server_options();
  o.port = port;
  TcpStore server(o);
  server.set("k", bytes("v"));
  client.join();
  EXPECT_EQ(got, bytes("v"));
}

TEST(TcpStore, NoServerIsAnErrorNamingTheAddressAndTheFix) {
  const int port = free_port();
  const std::string e = io_error_of([&] { TcpStore c(client_options(port, 300ms)); });
  EXPECT_NE(e.find("cannot connect to 127.0.0.1:" + std::to_string(port) + " within 300 ms"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("MASTER_ADDR/MASTER_PORT"), std::string::npos) << e;
}

TEST(TcpStore, PortInUseIsAnErrorNamingThePort) {
  TcpStore first(server_options());
  TcpStoreOptions o = server_options();
  o.port = first.port();
  const std::string e = io_error_of([&] { TcpStore second(o); });
  EXPECT_NE(e.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())), std::string::npos)
      << e;
  EXPECT_NE(e.find("choose another MASTER_PORT"), std::string::npos) << e;
  TcpStoreOptions bad = client_options(70000);
  EXPECT_NE(io_error_of([&] { TcpStore c(bad); }).find("MASTER_PORT 70000 is not a port"),
            std::string::npos);
}

TEST(TcpStore, AGarbageFrameDropsOnlyThatConnection) {
  TcpStore server(server_options());
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const char junk[] = "\x07\xff\xff\xff\xffgarbage";
  ASSERT_GT(::send(fd, junk, sizeof junk, MSG_NOSIGNAL), 0);
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0);  // the server closed it
  ::close(fd);
  TcpStore other(client_options(server.port()));
  other.set("still", bytes("served"));
  EXPECT_EQ(server.get("still"), bytes("served"));
}

TEST(TcpStore, ServerGoneIsAnErrorSayingSo) {
  auto server = std::make_unique<TcpStore>(server_options());
  TcpStore c(client_options(server->port()));
  c.set("a", bytes("1"));
  server.reset();
  const std::string e = io_error_of([&] { c.get("a"); });
  EXPECT_NE(e.find("lost the connection to 127.0.0.1:"), std::string::npos) << e;
}

// Process groups rendezvous over the TCP store exactly as over the file store: 3 ranks as
// threads, each with its own client (rank 0 also hosts the server), then an all-reduce.
TEST(TcpStore, GlooProcessGroupsConnectThroughIt) {
  auto server = std::make_shared<TcpStore>(server_options(10s));
  ThreadWorld w(3);
  w.rank_stores = {server, std::make_shared<TcpStore>(client_options(server->port(), 10s)),
                   std::make_shared<TcpStore>(client_options(server->port(), 10s))};
  auto pgs = w.make_world();
  std::vector<std::vector<float>> v{{1, 2}, {10, 20}, {100, 200}};
  parallel(3, [&](int r) {
    pgs[r]->all_reduce(v[r].data(), 2, DType::kFloat32, ReduceOp::kSum, 1.0, "sum");
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(v[r], (std::vector<float>{111, 222}));
}

}  // namespace
}  // namespace fullshard::gloo_test
