#pragma once
// Training data for real runs: a text corpus read with a byte-level tokenizer (token = byte,
// vocabulary 256), sampled deterministically per (step, global sample index) so
// that any mesh sees the same global batch: rank r's sample i is global sample
// r * batch_per_rank + i, and an unsharded run with a W-times larger batch sees the same
// sequences.
#include <cstdint>
#include <string>

namespace fullshard::cpu {

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

}  // namespace fullshard::cpu
