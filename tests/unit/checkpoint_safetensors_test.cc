// core/checkpoint/safetensors: byte-exact round trips, and one InputError naming the file and
// the tensor for every kind of damage (NOTE [Validating safetensors]).
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "core/checkpoint/safetensors.h"
#include "core/common/error.h"
#include "tests/support/temp_dir.h"
#include "tests/support/input_error.h"

namespace fullshard {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void spit(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

using testing::input_error_of;

// A file of raw header JSON `json` followed by `data_bytes` zero bytes.
std::string raw_file(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + std::string(data_bytes, '\0');
}

TEST(Safetensors, WritesTheFormatAndReadsItBack) {
  TempDir d;
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 1e-3f};
  const std::vector<int64_t> ids = {1, 2, 3};
  const std::string p = d.file("m.safetensors");
  write_safetensors(p,
                    {{"w", "F32", {2, 3}, w.data()},
                     {"ids", "I64", {3}, ids.data()},
                     {"empty", "F32", {0, 4}, nullptr}},
                    {{"format", "pt"}}, "--out");
  const std::string bytes = slurp(p);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // data 8-byte aligned
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 24);
  EXPECT_EQ(bytes.compare(8 + n, 24, reinterpret_cast<const char*>(w.data()), 24),
            0);  // raw little-endian, in order
  SafetensorsReader r(p);
  EXPECT_EQ(r.header().metadata.at("format"), "pt");
  ASSERT_EQ(r.header().tensors.size(), 3u);
  EXPECT_EQ(r.entry("w").shape, (Shape{2, 3}));
  EXPECT_EQ(r.entry("ids").dtype, "I64");
  EXPECT_EQ(r.entry("empty").nbytes(), 0u);
  std::vector<float> back(6);
  r.read("w", 0, 24, back.data());
  EXPECT_EQ(back, w);
  float one = 0;
  r.read("w", 8, 4, &one);
  EXPECT_EQ(one, 3.25f);
  EXPECT_NE(input_error_of([&] { r.read("w", 20, 8, &one); }).find("outside its 24 bytes"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { r.entry("nope"); }).find("has no tensor 'nope'"),
            std::string::npos);
  EXPECT_EQ(dtype_from_safetensors("BF16"), DType::kBFloat16);
  EXPECT_FALSE(dtype_from_safetensors("F64").has_value());
  EXPECT_EQ(safetensors_dtype_size("F64"), 8u);
}

TEST(Safetensors, WriterRefusesDuplicatesAndReservedNames) {
  TempDir d;
  float x = 1;
  EXPECT_NE(
      input_error_of([&] {
        write_safetensors(d.file("a"), {{"a", "F32", {1}, &x}, {"a", "F32", {1}, &x}}, {}, "--out");
      }).find("given twice"),
      std::string::npos);
  EXPECT_NE(input_error_of([&] {
              write_safetensors(d.file("a"), {{"__metadata__", "F32", {1}, &x}}, {}, "--out");
            }).find("reserved"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              write_safetensors(d.file("a"), {{"a", "Q4", {1}, &x}}, {}, "--out");
            }).find("Q4"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(d.file("a")));
}

// Each damage: the header JSON, the data bytes, and what the one-line error must say.
struct Damage {
  std::string json;
  size_t data;
  std::string expect;
};

TEST(Safetensors, EveryKindOfDamageIsOneInputErrorNamingFileAndTensor) {
  TempDir d;
  const std::vector<Damage> cases = {
      {R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12,
       "tensor 'w': data_offsets [0,12] span 12 bytes but dtype F32 and shape [2, 2] need 16"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "overlap"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12,
       "tensor 'w': data_offsets begin at 4, leaving a hole"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12,
       "tensor 'w': data_offsets end at 16, past the 12 data bytes"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12,
       "4 bytes after the last tensor"},
      {R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8,
       "tensor 'w': unknown dtype 'Q4'"},
      {R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8,
       "tensor 'w': shape [-2] holds -2"},
      {R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8, "tensor 'w': shape"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8,
       "overflow"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "ends before it begins"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, "is not [begin, end]"},
      {R"({"w":{"dtype":"F32","shape":[2]}})", 8, "tensor 'w': header entry has no 'data_offsets'"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8,
       "unknown header field 'x'"},
      {R"({"w":[1,2]})", 8, "tensor 'w': header entry is array"},
      {R"({"__metadata__":{"a":1}})", 0, "__metadata__.a: is number"},
      {R"({"w":{"dtype":"F32",)", 8, "header is not valid JSON"},
      {R"([1,2])", 0, "header does not start with '{'"},
      {R"({"a":{},"a":{}})", 0, "header is not valid JSON"},
  };
  for (const auto& c : cases) {
    const std::string p = d.file("bad.safetensors");
    spit(p, raw_file(c.json, c.data));
    const std::string msg = input_error_of([&] { SafetensorsReader r(p); });
    EXPECT_NE(msg.find(p), std::string::npos) << c.json << " -> " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.json << " -> " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // Header length past the end, over the limit, or no length at all.
  std::string huge(8, '\0');
  const uint64_t n = uint64_t{1} << 40;
  std::memcpy(huge.data(), &n, 8);
  spit(d.file("h"), huge + "{}");
  EXPECT_NE(input_error_of([&] { SafetensorsReader r(d.file("h")); }).find("over the"),
            std::string::npos);
  spit(d.file("h"), raw_file("{}", 0).substr(0, 9));
  EXPECT_NE(input_error_of([&] { SafetensorsReader r(d.file("h")); }).find("past the end"),
            std::string::npos);
  spit(d.file("h"), "abc");
  EXPECT_NE(input_error_of([&] { SafetensorsReader r(d.file("h")); }).find("fewer than the 8-byte"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { SafetensorsReader r(d.file("missing")); }).find("missing"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { SafetensorsReader r("/tmp"); }).find("not a regular file"),
            std::string::npos);
}

// Random tensors of every fullshard dtype.
struct RandomTensor {
  std::string name, dtype;
  Shape shape;
  std::string bytes;
};

rc::Gen<std::vector<RandomTensor>> gen_tensors() {
  return rc::gen::map(
      rc::gen::container<std::vector<std::tuple<int, std::vector<int64_t>, uint32_t>>>(
          rc::gen::tuple(rc::gen::inRange(0, 5),
                         rc::gen::container<std::vector<int64_t>>(rc::gen::inRange<int64_t>(0, 6)),
                         rc::gen::arbitrary<uint32_t>())),
      [](const auto& specs) {
        std::vector<RandomTensor> out;
        const char* dts[] = {"F32", "BF16", "F16", "I64", "U8"};
        for (size_t i = 0; i < specs.size() && i < 12; ++i) {
          const auto& [dt, dims, seed] = specs[i];
          RandomTensor t;
          t.name = "model.layers." + std::to_string(i) + ".w";
          t.dtype = dts[dt];
          t.shape.assign(dims.begin(), dims.begin() + std::min<size_t>(dims.size(), 3));
          t.bytes.resize(static_cast<size_t>(numel(t.shape)) * *safetensors_dtype_size(t.dtype));
          uint32_t x = seed | 1;
          for (char& c : t.bytes) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            c = static_cast<char>(x);
          }
          out.push_back(std::move(t));
        }
        return out;
      });
}

std::vector<SafetensorsTensor> views(const std::vector<RandomTensor>& ts) {
  std::vector<SafetensorsTensor> v;
  for (const auto& t : ts) v.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
  return v;
}

RC_GTEST_PROP(SafetensorsProp, RandomTensorsRoundTripByteForByte, ()) {
  TempDir d;
  const auto ts = *gen_tensors();
  const std::string p = d.file("r.safetensors");
  write_safetensors(p, views(ts), {{"k", "v"}}, "--out");
  SafetensorsReader r(p);
  RC_ASSERT(r.header().tensors.size() == ts.size());
  for (const auto& t : ts) {
    RC_ASSERT(r.entry(t.name).shape == t.shape);
    RC_ASSERT(r.entry(t.name).dtype == t.dtype);
    const auto back = r.read_all(t.name);
    RC_ASSERT(std::string(back.begin(), back.end()) == t.bytes);
  }
}

// Cutting a valid file anywhere short of its end is an InputError naming the file; any single
// flipped byte in the header is either still a valid file or an InputError (never another
// exception or a crash).
RC_GTEST_PROP(SafetensorsProp, TruncatedOrFlippedFilesAreInputErrors, ()) {
  TempDir d;
  auto ts = *gen_tensors();
  ts.push_back({"last", "F32", {3}, std::string(12, '\x01')});  // the file has data to cut
  const std::string p = d.file("r.safetensors");
  write_safetensors(p, views(ts), {}, "--out");
  const std::string good = slurp(p);
  const size_t cut = *rc::gen::inRange<size_t>(0, good.size());
  spit(p, good.substr(0, cut));
  const std::string msg = input_error_of([&] { SafetensorsReader r(p); });
  RC_ASSERT(msg.find(p) != std::string::npos);
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  std::string flipped = good;
  const size_t at = *rc::gen::inRange<size_t>(0, 8 + n);
  flipped[at] = static_cast<char>(flipped[at] ^ (1 << *rc::gen::inRange(0, 8)));
  spit(p, flipped);
  try {
    SafetensorsReader r(p);
    for (const auto& e : r.header().tensors) r.read_all(e.name);
  } catch (const InputError& e) {
    RC_ASSERT(std::string(e.what()).find(p) != std::string::npos);
  }
}

}  // namespace
}  // namespace fullshard
