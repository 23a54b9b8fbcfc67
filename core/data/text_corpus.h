#pragma once
// Training data for real runs (the definition of OpKind::kLoadBatch that every real backend
// reproduces bit for bit): a text corpus read with a byte-level tokenizer (token = byte,
// vocabulary 256), sampled deterministically per (step, global sample index) so
// that any mesh sees the same global batch: rank r's sample i is global sample
// r * batch_per_rank + i, and an unsharded run with a W-times larger batch sees the same
// sequences.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/token_source.h"
#include "core/runtime/op.h"

namespace fullshard {

class TextCorpus {
 public:
  // A deterministic English-like corpus from a small probabilistic grammar (about `bytes`
  // long): structure a small model learns within a few dozen steps.
  static TextCorpus generated(uint64_t seed, size_t bytes = 1 << 20);
  // A UTF-8/ASCII text file; throws InputError if it is missing or shorter than 2 tokens.
  static TextCorpus from_file(const std::string& path);

  const std::string& text() const { return text_; }

  // Fills `batch` sequences of `seq_len` tokens starting at global sample `first_sample`:
  // labels are the tokens shifted by one. Requires text().size() > seq_len.
  // The window of a sample depends only on (seed, step, global sample index): the caller
  // numbers samples across micro-batches, so splitting a batch into micro-batches or over
  // ranks does not change the data.
  void fill_batch(uint64_t seed, int64_t step, int64_t first_sample, int64_t batch, int64_t seq_len,
                  int64_t* tokens, int64_t* labels) const;

 private:
  std::string text_;
};

// Where a token data set is after some steps (NOTE [Token data sampling]): what checkpoints
// save and `fullshard train` logs.
struct DataPosition {
  int64_t samples = 0;  // global samples (sequences) read since the start of training
  int64_t epoch = 0;    // complete passes over the data set
  int64_t window =
      0;  // the next sequence's index within the epoch (its place in the epoch's order)
};

// What a rank's kLoadBatch reads: the corpus or a token data set, the seed and every rank's
// micro-batch size.
struct BatchSource {
  std::shared_ptr<const TextCorpus> corpus;       // the generated corpus (when `tokens` is null)
  std::shared_ptr<const TokenSource> tokens;      // training.data (NOTE [Token data sampling])
  std::shared_ptr<const TokenSource> val_tokens;  // training.data.val_path (kLoadBatch split 1)
  bool random_windows =
      false;             // tokens: nanoGPT's random windows instead of llm.c's sequential order
  bool shuffle = false;  // tokens: each epoch's windows in a seeded order (NOTE [Shuffled epochs])
  int64_t sample_base = 0;  // tokens, sequential: global sample of step 0 (a resume may move it)
  uint64_t seed = 0;
  // Sequences per micro-batch of every rank (global sample numbering); empty: all equal.
  std::vector<int64_t> rank_batches;

  // Sequences of `seq_len` (+1 for the labels) the token data set holds in one epoch.
  int64_t windows_per_epoch(int64_t seq_len) const;
  // The data position before `step` with `samples_per_step` global sequences per step.
  DataPosition position(int64_t step, int64_t samples_per_step, int64_t seq_len) const;

  // The global index of the first sample of `rank`'s micro-batch `micro` of `batch` rows:
  // micro-batch major, then rank, then row.
  int64_t first_sample(int64_t micro, int rank, int world_size, int64_t batch) const;
  // Fills op.outputs[0] (int64 tokens [B, S]) and op.outputs[1] (labels) of a kLoadBatch
  // (iargs: step, micro-batch, accumulation steps[, split[, dp index, dp size]]) for `rank`
  // of `world_size` (or, when given, the data-parallel index and size), into host memory.
  void fill(const OpCall& op, int rank, int world_size, int64_t* tokens, int64_t* labels) const;
};

}  // namespace fullshard
