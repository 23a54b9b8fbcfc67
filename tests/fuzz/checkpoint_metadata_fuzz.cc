// Fuzz target: a sharded checkpoint's metadata.json as `--resume`, `checkpoint inspect` and
// `checkpoint export` read it. What the validator accepts must also write back and read again
// (metadata_to_json of a valid metadata is valid).
#include "core/checkpoint/checkpoint_metadata.h"
#include "core/common/json_file.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fullshard;
  fuzz::expect_parse_or_input_error([&] {
    const CheckpointMetadata m = metadata_from_json(
        parse_json_text(fuzz::text(data, size), "metadata.json"), "metadata.json");
    // Not an InputError: a round-trip failure escapes expect_parse_or_input_error as a finding.
    try {
      metadata_from_json(metadata_to_json(m), "round trip");
    } catch (const InputError& e) {
      throw std::logic_error(std::string("metadata that validated does not round-trip: ") +
                             e.what());
    }
  });
  return 0;
}
