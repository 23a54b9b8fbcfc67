#include "core/data/text_corpus.h"

#include <array>
#include <fstream>
#include <sstream>

#include "core/common/error.h"
#include "core/common/splitmix.h"

namespace fullshard {
namespace {

template <size_t N>
const char* pick(const std::array<const char*, N>& words, uint64_t& state) {
  state = splitmix64(state);
  return words[state % N];
}

}  // namespace

TextCorpus TextCorpus::generated(uint64_t seed, size_t bytes) {
  static constexpr std::array<const char*, 12> kAdj = {"small", "quiet", "bright", "old", "red", "clever",
                                                       "heavy", "distant", "gentle", "broken", "shared", "tired"};
  static constexpr std::array<const char*, 12> kNoun = {"cat",   "river", "engine", "teacher", "garden", "signal",
                                                        "stone", "lamp",  "market", "worker",  "cloud",  "letter"};
  static constexpr std::array<const char*, 10> kVerb = {"finds", "moves", "watches", "carries", "follows",
                                                        "opens", "hides", "builds",  "answers", "counts"};
  static constexpr std::array<const char*, 6> kAdv = {"slowly", "again", "today", "at night", "without a sound",
                                                      "before the rain"};
  TextCorpus c;
  c.text_.reserve(bytes + 128);
  uint64_t s = splitmix64(seed ^ 0x5eedc0de);
  while (c.text_.size() < bytes) {
    std::string sentence = std::string("The ") + pick(kAdj, s) + " " + pick(kNoun, s) + " " + pick(kVerb, s) +
                           " the " + pick(kAdj, s) + " " + pick(kNoun, s);
    s = splitmix64(s);
    if (s % 3 == 0) sentence += std::string(" ") + pick(kAdv, s);
    s = splitmix64(s);
    sentence += (s % 5 == 0) ? ".\n" : ". ";
    c.text_ += sentence;
  }
  return c;
}

TextCorpus TextCorpus::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("training.data.path", "'" + path + "' cannot be read", "give an existing text file");
  std::stringstream ss;
  ss << in.rdbuf();
  TextCorpus c;
  c.text_ = ss.str();
  if (c.text_.size() < 2)
    throw InputError("training.data.path", "'" + path + "' has fewer than 2 bytes", "give a longer text file");
  return c;
}

void TextCorpus::fill_batch(uint64_t seed, int64_t step, int64_t first_sample, int64_t batch, int64_t seq_len,
                            int64_t* tokens, int64_t* labels) const {
  const auto n = static_cast<int64_t>(text_.size());
  FULLSHARD_CHECK(n > seq_len, "corpus shorter than one sequence");
  const auto windows = static_cast<uint64_t>(n - seq_len);
  for (int64_t i = 0; i < batch; ++i) {
    const uint64_t g = static_cast<uint64_t>(first_sample + i);
    const uint64_t h = splitmix64(splitmix64(splitmix64(seed ^ 0xda7a) ^ static_cast<uint64_t>(step)) ^ g);
    const int64_t start = static_cast<int64_t>(h % windows);
    for (int64_t t = 0; t < seq_len; ++t) {
      tokens[i * seq_len + t] = static_cast<unsigned char>(text_[start + t]);
      labels[i * seq_len + t] = static_cast<unsigned char>(text_[start + t + 1]);
    }
  }
}

int64_t BatchSource::first_sample(int64_t micro, int rank, int world_size, int64_t batch) const {
  if (rank_batches.empty()) return (micro * world_size + rank) * batch;
  int64_t total = 0, before = 0;
  for (int r = 0; r < static_cast<int>(rank_batches.size()); ++r) {
    if (r < rank) before += rank_batches[r];
    total += rank_batches[r];
  }
  return micro * total + before;
}

void BatchSource::fill(const OpCall& op, int rank, int world_size, int64_t* tokens, int64_t* labels) const {
  FULLSHARD_CHECK(corpus != nullptr, "kLoadBatch without a corpus");
  FULLSHARD_CHECK(op.outputs.size() == 2 && op.iargs.size() >= 2, "kLoadBatch " + op.name + ": bad arguments");
  const TensorMeta& m = op.outputs.at(0).meta;
  FULLSHARD_CHECK(m.shape.size() == 2 && m.dtype == DType::kInt64, "kLoadBatch: tokens must be int64 [B, S]");
  const int64_t batch = m.shape[0], seq = m.shape[1];
  const int64_t step = op.iargs[0], micro = op.iargs[1];
  // iargs[3], iargs[4]: the data-parallel index and size (a tp group shares one batch).
  if (op.iargs.size() >= 5) {
    rank = static_cast<int>(op.iargs[3]);
    world_size = static_cast<int>(op.iargs[4]);
  }
  corpus->fill_batch(seed, step, first_sample(micro, rank, world_size, batch), batch, seq, tokens, labels);
}

}  // namespace fullshard
