#pragma once
// Where a model-config field is, in error messages: a file name gets "file: field"
// ("config.json: hidden_size"), a JSON path gets "path.field" ("model.dim").
#include <string>

namespace fullshard {

std::string field_path(const std::string& where, const std::string& field);

}  // namespace fullshard
