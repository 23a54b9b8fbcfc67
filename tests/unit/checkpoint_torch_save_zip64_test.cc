// Zip64 records in torch.save archives (NOTE [Zip64 records as PyTorch writes them] in
// core/checkpoint/torch_save.cc): archives whose zip64 fields a low TorchSaveOptions threshold
// forces read back bit for bit with fullshard's reader and with Python's zipfile (and torch.load
// where torch is installed: tests/support/torch_save_zip_check.py); the default threshold writes
// the archive it always wrote; a sparse file holds an archive of a piece over 4 GiB, whose last
// record starts past 4 GiB, without writing its 4 GiB of zeros.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>
#include <fstream>

#include "core/checkpoint/safetensors.h"
#include "core/checkpoint/torch_save.h"
#include "core/common/error.h"
#include "tests/support/temp_dir.h"

namespace fullshard {
namespace {
using testing::TempDir;

const std::string kCheck =
    std::string(FULLSHARD_SOURCE_DIR) + "/tests/support/torch_save_zip_check.py";

uint64_t get_le(const std::string& s, uint64_t at, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= uint64_t{static_cast<uint8_t>(s[at + b])} << (8 * b);
  return v;
}

ArchiveReader reader_of(const std::string& a) {
  return [&a](uint64_t off, uint64_t n, void* dst) {
    if (off > a.size() || n > a.size() - off) throw std::runtime_error("read past the end");
    std::memcpy(dst, a.data() + off, n);
  };
}

// crc32 of a message of crc32 `crc` followed by `n` zero bytes, without reading them: zeros
// multiply the CRC register by x^(8n) modulo the polynomial (bit-reflected; bit 31 is x^0).
uint32_t gf2_mul(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (uint32_t m = 1u << 31; m; m >>= 1) {
    if (a & m) p ^= b;
    b = (b & 1) ? (b >> 1) ^ 0xedb88320u : b >> 1;
  }
  return p;
}
uint32_t crc32_zeros(uint32_t crc, uint64_t n) {
  uint32_t x = 1u << 31, sq = 1u << 23;  // x^0, x^8
  for (; n; n >>= 1, sq = gf2_mul(sq, sq))
    if (n & 1) x = gf2_mul(x, sq);
  return ~gf2_mul(x, ~crc);
}

bool have_python() { return std::system("python3 -c 'import zipfile' > /dev/null 2>&1") == 0; }

// Runs tests/support/torch_save_zip_check.py on `archive`; its output line goes to the log.
int python_check(const TempDir& dir, const std::string& archive, uint64_t threshold,
                 const std::string& dtype, const Shape& shape, uint64_t data_size,
                 uint32_t data_crc, const std::string& data_path) {
  std::string dims;
  for (size_t d = 0; d < shape.size(); ++d) dims += (d ? "," : "") + std::to_string(shape[d]);
  const std::string expect = dir.file("expect.json");
  std::ofstream(expect) << "{\"threshold\": " << threshold << ", \"dtype\": \"" << dtype
                        << "\", \"shape\": [" << dims << "], \"data_size\": " << data_size
                        << ", \"data_crc\": " << data_crc
                        << ", \"data\": " << (data_path.empty() ? "null" : "\"" + data_path + "\"")
                        << "}";
  return std::system(("python3 " + kCheck + " " + archive + " " + expect).c_str());
}

TEST(TorchSaveZip64, DefaultThresholdIsPyTorchsAndWritesNoZip64Fields) {
  EXPECT_EQ(TorchSaveOptions{}.zip64_threshold, 0xffffffffu);  // miniz's MZ_UINT32_MAX
  std::vector<float> v(12, 1.5f);
  const std::string_view data(reinterpret_cast<const char*>(v.data()), 48);
  const std::string a = torch_save_archive("F32", {3, 4}, data, "t");
  // No record carries an extra field in the central directory; the plain end record holds the
  // directory's true size and offset (the zip64 end record is always there, as miniz writes it).
  const uint64_t end = a.size() - 22;
  ASSERT_EQ(get_le(a, end, 4), 0x06054b50u);
  const uint64_t cd = get_le(a, end + 16, 4);
  uint64_t p = cd;
  for (int k = 0; k < 6; ++k) {
    ASSERT_EQ(get_le(a, p, 4), 0x02014b50u);
    EXPECT_EQ(get_le(a, p + 30, 2), 0u);
    p += 46 + get_le(a, p + 28, 2);
  }
  EXPECT_EQ(get_le(a, end + 12, 4), p - cd);
  // A threshold above every size and offset in the archive writes the same bytes.
  EXPECT_EQ(torch_save_archive("F32", {3, 4}, data, "t", {a.size()}), a);
}

RC_GTEST_PROP(TorchSaveZip64Prop, ForcedZip64ReadsBackBitForBitAndAnyCutIsAnInputError, ()) {
  const std::string dtype = *rc::gen::elementOf(std::vector<std::string>{"F32", "BF16", "F16"});
  const Shape shape =
      *rc::gen::container<Shape>(*rc::gen::inRange<size_t>(0, 4), rc::gen::inRange<int64_t>(0, 40));
  std::string data(static_cast<size_t>(numel(shape)) * *safetensors_dtype_size(dtype), '\0');
  for (auto& c : data) c = static_cast<char>(*rc::gen::arbitrary<uint8_t>());
  const std::string plain = torch_save_archive(dtype, shape, data, "t");
  // 0: every field in zip64; otherwise some records (the later ones, the larger ones) only.
  const uint64_t threshold =
      *rc::gen::oneOf(rc::gen::just<uint64_t>(0), rc::gen::inRange<uint64_t>(1, plain.size() + 64));
  const std::string a = torch_save_archive(dtype, shape, data, "t", {threshold});
  const TorchSavedTensor t = parse_torch_save(reader_of(a), a.size(), "t");
  RC_ASSERT(t.dtype == dtype);
  RC_ASSERT(t.shape == shape);
  RC_ASSERT(t.data_offset % 64 == 0);
  RC_ASSERT(t.nbytes == data.size());
  RC_ASSERT(a.substr(t.data_offset, t.nbytes) == data);
  // The plain end record sends a reader to the zip64 one once the directory's offset reaches
  // the threshold (always with 0), and the archive grows only by zip64 fields.
  const uint64_t end = a.size() - 22;
  RC_ASSERT((get_le(a, end + 16, 4) == 0xffffffffu) ==
            (get_le(a, end - 20 - 56 + 48, 8) >= threshold));
  RC_ASSERT(a.size() >= plain.size());
  RC_ASSERT(threshold < plain.size() || a == plain);
  RC_ASSERT(threshold > 0 || a.size() > plain.size());
  const std::string cut = a.substr(0, *rc::gen::inRange<uint64_t>(0, a.size()));
  RC_ASSERT_THROWS_AS(parse_torch_save(reader_of(cut), cut.size(), "t"), InputError);
}

TEST(TorchSaveZip64, PythonZipfileReadsForcedZip64Archives) {
  if (!have_python()) GTEST_SKIP() << "no python3 here";
  TempDir dir("zip64");
  std::vector<uint16_t> v(7 * 9);
  for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<uint16_t>(0x3f80 + 37 * k);  // bf16
  const std::string data(reinterpret_cast<const char*>(v.data()), v.size() * 2);
  const std::string raw = dir.file("data.bin");
  std::ofstream(raw, std::ios::binary) << data;
  const std::string plain = torch_save_archive("BF16", {7, 9}, data, "t");
  const uint64_t data0 = parse_torch_save(reader_of(plain), plain.size(), "t").data_offset,
                 cd = get_le(plain, plain.size() - 22 + 16, 4);
  // Every record zip64; `version` (after data/0) and the central directory; only the central
  // directory; none.
  for (uint64_t threshold : {uint64_t{0}, data0, cd, uint64_t{0xffffffffu}}) {
    const std::string path = dir.file("t" + std::to_string(threshold) + ".pt");
    std::ofstream(path, std::ios::binary)
        << torch_save_archive("BF16", {7, 9}, data, "t", {threshold});
    EXPECT_EQ(python_check(dir, path, threshold, "BF16", {7, 9}, data.size(), crc32(data), raw), 0)
        << "threshold " << threshold;
  }
}

TEST(TorchSaveZip64, Crc32OfZerosAsTheBytewiseCrc) {  // the sparse test's CRC
  for (uint64_t n : {0, 1, 7, 64, 1000, 4099})
    for (uint32_t crc : {0u, 0xdeadbeefu})
      EXPECT_EQ(crc32_zeros(crc, n), crc32(std::string(n, '\0'), crc)) << n;
}

TEST(TorchSaveZip64, APieceOver4GiBInASparseFile) {
  // 2^30 + 40 fp32 zeros: data/0 of 4 GiB + 160 bytes (its size in zip64 fields); `version`
  // after it starts past 4 GiB (its offset in zip64 fields), and so does the central directory.
  const Shape shape{(int64_t{1} << 30) + 40};
  const uint64_t n = static_cast<uint64_t>(shape[0]) * 4;
  const TorchSaveParts parts = torch_save_archive_parts("F32", shape, n, crc32_zeros(0, n), "t");
  // The parts are the archive: the same layout, at a size that fits in memory, is checked above;
  // here a small piece shows that head + data + tail is torch_save_archive's output.
  const std::string small(64, '\0');
  const TorchSaveParts sp = torch_save_archive_parts("F32", {16}, 64, crc32(small), "t");
  EXPECT_EQ(sp.head + small + sp.tail, torch_save_archive("F32", {16}, small, "t"));

  TempDir dir("zip64-sparse");
  const std::string path = dir.file("big.pt");
  {
    std::ofstream f(path, std::ios::binary);
    f << parts.head;
    f.seekp(static_cast<std::streamoff>(parts.head.size() + n));
    f << parts.tail;
    f.close();  // a failed flush (no space, no sparse files) shows here, not as a short read
    ASSERT_TRUE(f.good()) << "could not write a sparse file of " << parts.head.size() + n
                          << " bytes";
  }
  const uint64_t size = parts.head.size() + n + parts.tail.size();
  std::ifstream in(path, std::ios::binary);
  const ArchiveReader read = [&](uint64_t off, uint64_t len, void* dst) {
    in.seekg(static_cast<std::streamoff>(off));
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(len));
    if (!in) throw std::runtime_error("short read");
  };
  const TorchSavedTensor t = parse_torch_save(read, size, "big.pt");
  EXPECT_EQ(t.dtype, "F32");
  EXPECT_EQ(t.shape, shape);
  EXPECT_EQ(t.nbytes, n);
  EXPECT_EQ(t.data_offset, parts.head.size());
  EXPECT_EQ(t.data_offset % 64, 0u);
  if (!have_python()) GTEST_SKIP() << "no python3 here: zipfile not run";
  // zipfile reads every record but data/0 (4 GiB): names, sizes, CRC-32s, zip64 fields,
  // alignment and data descriptors, `version` from past 4 GiB.
  EXPECT_EQ(python_check(dir, path, 0xffffffffu, "F32", shape, n, crc32_zeros(0, n), ""), 0);
}

}  // namespace
}  // namespace fullshard
