#pragma once
// Typed access to user-written JSON with errors that name the exact JSON path, the bad value
// and the fix (the InputError channel of docs/architecture.md). Shared by the scenario parser
// and the hardware-profile loader; not a general JSON library.
//
// Paths are written the way users read them: "fsdp.mesh.shape[1]", "training.seq_len". The
// root object has the empty path; a child of the root is just its key.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fullshard::json_reader {

using nlohmann::json;

std::string child_path(const std::string& parent, const std::string& key);  // "a.b"
std::string index_path(const std::string& parent, size_t index);            // "a[3]"

// A compact, one-line rendering of a value for messages, truncated past ~60 characters:
// `"8192"`, `[4,4]`, `{"mode":"full"}`.
std::string show(const json& v);
// show(v) plus its JSON type where that helps: `"8192" (a string)`, `null`, `true`.
std::string describe(const json& v);
// Joins names as "'a', 'b' or 'c'" (quote "'"), "\"a\", \"b\" or \"c\"" (quote "\"", for values
// to write) or "a, b or c" (quote "").
std::string join(const std::vector<std::string>& items, const std::string& quote = "'",
                 const std::string& last_sep = " or ");

// Levenshtein distance, case-insensitive.
size_t edit_distance(const std::string& a, const std::string& b);
// The candidate closest to `name` when it is close enough to be a plausible typo.
std::optional<std::string> closest(const std::string& name,
                                   const std::vector<std::string>& candidates);

// Hint for an unknown key: a sentence such as "it belongs in training: move it to
// training.seq_len", or nullopt. Called only when no known field is a close typo.
using UnknownKeyHint = std::function<std::optional<std::string>(const std::string& key)>;

// Throws unless `j` is an object. `example` is what to write instead, e.g. {"seq_len": 4096}.
void require_object(const json& j, const std::string& path, const std::string& example);
// Throws on the first key (in document order) that is not in `known`, suggesting the closest
// known name ("did you mean 'seq_len'?"), else `hint`, else listing every known field.
void reject_unknown_fields(const json& obj, const std::string& path,
                           const std::vector<std::string>& known, const UnknownKeyHint& hint = {});
// Throws "missing" for a required key of `obj` (an object at `path`).
void require_field(const json& obj, const std::string& path, const std::string& key,
                   const std::string& fix);

// Typed getters. `v` is the value at `path`. Integers accept JSON integers and floats with an
// integral value (8192.0); ranges are inclusive. `example` completes "write ..." in the fix.
int64_t get_int(const json& v, const std::string& path, int64_t min, int64_t max,
                const std::string& example);
double get_number(const json& v, const std::string& path, double min, bool min_inclusive,
                  double max, bool max_inclusive, const std::string& example);
bool get_bool(const json& v, const std::string& path);
std::string get_string(const json& v, const std::string& path, const std::string& example);
// A string that must be one of `choices`; suggests the closest choice.
std::string get_choice(const json& v, const std::string& path,
                       const std::vector<std::string>& choices);

// Reads and parses a JSON file (fullshard::read_json_input, core/common/json_file.h). Missing
// file, not a regular file (FIFO, device), over 256 MiB, malformed JSON (with line and column),
// nesting deeper than 64 levels and duplicate keys (with their JSON path) are InputErrors whose
// where is the file name (plus ":line:column" for syntax errors).
json read_json_file(const std::string& path);

}  // namespace fullshard::json_reader
