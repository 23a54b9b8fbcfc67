#include "core/data/text_corpus.h"

#include <array>
#include <fstream>
#include <sstream>

#include "core/common/error.h"
#include "core/common/splitmix.h"
#include "core/data/window_order.h"
#include "core/runtime/cp_layout.h"
#include "core/runtime/layer_args.h"

namespace fullshard {
namespace {

template <size_t N>
const char* pick(const std::array<const char*, N>& words, uint64_t& state) {
  state = splitmix64(state);
  return words[state % N];
}

}  // namespace

TextCorpus TextCorpus::generated(uint64_t seed, size_t bytes) {
  static constexpr std::array<const char*, 12> kAdj = {"small",  "quiet",  "bright", "old",
                                                       "red",    "clever", "heavy",  "distant",
                                                       "gentle", "broken", "shared", "tired"};
  static constexpr std::array<const char*, 12> kNoun = {"cat",    "river",  "engine", "teacher",
                                                        "garden", "signal", "stone",  "lamp",
                                                        "market", "worker", "cloud",  "letter"};
  static constexpr std::array<const char*, 10> kVerb = {"finds",   "moves", "watches", "carries",
                                                        "follows", "opens", "hides",   "builds",
                                                        "answers", "counts"};
  static constexpr std::array<const char*, 6> kAdv = {
      "slowly", "again", "today", "at night", "without a sound", "before the rain"};
  TextCorpus c;
  c.text_.reserve(bytes + 128);
  uint64_t s = splitmix64(seed ^ 0x5eedc0de);
  while (c.text_.size() < bytes) {
    std::string sentence = std::string("The ") + pick(kAdj, s) + " " + pick(kNoun, s) + " " +
                           pick(kVerb, s) + " the " + pick(kAdj, s) + " " + pick(kNoun, s);
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
  if (!in)
    throw InputError("training.data.path", "'" + path + "' cannot be read",
                     "give an existing text file");
  std::stringstream ss;
  ss << in.rdbuf();
  TextCorpus c;
  c.text_ = ss.str();
  if (c.text_.size() < 2)
    throw InputError("training.data.path", "'" + path + "' has fewer than 2 bytes",
                     "give a longer text file");
  return c;
}

void TextCorpus::fill_batch(uint64_t seed, int64_t step, int64_t first_sample, int64_t batch,
                            int64_t seq_len, int64_t* tokens, int64_t* labels) const {
  const auto n = static_cast<int64_t>(text_.size());
  FULLSHARD_CHECK(n > seq_len, "corpus shorter than one sequence");
  const auto windows = static_cast<uint64_t>(n - seq_len);
  for (int64_t i = 0; i < batch; ++i) {
    const uint64_t g = static_cast<uint64_t>(first_sample + i);
    const uint64_t h =
        splitmix64(splitmix64(splitmix64(seed ^ 0xda7a) ^ static_cast<uint64_t>(step)) ^ g);
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

// NOTE [Token data sampling]: a token data set (training.data) is read as llm.c's DataLoader
// reads it: consecutive windows of seq_len + 1 tokens (the labels are the tokens shifted by
// one), window w of an epoch starting at token w * seq_len, so an epoch is
// windows_per_epoch = (n - 1) / seq_len sequences and the tail shorter than one sequence is
// not read. Global sample k (counted from the start of training, micro-batch major, then rank,
// then row, as the generated corpus numbers them) is window k % windows_per_epoch of epoch
// k / windows_per_epoch, with k = sample_base + step * samples_per_step + the sample's index
// within the step. So every mesh reads the same global batch, the position is a pure function
// of the step, and a checkpoint stores k (DataPosition::samples) so that a resume with another
// global batch still continues where the run stopped (sample_base absorbs the difference).
// "shuffle" reads the same windows, each epoch in its own seeded order (NOTE [Shuffled epochs]):
// sample k reads window shuffled_window(seed, epoch, k % windows_per_epoch); the position is
// the same count k, so resumes and meshes behave as for sequential reading.
// "random" sampling is nanoGPT's get_batch: a window starting anywhere, drawn from
// (seed, step, global sample index) as the generated corpus does; it has no epochs.
int64_t BatchSource::windows_per_epoch(int64_t seq_len) const {
  FULLSHARD_CHECK(tokens != nullptr && seq_len > 0, "windows_per_epoch without token data");
  return (tokens->size() - 1) / seq_len;
}

DataPosition BatchSource::position(int64_t step, int64_t samples_per_step, int64_t seq_len) const {
  DataPosition p;
  p.samples = (tokens && !random_windows ? sample_base : 0) + step * samples_per_step;
  if (tokens && !random_windows) {
    const int64_t w = windows_per_epoch(seq_len);
    p.epoch = p.samples / w;
    p.window = p.samples % w;
  }
  return p;
}

void BatchSource::fill(const OpCall& op, int rank, int world_size, int64_t* out_tokens,
                       int64_t* labels) const {
  FULLSHARD_CHECK(corpus != nullptr || tokens != nullptr, "kLoadBatch without a corpus");
  const LoadBatchArgs a = LoadBatchArgs::decode(op);  // core/runtime/layer_args.h
  if (a.cp > 1) {
    // A cp rank's shard (NOTE [Context-parallel layout]): the whole sequences its data-parallel
    // index reads, as every rank of its cp group reads them, then its head and tail chunks, as
    // torchtitan's context_parallel shards the loaded batch.
    OpCall whole = op;
    const int64_t full = a.seq * a.cp;
    for (TensorRef& r : whole.outputs) r.meta.shape = {a.batch, full};
    whole.iargs.resize(6);
    std::vector<int64_t> t(static_cast<size_t>(a.batch * full)), l(t.size());
    fill(whole, rank, world_size, t.data(), l.data());
    for (int64_t b = 0; b < a.batch; ++b)
      for (int64_t i = 0; i < a.seq; ++i) {
        const int64_t from = b * full + cp_global_position(i, a.seq, a.cp, a.cp_index);
        out_tokens[b * a.seq + i] = t[static_cast<size_t>(from)];
        labels[b * a.seq + i] = l[static_cast<size_t>(from)];
      }
    return;
  }
  const int64_t batch = a.batch, seq = a.seq;
  const int64_t step = a.step, micro = a.micro_batch;
  // The data-parallel index and size, when given (ranks of one tp group share a batch).
  if (a.dp_rank >= 0) {
    rank = static_cast<int>(a.dp_rank);
    world_size = static_cast<int>(a.dp_size);
  }
  const int64_t first = first_sample(micro, rank, world_size, batch);
  if (a.split == 1) {
    // Validation batch `step` (NOTE [Validation pass]): windows in order from the start of the
    // validation data, wrapping, numbered as one micro-batch of every rank.
    FULLSHARD_CHECK(val_tokens != nullptr && val_tokens->size() > seq,
                    "validation batch without validation data");
    int64_t per_micro = 0;
    if (rank_batches.empty()) per_micro = static_cast<int64_t>(world_size) * batch;
    for (int64_t b : rank_batches) per_micro += b;
    const int64_t windows = (val_tokens->size() - 1) / seq;
    std::vector<int64_t> window(static_cast<size_t>(seq + 1));
    for (int64_t i = 0; i < batch; ++i) {
      val_tokens->read(((step * per_micro + first + i) % windows) * seq, seq + 1, window.data());
      for (int64_t t = 0; t < seq; ++t) {
        out_tokens[i * seq + t] = window[static_cast<size_t>(t)];
        labels[i * seq + t] = window[static_cast<size_t>(t + 1)];
      }
    }
    return;
  }
  if (!tokens) {
    corpus->fill_batch(seed, step, first, batch, seq, out_tokens, labels);
    return;
  }
  const int64_t n = tokens->size();
  FULLSHARD_CHECK(n > seq, "token data shorter than one sequence");
  const int64_t accum = a.accumulation;
  int64_t per_micro = 0;
  if (rank_batches.empty()) per_micro = static_cast<int64_t>(world_size) * batch;
  for (int64_t b : rank_batches) per_micro += b;
  const int64_t per_step = per_micro * accum;
  std::vector<int64_t> window(static_cast<size_t>(seq + 1));
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t g = first + i;
    int64_t start = 0;
    if (random_windows) {
      const uint64_t h =
          splitmix64(splitmix64(splitmix64(seed ^ 0xda7a) ^ static_cast<uint64_t>(step)) ^
                     static_cast<uint64_t>(g));
      start = static_cast<int64_t>(h % static_cast<uint64_t>(n - seq));
    } else {
      const int64_t k = sample_base + step * per_step + g;
      const int64_t windows = windows_per_epoch(seq);
      const int64_t w =
          shuffle ? shuffled_window(seed, k / windows, k % windows, windows) : k % windows;
      start = w * seq;
    }
    tokens->read(start, seq + 1, window.data());
    for (int64_t t = 0; t < seq; ++t) {
      out_tokens[i * seq + t] = window[static_cast<size_t>(t)];
      labels[i * seq + t] = window[static_cast<size_t>(t + 1)];
    }
  }
}

}  // namespace fullshard
