#pragma once
// `fullshard data tokenize IN... -o OUT.bin` (nanoGPT's prepare.py: text or JSONL through the
// byte-level tokenizer or a BPE into an llm.c token file, optionally splitting off a validation
// file) and `fullshard data inspect PATH` (what a token file or set of shards holds). docs/data.md.
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace fullshard::cli {

struct DataFlags {
  std::vector<std::string> inputs;  // tokenize: text / JSONL files, folders or globs
  std::string out;                  // tokenize: the token file
  std::string format = "auto";      // how inputs are read (data_format_name)
  std::string tokenizer = "byte";
  std::optional<std::string> bos,
      eos;  // special tokens around each JSONL document (unset: the tokenizer's)
  std::string dtype = "uint16";
  bool no_header = false;   // nanoGPT's headerless layout
  double val_fraction = 0;  // tokenize: the last fraction of tokens goes to val_out
  std::string val_out;
  int64_t vocab_size = 0;  // inspect: check every token is below it (0: no check)
  CLI::App* tokenize = nullptr;
  CLI::App* inspect = nullptr;
};

CLI::App* add_data_command(CLI::App& app, DataFlags& flags);
int cmd_data(const DataFlags& flags);

}  // namespace fullshard::cli
