#include "core/common/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/common/error.h"

namespace fullshard {
namespace {

std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::string mib(uint64_t bytes) {
  return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20));
}

// Closes the descriptor on every path out of read_input_file.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_input_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const std::string fix = "give the path of " + what;
  // O_NONBLOCK: opening a FIFO for reading blocks until a writer opens it; fstat below then
  // refuses it. For a regular file the flag changes nothing.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (f.fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      std::error_code ec;  // an absolute path (one a scenario resolved) needs no hint
      throw InputError(path, "file not found",
                       std::filesystem::path(path).is_absolute()
                           ? fix
                           : fix + " (relative paths are resolved from " +
                                 std::filesystem::current_path(ec).string() + ")");
    }
    throw InputError(path, std::string("cannot be opened (") + std::strerror(err) + ")", fix);
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw InputError(path, std::string("cannot be read (") + std::strerror(errno) + ")", fix);
  if (!S_ISREG(st.st_mode))
    throw InputError(path, "is " + kind_of(st.st_mode) + ", not a regular file", fix);
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw InputError(
        path,
        fmt::format("is {} bytes, more than the {} limit for inputs", st.st_size, mib(max_bytes)),
        fix);
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw InputError(path, std::string("cannot be read (") + std::strerror(errno) + ")", fix);
    }
    if (n == 0) break;
    // A file that grows while it is read (or a /proc file whose size reads as 0) is still capped.
    if (text.size() + static_cast<size_t>(n) > max_bytes)
      throw InputError(path, fmt::format("is more than the {} limit for inputs", mib(max_bytes)),
                       fix);
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace fullshard
