#include "core/common/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <streambuf>

#include "core/common/error.h"

namespace fullshard {
namespace fs = std::filesystem;
namespace {

// ---------------------------------------------------------------- signal cleanup registry
// NOTE [Cleanup on signals]: the handler may only make async-signal-safe calls, so the
// temporary paths live in fixed buffers (no allocation) and the handler only unlink()s them.
constexpr int kSlots = 32;
constexpr size_t kPathMax = 4096;
std::array<std::atomic<bool>, kSlots> g_claimed{};  // owned by an OutputFile
std::array<std::atomic<bool>, kSlots> g_used{};     // published: the handler may unlink it
std::array<std::array<char, kPathMax>, kSlots> g_paths{};
struct sigaction g_previous[2];
std::atomic<bool> g_installed{false};

int register_temp(const std::string& path) {
  if (path.size() >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    // Claim the slot, fill it, then publish it: the handler reads only published slots.
    if (!g_claimed[static_cast<size_t>(i)].compare_exchange_strong(expected, true)) continue;
    std::memcpy(g_paths[static_cast<size_t>(i)].data(), path.c_str(), path.size() + 1);
    g_used[static_cast<size_t>(i)].store(true, std::memory_order_release);
    return i;
  }
  return -1;  // more than kSlots files open at once: still written safely, just not cleaned on a
              // signal
}

void unregister_temp(int slot) {
  if (slot < 0) return;
  g_used[static_cast<size_t>(slot)].store(false, std::memory_order_release);
  g_claimed[static_cast<size_t>(slot)].store(false, std::memory_order_release);
}

void on_signal(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (g_used[static_cast<size_t>(i)].load(std::memory_order_acquire))
      ::unlink(g_paths[static_cast<size_t>(i)].data());
  const struct sigaction& prev = g_previous[sig == SIGINT ? 0 : 1];
  if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction) {
    prev.sa_sigaction(sig, nullptr, nullptr);
    return;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string error_text(int err) { return std::strerror(err); }

}  // namespace

// ---------------------------------------------------------------- stream buffer
class OutputFile::Buf : public std::streambuf {
 public:
  explicit Buf(OutputFile& f) : f_(f) { setp(buf_.data(), buf_.data() + buf_.size()); }
  int error = 0;  // first failed write's errno
  bool flush_all() {
    const char* p = pbase();
    size_t n = static_cast<size_t>(pptr() - pbase());
    setp(buf_.data(), buf_.data() + buf_.size());
    while (n > 0 && error == 0) {
      const ssize_t w = ::write(f_.fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        error = errno;
        break;
      }
      if (w == 0) {
        error = EIO;
        break;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return error == 0;
  }

 protected:
  int_type overflow(int_type ch) override {
    if (!flush_all()) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override { return flush_all() ? 0 : -1; }

 private:
  OutputFile& f_;
  std::array<char, 1 << 16> buf_{};
};

OutputFile::OutputFile(std::string path, std::string flag)
    : path_(std::move(path)), flag_(std::move(flag)) {
  check_output_writable(flag_, path_);
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // A device or FIFO: rename() would replace the node itself. Write to it as it is.
    direct_ = true;
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0) fail("cannot open", errno);
  } else {
    // A symlink is followed: the file it points to is replaced, the link stays.
    std::error_code ec;
    const fs::path target = fs::exists(path_, ec) ? fs::canonical(path_, ec) : fs::path(path_);
    const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    std::string templ = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
    fd_ = ::mkostemp(templ.data(), O_CLOEXEC);
    if (fd_ < 0) fail("cannot create a temporary file in '" + dir.string() + "' for", errno);
    tmp_ = templ;
    slot_ = register_temp(tmp_);
    // mkstemp makes the file 0600; give it the mode a plain open() would have (0666 less the
    // umask), or the mode of the file it replaces.
    mode_t mode;
    if (::stat(target.c_str(), &st) == 0) {
      mode = st.st_mode & 07777;
    } else {
      const mode_t mask = ::umask(0);
      ::umask(mask);
      mode = 0666 & ~mask;
    }
    (void)::fchmod(fd_, mode);
    tmp_target_ = target.string();
  }
  buf_ = std::make_unique<Buf>(*this);
  os_ = std::make_unique<std::ostream>(buf_.get());
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  unregister_temp(slot_);
  slot_ = -1;
}

void OutputFile::fail(const std::string& what, int err) {
  discard();
  throw InputError(flag_, what + " '" + path_ + "' (" + error_text(err) + ")",
                   "check the disk has space and the path is writable");
}

void OutputFile::write(std::string_view data) {
  if (fd_ < 0) throw InputError(flag_, "'" + path_ + "' was already written", "");
  os_->write(data.data(), static_cast<std::streamsize>(data.size()));
  if (buf_->error) fail("could not write", buf_->error);
}

std::ostream& OutputFile::stream() { return *os_; }

void OutputFile::commit() {
  if (fd_ < 0) throw InputError(flag_, "'" + path_ + "' was already written", "");
  os_->flush();
  if (buf_->error || !buf_->flush_all()) fail("could not write", buf_->error ? buf_->error : EIO);
  // fsync fails with EINVAL on /dev/null and FIFOs: nothing to make durable there.
  if (::fsync(fd_) != 0 && !(direct_ && (errno == EINVAL || errno == EROFS)))
    fail("could not write", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    fail("could not write", err);
  }
  if (direct_) return;
  if (::rename(tmp_.c_str(), tmp_target_.c_str()) != 0)
    fail("could not rename the temporary file onto", errno);
  tmp_.clear();
  unregister_temp(slot_);
  slot_ = -1;
  // Make the rename itself durable.
  const fs::path dir = fs::path(tmp_target_).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void write_output_file(const std::string& path, std::string_view text, const std::string& flag) {
  OutputFile f(path, flag);
  f.write(text);
  f.commit();
}

void check_output_writable(const std::string& flag, const std::string& path) {
  if (path.empty()) throw InputError(flag, "is empty", "give a file path");
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw InputError(flag, "'" + path + "' is a directory", "give a file path inside it");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (::access(path.c_str(), W_OK) != 0)
      throw InputError(flag, "cannot write '" + path + "' (" + error_text(errno) + ")",
                       "give a writable file path");
    return;
  }
  const fs::path target = fs::exists(path, ec) ? fs::canonical(path, ec) : fs::path(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(dir, ec))
    throw InputError(flag, "the folder of '" + path + "' does not exist",
                     "create '" + dir.string() + "' first or give another path");
  if (::access(dir.c_str(), W_OK) != 0)
    throw InputError(flag,
                     "cannot write in the folder of '" + path + "' (" + error_text(errno) + ")",
                     "give a writable path");
}

void refuse_output_over_input(const std::string& flag, const std::string& output,
                              const std::vector<std::string>& inputs) {
  if (output.empty()) return;
  struct stat out {};
  const bool out_exists = ::stat(output.c_str(), &out) == 0;
  std::error_code ec;
  const fs::path out_canon = fs::weakly_canonical(output, ec);
  for (const auto& in : inputs) {
    if (in.empty()) continue;
    struct stat ist {};
    bool same;
    if (out_exists && ::stat(in.c_str(), &ist) == 0) {
      same = out.st_dev == ist.st_dev && out.st_ino == ist.st_ino;
    } else {
      std::error_code ec2;
      same = !ec && fs::weakly_canonical(in, ec2) == out_canon && !ec2;
    }
    // Device nodes (/dev/null, /dev/stdout) are shared by design; only files are protected.
    if (same && !(out_exists && !S_ISREG(out.st_mode)))
      throw InputError(
          flag,
          "'" + output + "' is also an input ('" + in + "'); writing it would destroy that input",
          "give another output path");
  }
}

void install_output_cleanup_on_signals() {
  if (g_installed.exchange(true)) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  const int sigs[2] = {SIGINT, SIGTERM};
  for (int i = 0; i < 2; ++i) {
    ::sigaction(sigs[i], nullptr, &g_previous[i]);
    // An ignored signal (nohup, a background job) stays ignored: the run goes on and commits.
    if (!(g_previous[i].sa_flags & SA_SIGINFO) && g_previous[i].sa_handler == SIG_IGN) continue;
    ::sigaction(sigs[i], &sa, nullptr);
  }
}

}  // namespace fullshard
