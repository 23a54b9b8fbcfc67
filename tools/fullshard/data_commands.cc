#include "tools/fullshard/data_commands.h"

#include <iostream>

#include <fmt/format.h>

#include "core/common/error.h"
#include "core/common/input_file.h"
#include "core/common/output_file.h"
#include "core/common/user_text.h"
#include "core/data/token_source.h"

namespace fullshard::cli {
namespace {

DataFormat parse_format(const std::string& f) {
  for (DataFormat d : {DataFormat::kAuto, DataFormat::kLlmc, DataFormat::kUInt16,
                       DataFormat::kUInt32, DataFormat::kText, DataFormat::kJsonl})
    if (f == data_format_name(d)) return d;
  throw InputError("--format", "is '" + f + "'", "use auto, llmc, uint16, uint32, text or jsonl");
}

int tokenize(const DataFlags& f) {
  if (!(f.val_fraction >= 0 && f.val_fraction < 1))  // NaN too (it passed both comparisons)
    throw InputError("--val-fraction", fmt::format("is {}", f.val_fraction),
                     "give a fraction in [0, 1), e.g. 0.1");
  if ((f.val_fraction > 0) != !f.val_out.empty())
    throw InputError(f.val_out.empty() ? "--val-output" : "--val-fraction", "is missing",
                     "give --val-fraction F together with --val-output VAL.bin");
  for (const auto& in : f.inputs) refuse_output_over_input("-o", f.out, {in});
  DocumentTokens doc;
  doc.bos = f.bos;
  doc.eos = f.eos;
  const TextTokenizer tok = make_text_tokenizer(f.tokenizer, "--tokenizer", doc);
  const TokenDType dtype = f.dtype == "uint32" ? TokenDType::kUInt32 : TokenDType::kUInt16;
  if (dtype == TokenDType::kUInt16 && tok.vocab_size > 65536)
    throw InputError("--dtype",
                     fmt::format("is uint16, but the tokenizer's vocabulary is {}", tok.vocab_size),
                     "use --dtype uint32");
  // Text in, tokens out: the inputs go through the tokenizer in the order given.
  std::vector<uint32_t> tokens;
  for (const auto& in : f.inputs) {
    DataFormat fmt_in = parse_format(f.format);
    if (fmt_in != DataFormat::kAuto && fmt_in != DataFormat::kText && fmt_in != DataFormat::kJsonl)
      throw InputError("--format", "is '" + f.format + "'",
                       "tokenize reads text or jsonl (token files are tokenized already)");
    for (const auto& p : expand_data_path(in, "data tokenize")) {
      const DataFormat by_ext = p.ends_with(".jsonl") ? DataFormat::kJsonl : DataFormat::kText;
      if (fmt_in == DataFormat::kAuto && !p.ends_with(".txt") && !p.ends_with(".jsonl") &&
          !p.ends_with(".md") && !p.ends_with(".text"))
        throw InputError("data tokenize", "'" + p + "' is not .txt, .md or .jsonl",
                         "give --format text or jsonl");
      if (fmt_in == DataFormat::kAuto) fmt_in = by_ext;
    }
    auto src = open_token_source(in, fmt_in, "data tokenize", &tok);
    std::vector<int64_t> t(static_cast<size_t>(src->size()));
    src->read(0, src->size(), t.data());
    for (int64_t x : t) tokens.push_back(static_cast<uint32_t>(x));
  }
  const auto n_val = static_cast<size_t>(static_cast<double>(tokens.size()) * f.val_fraction);
  std::vector<uint32_t> val(tokens.end() - static_cast<std::ptrdiff_t>(n_val), tokens.end());
  tokens.resize(tokens.size() - n_val);
  if (!f.val_out.empty()) {
    refuse_output_over_input("--val-output", f.val_out, {f.out});
    write_token_file(f.val_out, val, dtype, !f.no_header, "--val-output");
  }
  write_token_file(f.out, tokens, dtype, !f.no_header, "-o");
  const char* layout = f.no_header ? "headerless" : "llm.c header";
  std::cout << fmt::format("wrote {} {} tokens ({}, {}, vocabulary {}) to {}\n", tokens.size(),
                           token_dtype_name(dtype), layout, tok.kind, tok.vocab_size,
                           printable(f.out, 1024));
  if (!f.val_out.empty())
    std::cout << fmt::format("wrote {} validation tokens (the last {:g}%) to {}\n", val.size(),
                             100 * f.val_fraction, printable(f.val_out, 1024));
  return 0;
}

int inspect(const DataFlags& f) {
  const std::string path = f.inputs.at(0);
  const std::vector<std::string> files = expand_data_path(path, "data inspect");
  const DataFormat fmt_in = parse_format(f.format);
  int64_t total = 0;
  for (const auto& p : files) {
    if (fmt_in == DataFormat::kText || fmt_in == DataFormat::kJsonl ||
        (fmt_in == DataFormat::kAuto &&
         (p.ends_with(".txt") || p.ends_with(".jsonl") || p.ends_with(".md")))) {
      auto src = open_token_source(p, fmt_in, "data inspect");
      std::cout << fmt::format("{}: {}\n", printable(p, 1024), src->describe());
      total += src->size();
      continue;
    }
    const TokenFileFormat tf = fmt_in == DataFormat::kUInt16   ? TokenFileFormat::kUInt16
                               : fmt_in == DataFormat::kUInt32 ? TokenFileFormat::kUInt32
                               : fmt_in == DataFormat::kLlmc   ? TokenFileFormat::kLlmc
                                                               : TokenFileFormat::kAuto;
    TokenFile t(p, tf, "data inspect");
    uint32_t max_token = 0;
    for (int64_t i = 0; i < t.size(); ++i) max_token = std::max(max_token, t.token(i));
    std::cout << fmt::format("{}: {} {} tokens, {}, largest token {}\n", printable(p, 1024),
                             t.size(), token_dtype_name(t.dtype()),
                             t.has_header() ? "llm.c header" : "headerless", max_token);
    total += t.size();
  }
  if (f.vocab_size > 0)
    open_token_source(path, fmt_in, "data inspect")->check_vocab(f.vocab_size, "--vocab-size");
  if (files.size() > 1) std::cout << fmt::format("{} files, {} tokens\n", files.size(), total);
  return 0;
}

}  // namespace

CLI::App* add_data_command(CLI::App& app, DataFlags& f) {
  CLI::App* c = app.add_subcommand("data", "prepare and inspect training data (docs/data.md)");
  c->require_subcommand(1);
  f.tokenize =
      c->add_subcommand("tokenize", "text or JSONL through a tokenizer into an llm.c token file");
  f.tokenize
      ->add_option(
          "inputs", f.inputs,
          "text (.txt) or JSONL (.jsonl, a \"text\" field per line) files, folders or globs")
      ->required();
  f.tokenize->add_option("-o,--output", f.out, "the token file to write")->required();
  f.tokenize->add_option("--format", f.format,
                         "how inputs are read: auto (by extension), text or jsonl");
  f.tokenize->add_option(
      "--tokenizer", f.tokenizer,
      "byte (token = UTF-8 byte, vocabulary 256, the default), a Hugging Face tokenizer.json "
      "(byte-level BPE: GPT-2, Llama 3) or a tiktoken ranks file (gpt2.tiktoken: GPT-2, vocabulary "
      "50257; Llama 3's tokenizer.model: 128000 ranks, vocabulary 128256)");
  f.tokenize->add_option(
      "--bos", f.bos,
      "special token before every JSONL document (default: the tokenizer's, <|endoftext|> for "
      "GPT-2, <|begin_of_text|> for Llama 3; \"\" for none)");
  f.tokenize->add_option("--eos", f.eos,
                         "special token after every JSONL document (default: none)");
  f.tokenize->add_option("--dtype", f.dtype, "uint16 (default) or uint32")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  f.tokenize->add_flag("--no-header", f.no_header,
                       "write nanoGPT's headerless layout instead of llm.c's header");
  f.tokenize->add_option("--val-fraction", f.val_fraction,
                         "write the last fraction of the tokens to --val-output");
  f.tokenize->add_option("--val-output", f.val_out, "the validation token file");
  f.inspect =
      c->add_subcommand("inspect", "tokens, dtype, header and largest token of token files");
  f.inspect->add_option("path", f.inputs, "a token file, a folder of shards or a glob")
      ->required()
      ->expected(1);
  f.inspect->add_option("--format", f.format,
                        "auto (llm.c header or .txt/.jsonl), llmc, uint16, uint32, text or jsonl");
  f.inspect->add_option("--vocab-size", f.vocab_size, "check that every token is below this");
  return c;
}

int cmd_data(const DataFlags& f) {
  if (f.inspect && *f.inspect) return inspect(f);
  return tokenize(f);
}

}  // namespace fullshard::cli
