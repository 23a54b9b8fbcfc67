#pragma once
// A Hugging Face tokenizer.json (what `tokenizers` saves; GPT-2's and Llama 3's) read as a
// byte-level BPE (core/data/bpe_tokenizer.h).
//
// NOTE [What tokenizer.json is read]: the parts that decide the ids of ordinary text:
//  - model: "BPE" with its vocab and merges (strings "a b" or pairs ["a", "b"]) and
//    ignore_merges; tokens are in ByteLevel's alphabet (GPT-2's bytes_to_unicode: byte b is the
//    character b when printable, else U+0100 + a running index), decoded to bytes here;
//  - pre_tokenizer: ByteLevel with its regex (GPT-2), or a Sequence of Split with Llama 3's
//    regex (behavior Isolated) and ByteLevel without its regex (Llama 3); add_prefix_space false;
//  - added_tokens: the special tokens (ids beyond the vocab or in it);
//  - post_processor: a TemplateProcessing's leading special token (Llama 3's <|begin_of_text|>)
//    is the token documents start with; without one, <|endoftext|> when there is one (GPT-2).
// Anything that changes ids and is not read is refused in one line naming its field: another
// model type (WordPiece, Unigram = SentencePiece, WordLevel), a normalizer, byte_fallback
// (SentencePiece-style BPE: Llama 2, Mistral), dropout, subword prefixes or suffixes, another
// Split pattern, add_prefix_space, an added token that is not special (tokenizers matches those
// inside text). The decoder and truncation/padding do not change ids and are not read.
#include <string>

#include "core/data/bpe_tokenizer.h"

namespace fullshard {

// Throws InputError (where) naming the file and the field.
BpeTokenizer bpe_from_tokenizer_json(const std::string& path, const std::string& where);

// GPT-2's bytes_to_unicode: the character byte b stands for in a byte-level vocabulary.
char32_t byte_level_char(uint8_t b);

}  // namespace fullshard
