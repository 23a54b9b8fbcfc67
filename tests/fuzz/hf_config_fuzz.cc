// Fuzz target: a Hugging Face config.json (`plan --hf-config`, a scenario's model.hf_config).
#include "core/model/model_config.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fullshard;
  static fuzz::MemFile file;
  const std::string path = file.write(data, size);
  fuzz::expect_parse_or_input_error([&] { model_from_hf_config_file(path); });
  return 0;
}
