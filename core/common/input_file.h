#pragma once
// Reading a file the user named (a scenario, a hardware profile, measurements, a report).
//
// NOTE [Input files]: a path may name a FIFO (open() blocks until a writer comes, forever in
// a script), a device (/dev/zero never ends, /dev/urandom is binary), a directory or a file
// far larger than any input fullshard understands. read_input_file() opens without blocking,
// accepts only regular files and reads at most `max_bytes`, so every such path is a one-line
// InputError instead of a hang or an exhausted memory.
#include <cstdint>
#include <string>

namespace fullshard {

// The largest JSON or CSV input fullshard reads (256 MiB): a report of every rank of a large
// run is tens of MB; nothing users write is near it.
inline constexpr uint64_t kMaxInputFileBytes = uint64_t{256} << 20;

// The whole content of the regular file at `path`. Throws InputError (where: `path`) when it
// does not exist, is not a regular file (directory, FIFO, device, socket), cannot be read or
// is larger than `max_bytes`. `what` names the expected content in the fix, e.g. "a scenario
// .json file".
std::string read_input_file(const std::string& path, const std::string& what,
                            uint64_t max_bytes = kMaxInputFileBytes);

}  // namespace fullshard
