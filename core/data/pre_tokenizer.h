#pragma once
// The pre-tokenizers of byte-level BPE: the text is cut into pieces by a regular expression
// before BPE merges the bytes of each piece (merges never cross a piece). Two patterns, matched
// by hand alternative by alternative (the first alternative that matches at a position wins,
// with the regex's backtracking), Unicode classes from ICU as Rust's regex crate (tiktoken) and
// Oniguruma (Hugging Face tokenizers) define them: letters \p{L}, numbers \p{N}, white space \s
// (the White_Space property).
//
// NOTE [GPT-2 pre-tokenizer]: tiktoken's r50k pattern is
//   '(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s
// (tokenizers' ByteLevel pre-tokenizer with use_regex: the same pieces): the contractions
// ('s 't 're 've 'm 'll 'd, case-sensitive); an optional space and a run of letters; of numbers;
// of other characters; a run of white space that reaches the end of the text; a run of white
// space minus its last character when a non-space follows (so that the space goes with the next
// word); one white space character.
//
// NOTE [Llama 3 pre-tokenizer]: Llama 3's pattern (Meta's tiktoken tokenizer.model and the
// Split pre-tokenizer of its tokenizer.json; tiktoken's cl100k differs only in possessive
// quantifiers, which change no match here) is
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// the contractions case-insensitive (Unicode simple case folding: 's' also matches 'S' and
// U+017F LATIN SMALL LETTER LONG S); one character that is not a letter, a number, \r or \n (a
// space, punctuation) followed by a run of letters; up to 3 digits; an optional space, a run of
// other characters and the line breaks after them; white space up to its last line break; white
// space minus its last character before a non-space; a run of white space.
#include <string>
#include <string_view>
#include <vector>

namespace fullshard {

enum class PreTokenizer : uint8_t { kGpt2, kLlama3 };
const char* pre_tokenizer_name(PreTokenizer p);

// Splits UTF-8 `text` into pieces whose concatenation is `text`. Throws InputError (where) at
// the first byte that is not UTF-8.
std::vector<std::string_view> pre_tokenize(PreTokenizer p, std::string_view text,
                                           const std::string& where);
std::vector<std::string_view> split_gpt2(std::string_view text, const std::string& where);
std::vector<std::string_view> split_llama3(std::string_view text, const std::string& where);

// The regex of Llama 3's Split pre-tokenizer as tokenizer.json spells it (a tokenizer.json
// with another pattern is refused: only these two are matched).
inline constexpr std::string_view kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace fullshard
