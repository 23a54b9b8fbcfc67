#pragma once
// A rendezvous store over TCP, for ranks that share no file system: torchrun's
// MASTER_ADDR/MASTER_PORT convention. One rank (rank 0) runs the server inside its process;
// every rank, rank 0 included, is a client. It implements gloo's Store interface, so process
// groups rendezvous over it exactly as over the FileStore the local launcher uses.
//
// NOTE [TCP store protocol]: PyTorch's c10d TCPStore plays this role for torchrun; Debian's
// gloo (2022) has no TCP store (only file, hash, prefix and Redis stores). The protocol is
// deliberately small: each request is one frame
//   u8 op | u32 key length | key | (SET only) u32 value length | value     (lengths little-endian)
// and the server answers SET with one byte (0) and GET with one byte (1: found, 0: absent)
// followed, when found, by u32 length | value. GET never blocks the server: a client that
// waits for a key asks again with a growing pause (1 ms doubling to 50 ms) until its deadline,
// so one slow or dead client cannot stall the others. Keys are set once in a rendezvous (a
// later SET overwrites, as gloo's stores do). A frame over the limits below closes that
// client's connection; the server keeps serving the others.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

namespace fullshard::gloo_backend {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // MASTER_ADDR: the server's address (a name or an IP)
  int port = 29500;                // MASTER_PORT; 0 with is_server: any free port (tests)
  bool is_server = false;          // this process hosts the store (rank 0)
  // How long to wait for the server to come up (clients), and for a key (get/wait without an
  // explicit timeout).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

inline constexpr size_t kTcpStoreMaxKey = 4096;
inline constexpr size_t kTcpStoreMaxValue = size_t{64} << 20;

class TcpStore : public ::gloo::rendezvous::Store {
 public:
  // Server: binds host:port (throws gloo::IoException naming the address and the OS error, e.g.
  // the port is in use) and starts serving; then connects to itself. Client: connects,
  // retrying until options.timeout (the server may start later), then throws
  // gloo::IoException naming host:port.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for the key up to the options' timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The port the server listens on (the chosen one when options.port was 0).
  int port() const { return port_; }
  std::string address() const;  // "host:port", as errors name it

 private:
  class Server;
  struct Reply {
    bool found = false;
    std::vector<char> value;
  };
  Reply request(uint8_t op, const std::string& key, const std::vector<char>* value);
  std::vector<char> get_until(const std::string& key,
                              std::chrono::steady_clock::time_point deadline,
                              std::chrono::milliseconds timeout);

  TcpStoreOptions options_;
  int port_ = 0;
  std::unique_ptr<Server> server_;
  int fd_ = -1;  // this client's connection; requests are serialised by mu_
  struct Lock;
  std::unique_ptr<Lock> mu_;
};

}  // namespace fullshard::gloo_backend
