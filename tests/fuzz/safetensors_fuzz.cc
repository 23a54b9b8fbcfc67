// Fuzz target: a .safetensors file (checkpoint rank files, `--init-from`, `checkpoint export`
// output read back). Every tensor the header validates is also read, so the offsets the
// reader trusts after validation are exercised too (NOTE [Validating safetensors]).
#include "core/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fullshard;
  static fuzz::MemFile file;
  const std::string path = file.write(data, size);
  fuzz::expect_parse_or_input_error([&] {
    SafetensorsReader r(path);
    for (const auto& e : r.header().tensors) r.read_all(e.name);
  });
  return 0;
}
