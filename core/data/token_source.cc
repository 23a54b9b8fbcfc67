#include "core/data/token_source.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/input_file.h"
#include "core/common/json_file.h"
#include "core/data/bpe_tokenizer.h"
#include "core/data/byte_tokenizer.h"
#include "core/data/hf_tokenizer.h"

namespace fullshard {
namespace {

namespace fs = std::filesystem;

std::string count_str(int64_t n) { return std::to_string(n); }
// What the vocabulary size came from: a flag (`data inspect --vocab-size`) or the model.
std::string vocab_label(const std::string& where) {
  return where.rfind("--", 0) == 0 ? where : std::string("model.vocab_size");
}

// Token files read as one stream: file i holds tokens [starts_[i], starts_[i + 1]).
class ShardedTokenFiles final : public TokenSource {
 public:
  ShardedTokenFiles(const std::vector<std::string>& paths, TokenFileFormat format,
                    const std::string& where) {
    starts_.push_back(0);
    for (const auto& p : paths) {
      files_.push_back(std::make_unique<TokenFile>(p, format, where));
      starts_.push_back(starts_.back() + files_.back()->size());
    }
  }
  int64_t size() const override { return starts_.back(); }
  void read(int64_t offset, int64_t n, int64_t* out) const override {
    FULLSHARD_CHECK(offset >= 0 && n >= 0 && offset + n <= size(), "token range out of the data");
    auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
    size_t f = static_cast<size_t>(it - starts_.begin()) - 1;
    while (n > 0) {
      const int64_t in_file = std::min(n, starts_[f + 1] - offset);
      files_[f]->read(offset - starts_[f], in_file, out);
      out += in_file;
      offset += in_file;
      n -= in_file;
      ++f;
    }
  }
  void check_vocab(int64_t vocab_size, const std::string& where) const override {
    const auto limit = static_cast<uint32_t>(std::min<int64_t>(vocab_size, UINT32_MAX));
    for (const auto& f : files_)
      if (const int64_t i = f->first_token_at_least(limit); i >= 0)
        throw InputError(where,
                         fmt::format("'{}' has token {} at offset {}, not below {} {}", f->path(),
                                     f->token(i), i, vocab_label(where), vocab_size),
                         "tokenize with the model's tokenizer or raise " + vocab_label(where));
  }
  std::string describe() const override {
    return fmt::format("{} file{}, {} {} tokens", files_.size(), files_.size() == 1 ? "" : "s",
                       count_str(size()), token_dtype_name(files_.front()->dtype()));
  }

 private:
  std::vector<std::unique_ptr<TokenFile>> files_;
  std::vector<int64_t> starts_;
};

class InMemoryTokens final : public TokenSource {
 public:
  InMemoryTokens(std::vector<uint32_t> tokens, std::string name)
      : tokens_(std::move(tokens)), name_(std::move(name)) {}
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  void read(int64_t offset, int64_t n, int64_t* out) const override {
    FULLSHARD_CHECK(offset >= 0 && n >= 0 && offset + n <= size(), "token range out of the data");
    for (int64_t i = 0; i < n; ++i) out[i] = tokens_[static_cast<size_t>(offset + i)];
  }
  void check_vocab(int64_t vocab_size, const std::string& where) const override {
    for (size_t i = 0; i < tokens_.size(); ++i)
      if (static_cast<int64_t>(tokens_[i]) >= vocab_size)
        throw InputError(where,
                         fmt::format("{} has token {} at offset {}, not below {} {}", name_,
                                     tokens_[i], i, vocab_label(where), vocab_size),
                         "use a tokenizer whose vocabulary fits or raise " + vocab_label(where));
  }
  std::string describe() const override { return name_ + ", " + count_str(size()) + " tokens"; }

 private:
  std::vector<uint32_t> tokens_;
  std::string name_;
};

bool has_glob_chars(const std::string& p) { return p.find_first_of("*?[") != std::string::npos; }

DataFormat by_extension(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".txt" || ext == ".text" || ext == ".md") return DataFormat::kText;
  if (ext == ".jsonl") return DataFormat::kJsonl;
  return DataFormat::kLlmc;
}

// The tokens of a JSONL file: every line's "text" field, between the tokenizer's document
// tokens (bos, eos); with neither (the byte tokenizer), documents are joined by a newline.
std::vector<uint32_t> jsonl_tokens(const std::string& path, const std::string& content,
                                   const std::string& where, const TextTokenizer& tok) {
  std::vector<uint32_t> out;
  size_t pos = 0;
  int64_t line_no = 0, docs = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    const std::string line = content.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {  // NOTE [Bounded JSON nesting]
      j = parse_json_text(line, path);
    } catch (const InputError&) {
      j = nlohmann::json::value_t::discarded;  // reported below, with the line number
    }
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string())
      throw InputError(
          where,
          fmt::format("'{}' line {} is not a JSON object with a string \"text\"", path, line_no),
          "write one {\"text\": \"...\"} object per line");
    const std::string at = fmt::format("'{}' line {}", path, line_no);
    if (tok.bos) out.push_back(*tok.bos);
    if (!tok.bos && !tok.eos && docs > 0)
      for (uint32_t x : tok.encode("\n", at)) out.push_back(x);
    const std::vector<uint32_t> t = tok.encode(j["text"].get<std::string>(), at);
    out.insert(out.end(), t.begin(), t.end());
    if (tok.eos) out.push_back(*tok.eos);
    ++docs;
  }
  return out;
}

}  // namespace

const char* data_format_name(DataFormat f) {
  switch (f) {
    case DataFormat::kAuto: return "auto";
    case DataFormat::kLlmc: return "llmc";
    case DataFormat::kUInt16: return "uint16";
    case DataFormat::kUInt32: return "uint32";
    case DataFormat::kText: return "text";
    case DataFormat::kJsonl: return "jsonl";
  }
  return "?";
}

DataFormat data_format_from_name(const std::string& name) {
  for (DataFormat d : {DataFormat::kLlmc, DataFormat::kUInt16, DataFormat::kUInt32,
                       DataFormat::kText, DataFormat::kJsonl})
    if (name == data_format_name(d)) return d;
  return DataFormat::kAuto;
}

std::vector<std::string> expand_data_path(const std::string& path, const std::string& where) {
  std::vector<std::string> out;
  std::error_code ec;
  if (path.empty())
    throw InputError(where, "is empty", "give a token file, a folder of shards or a glob");
  if (has_glob_chars(path) && !fs::exists(path, ec)) {
    glob_t g{};
    const int rc = ::glob(path.c_str(), GLOB_ERR, nullptr, &g);
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i)
        if (fs::is_regular_file(g.gl_pathv[i], ec)) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (out.empty())
      throw InputError(where, "'" + path + "' matches no file",
                       "check the pattern (e.g. data/*train*.bin)");
  } else if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file(ec) && e.path().filename().string()[0] != '.')
        out.push_back(e.path().string());
    if (out.empty())
      throw InputError(where, "folder '" + path + "' has no files", "give a folder of token files");
  } else {
    if (!fs::exists(path, ec))
      throw InputError(where, "'" + path + "' does not exist",
                       "give a token file, a folder of shards or a glob");
    out.push_back(path);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const TokenSource> tokens_in_memory(std::vector<uint32_t> tokens,
                                                    std::string name) {
  return std::make_shared<InMemoryTokens>(std::move(tokens), std::move(name));
}

TextTokenizer make_text_tokenizer(const std::string& spec, const std::string& where,
                                  const DocumentTokens& doc) {
  TextTokenizer t;
  t.name = spec;
  if (spec == "byte") {
    for (const auto* o : {&doc.bos, &doc.eos})
      if (o->has_value() && !o->value().empty())
        throw InputError(
            o == &doc.bos ? doc.where_bos : doc.where_eos, "is '" + o->value() + "'",
            "the byte tokenizer has no special tokens: give a BPE tokenizer or leave it out");
    t.vocab_size = kByteVocabSize;
    t.encode = [](std::string_view text, const std::string&) { return byte_tokenize(text); };
    return t;
  }
  auto bpe = std::make_shared<const BpeTokenizer>(
      spec.ends_with(".json") ? bpe_from_tokenizer_json(spec, where)
                              : BpeTokenizer::from_tiktoken_file(spec, where));
  t.kind =
      fmt::format("BPE tokenizer ({} pre-tokenizer)", pre_tokenizer_name(bpe->pre_tokenizer()));
  t.vocab_size = bpe->vocab_size();
  t.encode = [bpe](std::string_view text, const std::string& w) { return bpe->encode(text, w); };
  auto lookup = [&](const std::optional<std::string>& name, const std::string& fallback,
                    const std::string& w) {
    const std::string n = name.value_or(fallback);
    if (n.empty()) return std::optional<uint32_t>();
    if (auto id = bpe->special(n)) return id;
    std::string known;
    for (const auto& [s, id] : bpe->special_tokens()) known += (known.empty() ? "" : ", ") + s;
    if (known.size() > 200) known = known.substr(0, 197) + "...";
    throw InputError(w, "is '" + n + "', not a special token of '" + spec + "'",
                     known.empty() ? "this tokenizer has none: give \"\""
                                   : "give one of " + known + " or \"\" for none");
  };
  t.bos = lookup(doc.bos, bpe->document_start(), doc.where_bos);
  t.eos = lookup(doc.eos, "", doc.where_eos);
  return t;
}

std::shared_ptr<const TokenSource> open_token_source(const std::string& path, DataFormat format,
                                                     const std::string& where,
                                                     const TextTokenizer* tokenizer) {
  const std::vector<std::string> files = expand_data_path(path, where);
  DataFormat f = format == DataFormat::kAuto ? by_extension(files.front()) : format;
  if (f == DataFormat::kText || f == DataFormat::kJsonl) {
    const TextTokenizer byte = make_text_tokenizer("byte", where);
    const TextTokenizer& tok = tokenizer ? *tokenizer : byte;
    std::vector<uint32_t> tokens;
    for (const auto& p : files) {
      const std::string content =
          read_input_file(p, f == DataFormat::kText ? "a text file" : "a JSONL file");
      const std::vector<uint32_t> t = f == DataFormat::kText ? tok.encode(content, "'" + p + "'")
                                                             : jsonl_tokens(p, content, where, tok);
      tokens.insert(tokens.end(), t.begin(), t.end());
    }
    const std::string what = tok.name == "byte" ? "byte-level" : "BPE " + tok.name;
    const std::string name = files.size() == 1
                                 ? "'" + files.front() + "' (" + what + ")"
                                 : std::to_string(files.size()) + " files (" + what + ")";
    return tokens_in_memory(std::move(tokens), name);
  }
  const TokenFileFormat tf = f == DataFormat::kUInt16      ? TokenFileFormat::kUInt16
                             : f == DataFormat::kUInt32    ? TokenFileFormat::kUInt32
                             : format == DataFormat::kAuto ? TokenFileFormat::kAuto
                                                           : TokenFileFormat::kLlmc;
  return std::make_shared<ShardedTokenFiles>(files, tf, where);
}

}  // namespace fullshard
