// Token files (nanoGPT / llm.c layouts), data paths (file, folder, glob), text through the
// byte-level tokenizer, and how kLoadBatch reads a token data set (NOTE [Token data sampling]).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <fstream>
#include <numeric>

#include "core/data/byte_tokenizer.h"
#include "core/data/text_corpus.h"
#include "core/data/token_file.h"
#include "core/data/token_source.h"
#include "tests/support/input_error.h"
#include "tests/support/temp_dir.h"

using namespace fullshard;
using fullshard::testing::input_error_of;
using fullshard::testing::TempDir;

namespace {

std::vector<uint32_t> read_all(const TokenSource& s) {
  std::vector<int64_t> v(static_cast<size_t>(s.size()));
  s.read(0, s.size(), v.data());
  return {v.begin(), v.end()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string header(int32_t magic, int32_t version, int32_t count) {
  std::vector<int32_t> h(256, 0);
  h[0] = magic;
  h[1] = version;
  h[2] = count;
  return std::string(reinterpret_cast<const char*>(h.data()), 1024);
}

}  // namespace

// Both dtypes, with and without llm.c's header: what is written is read back, token for token.
RC_GTEST_PROP(TokenFile, RoundTripsBothDtypesAndHeaders, ()) {
  static TempDir d("tokens");
  const bool u32 = *rc::gen::arbitrary<bool>();
  const bool hdr = *rc::gen::arbitrary<bool>();
  const auto tokens = *rc::gen::container<std::vector<uint32_t>>(
      u32 ? rc::gen::arbitrary<uint32_t>() : rc::gen::inRange<uint32_t>(0, 65536));
  const std::string p = d.file("t.bin");
  const TokenDType dt = u32 ? TokenDType::kUInt32 : TokenDType::kUInt16;
  write_token_file(p, tokens, dt, hdr, "-o");
  const TokenFileFormat f =
      hdr ? TokenFileFormat::kLlmc : (u32 ? TokenFileFormat::kUInt32 : TokenFileFormat::kUInt16);
  TokenFile t(p, f, "training.data");
  RC_ASSERT(t.dtype() == dt);
  RC_ASSERT(t.has_header() == hdr);
  RC_ASSERT(t.size() == static_cast<int64_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i)
    RC_ASSERT(t.token(static_cast<int64_t>(i)) == tokens[i]);
  if (hdr)
    RC_ASSERT(TokenFile(p, TokenFileFormat::kAuto, "x").size() ==
              t.size());  // auto reads the header
}

TEST(TokenFile, LlmcHeaderIsByteExact) {
  TempDir d;
  write_token_file(d.file("a.bin"), {1, 2, 65535}, TokenDType::kUInt16, true, "-o");
  std::ifstream in(d.file("a.bin"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(bytes.size(), 1024u + 6u);
  EXPECT_EQ(bytes.substr(0, 1024), header(20240520, 1, 3));
  EXPECT_EQ(bytes.substr(1024), std::string("\x01\x00\x02\x00\xff\xff", 6));
  write_token_file(d.file("b.bin"), {70000}, TokenDType::kUInt32, true, "-o");
  std::ifstream in2(d.file("b.bin"), std::ios::binary);
  std::string b2((std::istreambuf_iterator<char>(in2)), {});
  EXPECT_EQ(b2.substr(0, 1024), header(20240801, 7, 1));
}

TEST(TokenFile, BadFilesAreOneLineErrorsNamingTheFileAndTheFix) {
  TempDir d;
  const std::string p = d.file("x.bin");
  EXPECT_NE(input_error_of([&] {
              TokenFile(d.file("missing.bin"), TokenFileFormat::kAuto, "training.data");
            }).find("missing.bin' cannot be opened"),
            std::string::npos);
  write_bytes(p, std::string("\x01\x00\x02\x00", 4));  // nanoGPT's headerless uint16
  EXPECT_NE(input_error_of([&] {
              TokenFile(p, TokenFileFormat::kAuto, "training.data");
            }).find("training.data.format \"uint16\""),
            std::string::npos);
  EXPECT_EQ(TokenFile(p, TokenFileFormat::kUInt16, "x").size(), 2);
  EXPECT_EQ(TokenFile(p, TokenFileFormat::kUInt32, "x").size(), 1);
  write_bytes(p, std::string("\x01\x00\x02", 3));
  EXPECT_NE(input_error_of([&] {
              TokenFile(p, TokenFileFormat::kUInt16, "training.data");
            }).find("not a whole number of uint16 tokens"),
            std::string::npos);
  write_bytes(p, header(20240520, 1, 5) + std::string(8, '\0'));  // header says 5 tokens, 4 present
  const std::string cut =
      input_error_of([&] { TokenFile(p, TokenFileFormat::kLlmc, "training.data"); });
  EXPECT_NE(cut.find("header says 5 uint16 tokens"), std::string::npos) << cut;
  EXPECT_NE(cut.find("x.bin"), std::string::npos) << cut;
  write_bytes(p, header(20240520, 7, 0));  // uint16 magic with the uint32 version
  EXPECT_NE(input_error_of([&] {
              TokenFile(p, TokenFileFormat::kLlmc, "training.data");
            }).find("but version 7"),
            std::string::npos);
  write_bytes(p, header(20240801, 7, 1) + std::string(4, '\0'));
  EXPECT_NE(input_error_of([&] {
              TokenFile(p, TokenFileFormat::kUInt16, "training.data");
            }).find("starts with an llm.c header"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              TokenFile(d.path(), TokenFileFormat::kAuto, "training.data");
            }).find("not a regular file"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              write_token_file(p, {65536}, TokenDType::kUInt16, true, "-o");
            }).find("does not fit uint16"),
            std::string::npos);
}

TEST(TokenSource, ShardsOfAFolderOrGlobReadAsOneStreamInNameOrder) {
  TempDir d;
  write_token_file(d.file("shard_01.bin"), {4, 5, 6}, TokenDType::kUInt32, true, "-o");
  write_token_file(d.file("shard_00.bin"), {1, 2, 3}, TokenDType::kUInt16, true, "-o");
  write_token_file(d.file("shard_02.bin"), {7}, TokenDType::kUInt16, true, "-o");
  const std::vector<uint32_t> want = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(read_all(*open_token_source(d.path(), DataFormat::kAuto, "training.data")), want);
  EXPECT_EQ(read_all(*open_token_source(d.file("shard_*.bin"), DataFormat::kAuto, "training.data")),
            want);
  auto two = open_token_source(d.file("shard_0[01].bin"), DataFormat::kLlmc, "training.data");
  EXPECT_EQ(read_all(*two), (std::vector<uint32_t>{1, 2, 3, 4, 5, 6}));
  std::vector<int64_t> mid(3);
  two->read(2, 3, mid.data());  // across the file boundary
  EXPECT_EQ(mid, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_NE(input_error_of([&] {
              open_token_source(d.file("nope_*.bin"), DataFormat::kAuto, "training.data");
            }).find("matches no file"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] {
              two->check_vocab(5, "training.data");
            }).find("shard_01.bin' has token 5 at offset 1"),
            std::string::npos);
  EXPECT_NO_THROW(two->check_vocab(7, "training.data"));
}

TEST(TokenSource, TextAndJsonlGoThroughTheByteTokenizer) {
  TempDir d;
  write_bytes(d.file("a.txt"), "hi \xc3\xa9");
  EXPECT_EQ(read_all(*open_token_source(d.file("a.txt"), DataFormat::kAuto, "training.data")),
            (std::vector<uint32_t>{'h', 'i', ' ', 0xc3, 0xa9}));
  write_bytes(d.file("b.jsonl"), "{\"text\": \"ab\"}\n\n{\"text\": \"c\", \"id\": 2}\n");
  EXPECT_EQ(byte_detokenize(read_all(
                *open_token_source(d.file("b.jsonl"), DataFormat::kAuto, "training.data"))),
            "ab\nc");
  write_bytes(d.file("c.jsonl"), "{\"text\": \"ab\"}\n{\"txt\": 1}\n");
  EXPECT_NE(input_error_of([&] {
              open_token_source(d.file("c.jsonl"), DataFormat::kAuto, "training.data");
            }).find("c.jsonl' line 2 is not a JSON object"),
            std::string::npos);
  // NOTE [Bounded JSON nesting] (core/common/json_file.h): a line 100,000 deep, and one whose NUL
  // hid the rest of it.
  write_bytes(d.file("d.jsonl"), "{\"text\": \"a\", \"x\": " + std::string(100000, '[') +
                                     std::string(100000, ']') + "}\n");
  EXPECT_NE(input_error_of([&] {
              open_token_source(d.file("d.jsonl"), DataFormat::kAuto, "training.data");
            }).find("d.jsonl' line 1 is not a JSON object"),
            std::string::npos);
  write_bytes(d.file("n.jsonl"), std::string("{\"text\": \"a\"}") + '\0' + "{\"text\": \"b\"}\n");
  EXPECT_NE(input_error_of([&] {
              open_token_source(d.file("n.jsonl"), DataFormat::kAuto, "training.data");
            }).find("n.jsonl' line 1 is not a JSON object"),
            std::string::npos);
}

namespace {

// A token data set 0, 1, 2, ... n-1 (token = its offset mod 50000).
BatchSource counting_source(int64_t n, int world) {
  std::vector<uint32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0u);
  BatchSource b;
  b.tokens = tokens_in_memory(std::move(t), "counting");
  b.rank_batches.assign(static_cast<size_t>(world), 1);
  return b;
}

OpCall load_op(int64_t step, int64_t micro, int64_t accum, int64_t batch, int64_t seq) {
  OpCall op;
  op.kind = OpKind::kLoadBatch;
  op.outputs = {TensorRef{1, 0, TensorMeta{DType::kInt64, {batch, seq}}},
                TensorRef{2, 0, TensorMeta{DType::kInt64, {batch, seq}}}};
  op.iargs = {step, micro, accum};
  return op;
}

}  // namespace

// NOTE [Token data sampling] (core/data/text_corpus.cc): consecutive windows, step after step,
// wrapping into the next epoch.
TEST(TokenDataSampling, ReadsWindowsInOrderAndWrapsAtTheEpoch) {
  BatchSource b = counting_source(41, 2);  // (41 - 1) / 8 = 5 windows per epoch
  b.rank_batches = {2, 2};
  std::vector<int64_t> t(2 * 8), l(2 * 8);
  // Step 1, rank 1: global samples 4 + 2, 4 + 3 = windows 6 % 5 = 1 and 2 of epoch 1.
  b.fill(load_op(1, 0, 1, 2, 8), 1, 2, t.data(), l.data());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(t[i], 8 + i);
    EXPECT_EQ(l[i], 9 + i);
    EXPECT_EQ(t[8 + i], 16 + i);
  }
  const DataPosition p = b.position(2, 4, 8);
  EXPECT_EQ(p.samples, 8);
  EXPECT_EQ(p.epoch, 1);
  EXPECT_EQ(p.window, 3);
  b.sample_base = 3;  // a resume moved the position: step 0 starts at window 3
  b.fill(load_op(0, 0, 1, 2, 8), 0, 2, t.data(), l.data());
  EXPECT_EQ(t[0], 24);
  EXPECT_EQ(b.position(0, 4, 8).window, 3);
}

// Any split of a step's global batch over ranks and micro-batches reads the same sequences.
RC_GTEST_PROP(TokenDataSampling, GlobalSamplesDoNotDependOnTheMesh, ()) {
  const int world = *rc::gen::inRange(1, 5);
  const int accum = *rc::gen::inRange(1, 3);
  const int b = *rc::gen::inRange(1, 4);
  const int seq = *rc::gen::inRange(1, 17);
  const int step = *rc::gen::inRange(0, 7);
  const bool random = *rc::gen::arbitrary<bool>();
  BatchSource one = counting_source(300, 1), many = counting_source(300, world);
  one.random_windows = many.random_windows = random;
  one.rank_batches = {world * b * accum};
  many.rank_batches.assign(static_cast<size_t>(world), b);
  std::vector<int64_t> all(static_cast<size_t>(world * b * accum * seq)), lab(all.size());
  one.fill(load_op(step, 0, 1, world * b * accum, seq), 0, 1, all.data(), lab.data());
  size_t at = 0;
  for (int m = 0; m < accum; ++m)
    for (int r = 0; r < world; ++r) {
      std::vector<int64_t> t(static_cast<size_t>(b * seq)), l(t.size());
      many.fill(load_op(step, m, accum, b, seq), r, world, t.data(), l.data());
      RC_ASSERT(std::equal(t.begin(), t.end(), all.begin() + static_cast<std::ptrdiff_t>(at)));
      RC_ASSERT(std::equal(l.begin(), l.end(), lab.begin() + static_cast<std::ptrdiff_t>(at)));
      at += t.size();
    }
}
