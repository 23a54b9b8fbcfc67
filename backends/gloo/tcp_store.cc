#include "backends/gloo/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <gloo/common/error.h>

namespace fullshard::gloo_backend {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kSet = 1, kGet = 2;

[[noreturn]] void io_error(const std::string& what) { throw ::gloo::IoException(what); }

std::string errno_text(int e) { return std::strerror(e); }

int ms_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

// Writes all of [p, p + n) before `deadline`; false on a closed peer, an error or the deadline.
bool write_all(int fd, const char* p, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      const int left = ms_left(deadline);
      if (left == 0 || ::poll(&pf, 1, left) <= 0) return false;
      continue;
    }
    return false;
  }
  return true;
}

// Reads exactly n bytes before `deadline`; false on EOF, an error or the deadline.
bool read_exact(int fd, char* p, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    const int left = ms_left(deadline);
    if (left == 0) return false;
    const int pr = ::poll(&pf, 1, left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return false;
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) ::freeaddrinfo(list);
  }
};

void resolve(const std::string& host, int port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &out.list);
  if (rc != 0)
    io_error("rendezvous store: cannot resolve MASTER_ADDR '" + host + "': " + ::gai_strerror(rc));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The server: one thread polling the listening socket, a wake pipe and every client.

class TcpStore::Server {
 public:
  Server(const std::string& host, int port) {
    AddrInfo ai;
    resolve(host, port, true, ai);
    int last_errno = 0;
    for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last_errno = errno;
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
        listen_fd_ = fd;
        break;
      }
      last_errno = errno;
      ::close(fd);
    }
    if (listen_fd_ < 0)
      io_error("rendezvous store: cannot listen on " + host + ":" + std::to_string(port) + ": " +
               errno_text(last_errno) +
               (last_errno == EADDRINUSE ? " (choose another MASTER_PORT, or stop the job using it)"
                                         : ""));
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    if (::pipe2(wake_, O_CLOEXEC) != 0) {
      ::close(listen_fd_);
      io_error("rendezvous store: pipe2 failed: " + errno_text(errno));
    }
    thread_ = std::thread([this] { loop(); });
  }

  ~Server() {
    const char c = 0;
    ssize_t ignored = ::write(wake_[1], &c, 1);
    (void)ignored;
    thread_.join();
    for (Client& c2 : clients_) ::close(c2.fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  int port() const { return port_; }

 private:
  struct Client {
    int fd = -1;
    std::string in;  // bytes received, not yet a whole frame
  };

  void loop() {
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (const Client& c : clients_) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) return;
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients_.push_back({fd, {}});
        }
      }
      std::vector<bool> drop(clients_.size(), false);
      for (size_t i = 0; i < clients_.size() && i + 2 < fds.size(); ++i) {
        if (fds[i + 2].revents == 0) continue;
        drop[i] = !serve(clients_[i]);
      }
      for (size_t i = drop.size(); i-- > 0;) {
        if (!drop[i]) continue;
        ::close(clients_[i].fd);
        clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }

  // Reads what arrived and answers every whole frame; false to drop the client.
  bool serve(Client& c) {
    char buf[65536];
    const ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (r <= 0) return false;
    c.in.append(buf, static_cast<size_t>(r));
    for (;;) {
      if (c.in.size() < 5) return true;
      const uint8_t op = static_cast<uint8_t>(c.in[0]);
      const size_t klen = get_u32(c.in.data() + 1);
      if ((op != kSet && op != kGet) || klen > kTcpStoreMaxKey) return false;
      size_t need = 5 + klen;
      size_t vlen = 0;
      if (op == kSet) {
        if (c.in.size() < need + 4) return true;
        vlen = get_u32(c.in.data() + need);
        if (vlen > kTcpStoreMaxValue) return false;
        need += 4 + vlen;
      }
      if (c.in.size() < need) return true;
      std::string key = c.in.substr(5, klen);
      std::string reply;
      if (op == kSet) {
        const char* v = c.in.data() + 5 + klen + 4;
        data_[std::move(key)] = std::vector<char>(v, v + vlen);
        reply.push_back(0);
      } else {
        auto it = data_.find(key);
        if (it == data_.end()) {
          reply.push_back(0);
        } else {
          reply.push_back(1);
          put_u32(reply, static_cast<uint32_t>(it->second.size()));
          reply.append(it->second.data(), it->second.size());
        }
      }
      c.in.erase(0, need);
      if (!write_all(c.fd, reply.data(), reply.size(), Clock::now() + std::chrono::seconds(10)))
        return false;
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::vector<Client> clients_;
  std::map<std::string, std::vector<char>> data_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// The client.

struct TcpStore::Lock {
  std::mutex mu;
};

TcpStore::TcpStore(TcpStoreOptions options)
    : options_(std::move(options)), mu_(std::make_unique<Lock>()) {
  if (options_.port < 0 || options_.port > 65535 || (options_.port == 0 && !options_.is_server))
    io_error("rendezvous store: MASTER_PORT " + std::to_string(options_.port) +
             " is not a port (use 1-65535)");
  port_ = options_.port;
  if (options_.is_server) {
    server_ = std::make_unique<Server>(options_.host, options_.port);
    port_ = server_->port();
  }
  const auto deadline = Clock::now() + options_.timeout;
  std::string last = "no address";
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    AddrInfo ai;
    resolve(options_.host, port_, false, ai);
    for (addrinfo* a = ai.list; a != nullptr && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last = errno_text(errno);
        continue;
      }
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd;
      } else {
        last = errno_text(errno);
        ::close(fd);
      }
    }
    if (fd_ >= 0) break;
    if (Clock::now() >= deadline) {
      server_.reset();
      io_error("rendezvous store: cannot connect to " + address() + " within " +
               std::to_string(options_.timeout.count()) + " ms (" + last +
               "): is rank 0 running, and are MASTER_ADDR/MASTER_PORT the same on every rank?");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::string TcpStore::address() const { return options_.host + ":" + std::to_string(port_); }

TcpStore::Reply TcpStore::request(uint8_t op, const std::string& key,
                                  const std::vector<char>* value) {
  if (key.size() > kTcpStoreMaxKey)
    io_error("rendezvous store: key of " + std::to_string(key.size()) + " bytes (the limit is " +
             std::to_string(kTcpStoreMaxKey) + ")");
  if (value != nullptr && value->size() > kTcpStoreMaxValue)
    io_error("rendezvous store: value of " + std::to_string(value->size()) + " bytes for key '" +
             key + "' (the limit is " + std::to_string(kTcpStoreMaxValue) + ")");
  std::string frame;
  frame.push_back(static_cast<char>(op));
  put_u32(frame, static_cast<uint32_t>(key.size()));
  frame += key;
  if (value != nullptr) {
    put_u32(frame, static_cast<uint32_t>(value->size()));
    frame.append(value->data(), value->size());
  }
  std::lock_guard<std::mutex> lock(mu_->mu);
  const auto deadline = Clock::now() + options_.timeout;
  const auto lost = [&] {
    io_error("rendezvous store: lost the connection to " + address() + " during " +
             (op == kSet ? "set" : "get") + " of key '" + key + "' (did rank 0 exit?)");
  };
  if (!write_all(fd_, frame.data(), frame.size(), deadline)) lost();
  char status = 0;
  if (!read_exact(fd_, &status, 1, deadline)) lost();
  Reply r;
  if (op == kGet && status == 1) {
    char len[4];
    if (!read_exact(fd_, len, 4, deadline)) lost();
    r.found = true;
    r.value.resize(get_u32(len));
    if (!r.value.empty() && !read_exact(fd_, r.value.data(), r.value.size(), deadline)) lost();
  }
  return r;
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  request(kSet, key, &data);
}

std::vector<char> TcpStore::get_until(const std::string& key, Clock::time_point deadline,
                                      std::chrono::milliseconds timeout) {
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    Reply r = request(kGet, key, nullptr);
    if (r.found) return std::move(r.value);
    if (Clock::now() >= deadline)
      io_error("rendezvous store " + address() + ": timed out after " +
               std::to_string(timeout.count()) + " ms waiting for key '" + key + "'");
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::vector<char> TcpStore::get(const std::string& key) {
  return get_until(key, Clock::now() + options_.timeout, options_.timeout);
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, options_.timeout); }

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  // gloo's kNoTimeout (0) means "wait without limit"; the store's own timeout bounds it.
  const auto limit = timeout.count() > 0 ? timeout : options_.timeout;
  const auto deadline = Clock::now() + limit;
  for (const std::string& k : keys) get_until(k, deadline, limit);
}

}  // namespace fullshard::gloo_backend
