#include "runner/backend_factory.h"

#include <fmt/format.h>

#include "core/common/error.h"

namespace fullshard::runner {

void BackendRegistry::add(BackendKind kind) { kinds_[kind.name] = std::move(kind); }

const BackendKind* BackendRegistry::find(const std::string& name) const {
  auto it = kinds_.find(name);
  return it == kinds_.end() ? nullptr : &it->second;
}

std::string BackendRegistry::names() const {
  std::string out;
  for (const auto& [name, k] : kinds_) out += (out.empty() ? "" : "|") + name;
  return out;
}

bool is_cpu_scenario(const Scenario& s) { return s.hardware.device.name == "cpu"; }

// NOTE [Default backend]: a scenario on the "cpu" hardware profile trains on CPU processes
// over Gloo; any other profile describes GPUs and trains on the CUDA backend where this
// binary has it. `--backend cpu` runs a GPU scenario on CPU processes anyway (the launcher
// then checks that the host has the memory the profile's capacity asks for); "gloo" is the
// CPU backend's older name.
const BackendKind& BackendRegistry::choose(const std::string& requested, const Scenario& s) const {
  std::string name = requested == "gloo" ? "cpu" : requested;
  if (name.empty()) name = is_cpu_scenario(s) ? "cpu" : "cuda";
  if (const BackendKind* k = find(name)) return *k;
  if (name == "cuda")
    throw InputError(
        requested.empty() ? "hardware.profile" : "--backend",
        requested.empty()
            ? fmt::format("is '{}' (GPUs), but this fullshard was built without the CUDA "
                          "backend (nvcc, cuBLASLt and NCCL were not found)",
                          s.hardware.device.name)
            : "is 'cuda', but this fullshard was built without the CUDA backend",
        "rebuild where CUDA and NCCL are installed, or pass --backend cpu to train on CPU "
        "processes");
  throw InputError("--backend", "is '" + requested + "'", "use one of " + names());
}

std::shared_ptr<const TokenSource> open_data(const Scenario& s, const std::string& path,
                                             const std::string& where) {
  DocumentTokens doc{s.training.data.bos, s.training.data.eos, "training.data.bos",
                     "training.data.eos"};
  const TextTokenizer tok =
      make_text_tokenizer(s.training.data.tokenizer, "training.data.tokenizer", doc);
  auto src = open_token_source(path, data_format_from_name(s.training.data.format), where, &tok);
  src->check_vocab(s.model.vocab_size, where);
  if (src->size() <= s.training.seq_len)
    throw InputError(
        where,
        fmt::format("'{}' has {} tokens, not more than training.seq_len {} (one sequence and its "
                    "last label)",
                    path, src->size(), s.training.seq_len),
        "give more data or a shorter training.seq_len");
  return src;
}

BatchSource batch_source(const Scenario& s, std::shared_ptr<const TextCorpus> corpus) {
  BatchSource b;
  b.seed = s.training.seed;
  // Per-rank batches only when they differ (BatchSource numbers samples by the data-parallel
  // index then, which a tp group shares; an uneven batch with tp is refused at parse time).
  if (s.training.uneven_batch())
    for (int r = 0; r < s.world_size(); ++r) b.rank_batches.push_back(s.training.batch_for(r));
  if (s.training.data.given() && !corpus) {
    b.tokens = open_data(s, s.training.data.path, "training.data");
    if (!s.training.data.val_path.empty())
      b.val_tokens = open_data(s, s.training.data.val_path, "training.data.val_path");
    b.random_windows = s.training.data.sampling == "random";
    b.shuffle = s.training.data.sampling == "shuffle";
    return b;
  }
  b.corpus = corpus ? std::move(corpus)
                    : std::make_shared<const TextCorpus>(TextCorpus::generated(s.training.seed));
  if (static_cast<int64_t>(b.corpus->text().size()) <= s.training.seq_len)
    throw InputError("training.seq_len",
                     "is " + std::to_string(s.training.seq_len) + ", longer than the corpus",
                     "use a shorter sequence or a longer corpus");
  return b;
}

}  // namespace fullshard::runner
