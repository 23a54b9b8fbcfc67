#include "core/data/hf_tokenizer.h"

#include <array>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/json_file.h"

namespace fullshard {
namespace {

using nlohmann::json;

std::array<char32_t, 256> make_byte_chars() {
  std::array<char32_t, 256> out{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    out[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return out;
}

const std::array<char32_t, 256>& byte_chars() {
  static const std::array<char32_t, 256> table = make_byte_chars();
  return table;
}

// The bytes a byte-level token string stands for; false when a character is not in the alphabet.
bool byte_level_decode(const std::string& token, std::string& out) {
  static const std::array<int, 512> inverse = [] {
    std::array<int, 512> inv{};
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_chars()[static_cast<size_t>(b)]] = b;
    return inv;
  }();
  out.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(token.data());
  size_t i = 0;
  while (i < token.size()) {
    uint32_t cp = 0;
    if (s[i] < 0x80) {
      cp = s[i];
      i += 1;
    } else if ((s[i] & 0xE0) == 0xC0 && i + 1 < token.size()) {  // the alphabet is below U+0200
      cp = ((s[i] & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
      i += 2;
    } else {
      return false;
    }
    if (cp >= inverse.size() || inverse[cp] < 0) return false;
    out += static_cast<char>(inverse[cp]);
  }
  return !token.empty();
}

struct Reader {
  const std::string& path;
  const std::string& where;

  [[noreturn]] void refuse(const std::string& field, const std::string& problem,
                           const std::string& fix) const {
    throw InputError(where, fmt::format("'{}' {} {}", path, field, problem), fix);
  }
  static std::string shown(const json& j) {
    std::string s = j.dump();
    return s.size() > 80 ? s.substr(0, 77) + "..." : s;
  }
};

const char* kFix = "give a byte-level BPE tokenizer.json (GPT-2's or Llama 3's)";

// Refuses a field set to something other than its no-op values.
void expect_unset(const Reader& r, const json& obj, const std::string& key,
                  const std::string& field) {
  if (!obj.contains(key)) return;
  const json& v = obj.at(key);
  const bool unset = v.is_null() || (v.is_string() && v.get<std::string>().empty()) ||
                     (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v.get<double>() == 0);
  if (!unset) r.refuse(field, "is " + Reader::shown(v) + ", which is not supported", kFix);
}

const json& member(const Reader& r, const json& obj, const std::string& key,
                   const std::string& field) {
  if (!obj.is_object() || !obj.contains(key)) r.refuse(field, "is missing", kFix);
  return obj.at(key);
}

std::string type_of(const Reader& r, const json& obj, const std::string& field) {
  const json& t = member(r, obj, "type", field + ".type");
  if (!t.is_string()) r.refuse(field + ".type", "is " + Reader::shown(t) + ", not a string", kFix);
  return t.get<std::string>();
}

void check_byte_level(const Reader& r, const json& bl, const std::string& field, bool want_regex) {
  if (bl.value("add_prefix_space", false) == true)
    r.refuse(field + ".add_prefix_space", "is true, which is not supported",
             "set it to false (as GPT-2 and Llama 3 do)");
  if (bl.value("use_regex", true) != want_regex)
    r.refuse(field + ".use_regex", fmt::format("is {}", !want_regex),
             want_regex ? "GPT-2's ByteLevel splits with its regex (use_regex: true)"
                        : "after Llama 3's Split, ByteLevel has use_regex: false");
}

PreTokenizer read_pre_tokenizer(const Reader& r, const json& root) {
  const json& p = member(r, root, "pre_tokenizer", "pre_tokenizer");
  if (p.is_null())
    r.refuse("pre_tokenizer", "is null", "give ByteLevel (GPT-2) or Split + ByteLevel (Llama 3)");
  const std::string type = type_of(r, p, "pre_tokenizer");
  if (type == "ByteLevel") {
    check_byte_level(r, p, "pre_tokenizer", true);
    return PreTokenizer::kGpt2;
  }
  const json* seq =
      type == "Sequence" ? &member(r, p, "pretokenizers", "pre_tokenizer.pretokenizers") : nullptr;
  if (!seq || !seq->is_array() || seq->size() != 2)
    r.refuse("pre_tokenizer", "is " + Reader::shown(p),
             "only ByteLevel (GPT-2) or Sequence [Split, ByteLevel] (Llama 3) is read");
  const json& split = (*seq)[0];
  const std::string f = "pre_tokenizer.pretokenizers[0]";
  if (type_of(r, split, f) != "Split")
    r.refuse(f + ".type", "is " + Reader::shown(split.at("type")), "expected Split (Llama 3)");
  const json& pat = member(r, split, "pattern", f + ".pattern");
  if (!pat.is_object() || !pat.contains("Regex") || !pat.at("Regex").is_string() ||
      pat.at("Regex").get<std::string>() != kLlama3Pattern)
    r.refuse(f + ".pattern", "is " + Reader::shown(pat),
             "only Llama 3's regex is read (NOTE [Llama 3 pre-tokenizer])");
  if (split.value("behavior", "") != "Isolated" || split.value("invert", false))
    r.refuse(f + ".behavior",
             "is " + Reader::shown(split.value("behavior", json())) +
                 (split.value("invert", false) ? " inverted" : ""),
             "expected Isolated, not inverted (Llama 3)");
  const std::string g = "pre_tokenizer.pretokenizers[1]";
  if (type_of(r, (*seq)[1], g) != "ByteLevel")
    r.refuse(g + ".type", "is " + Reader::shown((*seq)[1].at("type")), "expected ByteLevel");
  check_byte_level(r, (*seq)[1], g, false);
  return PreTokenizer::kLlama3;
}

// The leading special token of a TemplateProcessing (also inside a Sequence of processors).
std::string template_bos(const json& pp) {
  if (!pp.is_object()) return "";
  if (pp.value("type", "") == "Sequence" && pp.contains("processors") &&
      pp.at("processors").is_array())
    for (const json& p : pp.at("processors"))
      if (std::string s = template_bos(p); !s.empty()) return s;
  if (pp.value("type", "") != "TemplateProcessing" || !pp.contains("single") ||
      !pp.at("single").is_array() || pp.at("single").empty())
    return "";
  const json& first = pp.at("single").front();
  if (first.is_object() && first.contains("SpecialToken") && first.at("SpecialToken").is_object())
    return first.at("SpecialToken").value("id", "");
  return "";
}

}  // namespace

char32_t byte_level_char(uint8_t b) { return byte_chars()[b]; }

BpeTokenizer bpe_from_tokenizer_json(const std::string& path, const std::string& where) {
  const json root = read_json_input(path, "a tokenizer.json");
  const Reader r{path, where};
  if (!root.is_object()) r.refuse("", "is not a JSON object", kFix);
  const json& model = member(r, root, "model", "model");
  if (!model.is_object()) r.refuse("model", "is not an object", kFix);
  const std::string type = model.contains("type") ? type_of(r, model, "model") : "BPE";
  if (type != "BPE")
    r.refuse("model.type", "is '" + type + "'",
             "only byte-level BPE (GPT-2, Llama 3) is read; WordPiece, WordLevel and Unigram "
             "(SentencePiece) are not");
  if (model.value("byte_fallback", false) == true)
    r.refuse("model.byte_fallback", "is true (a SentencePiece-style BPE: Llama 2, Mistral)",
             "only byte-level BPE (GPT-2, Llama 3) is read");
  expect_unset(r, model, "dropout", "model.dropout");
  expect_unset(r, model, "continuing_subword_prefix", "model.continuing_subword_prefix");
  expect_unset(r, model, "end_of_word_suffix", "model.end_of_word_suffix");
  if (root.contains("normalizer") && !root.at("normalizer").is_null())
    r.refuse("normalizer", "is " + Reader::shown(root.at("normalizer")),
             "only tokenizers without a normalizer (GPT-2, Llama 3: null) are read");

  BpeModel m;
  m.pre_tokenizer = read_pre_tokenizer(r, root);
  m.ignore_merges = model.value("ignore_merges", false) == true;
  const json& vocab = member(r, model, "vocab", "model.vocab");
  if (!vocab.is_object()) r.refuse("model.vocab", "is not an object of token: id", kFix);
  std::string bytes;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (1ull << 31))
      r.refuse("model.vocab",
               fmt::format("has id {} for {}", Reader::shown(id), Reader::shown(json(token))),
               "ids are integers below 2^31");
    if (!byte_level_decode(token, bytes))
      r.refuse("model.vocab",
               "has " + Reader::shown(json(token)) + ", not a token of ByteLevel's alphabet", kFix);
    m.vocab[bytes] = static_cast<uint32_t>(id.get<uint64_t>());
  }
  for (int b = 0; b < 256; ++b)
    if (!m.vocab.count(std::string(1, static_cast<char>(b))))
      r.refuse("model.vocab", fmt::format("has no token for byte {}", b),
               "a byte-level BPE has all 256 bytes");
  const json& merges = member(r, model, "merges", "model.merges");
  if (!merges.is_array()) r.refuse("model.merges", "is not an array", kFix);
  std::string a, b;
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    const std::string field = fmt::format("model.merges[{}]", i);
    std::string left, right;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.refuse(field, "is " + Reader::shown(e) + ", not \"left right\"", kFix);
      left = s.substr(0, sp), right = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>(), right = e[1].get<std::string>();
    } else {
      r.refuse(field, "is " + Reader::shown(e) + ", not \"left right\" or [left, right]", kFix);
    }
    if (!byte_level_decode(left, a) || !byte_level_decode(right, b) || !m.vocab.count(a) ||
        !m.vocab.count(b) || !m.vocab.count(a + b))
      r.refuse(field, "is " + Reader::shown(e) + ": it or its parts are not in model.vocab", kFix);
    m.merges[(uint64_t{m.vocab.at(a)} << 32) | m.vocab.at(b)] =
        static_cast<uint32_t>(i);  // a repeat: the last wins
  }
  if (root.contains("added_tokens") && !root.at("added_tokens").is_null()) {
    const json& added = root.at("added_tokens");
    if (!added.is_array()) r.refuse("added_tokens", "is not an array", kFix);
    for (size_t i = 0; i < added.size(); ++i) {
      const json& t = added[i];
      const std::string field = fmt::format("added_tokens[{}]", i);
      if (!t.is_object() || !t.contains("id") || !t.at("id").is_number_unsigned() ||
          !t.contains("content") || !t.at("content").is_string() ||
          t.at("id").get<uint64_t>() >= (1ull << 31))
        r.refuse(field, "is " + Reader::shown(t) + ", not {\"id\": ..., \"content\": ...}", kFix);
      if (t.value("special", false) != true)
        r.refuse(
            field + ".special", "is false for " + Reader::shown(t.at("content")),
            "only special added tokens are read (tokenizers would match the others inside text)");
      m.special_tokens.emplace_back(t.at("content").get<std::string>(),
                                    static_cast<uint32_t>(t.at("id").get<uint64_t>()));
    }
  }
  auto has_special = [&](const std::string& s) {
    for (const auto& [name, id] : m.special_tokens)
      if (name == s) return true;
    return false;
  };
  m.document_start = root.contains("post_processor") ? template_bos(root.at("post_processor")) : "";
  if (!m.document_start.empty() && !has_special(m.document_start))
    r.refuse("post_processor",
             "starts with '" + m.document_start + "', which is not in added_tokens", kFix);
  if (m.document_start.empty() && has_special("<|endoftext|>")) m.document_start = "<|endoftext|>";
  return BpeTokenizer(std::move(m));
}

}  // namespace fullshard
