#pragma once
// Parsing JSON the user gave (scenarios, hardware profiles, Hugging Face configs, calibration
// measurements, reports read by `plot`): the one way fullshard reads JSON from outside.
//
// NOTE [Bounded JSON nesting]: nlohmann's parser keeps its own stack, but dump(), operator==
// and every recursive walk over a value (ours: error messages, path rewriting, report
// parsing) recurse once per level, so `[[[[...]]]]` 50,000 deep overflows the thread's stack
// in whichever comes first. No input fullshard reads needs more than ~6 levels; refusing more
// than kMaxJsonDepth before anything else sees the value makes every later walk safe.
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace fullshard {

inline constexpr size_t kMaxJsonDepth = 64;

// Parses `text` (read from `source`, a file name used in messages). Throws InputError whose
// where is "source:line:column" for malformed JSON (including numbers too large for a double,
// such as 1e999) and for nesting deeper than kMaxJsonDepth, and whose where is `source` for a
// key given twice in one object (naming its JSON path).
nlohmann::json parse_json_text(const std::string& text, const std::string& source);

// read_input_file (regular files only, at most kMaxInputFileBytes) + parse_json_text.
// `what` completes "give the path of ..." in file errors, e.g. "a scenario .json file".
nlohmann::json read_json_input(const std::string& path, const std::string& what);

}  // namespace fullshard
