"""Writes the tokenizer.json test files and hf_cases.json (see README.md); run once with
`pip install tokenizers tiktoken regex` in a virtual environment outside the repository:
    python make_hf_cases.py   (in tests/data/bpe)
"""
import base64
import json
import os

import regex
import tiktoken
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA3_PAT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
R50K_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()


def to_unicode(b):
    return "".join(B2U[x] for x in b)


def load_ranks(path):
    ranks = {}
    for line in open(path, "rb"):
        if line.strip():
            tok, r = line.split()
            ranks[base64.b64decode(tok)] = int(r)
    return ranks


def tiktoken_pair(ranks, token, max_rank):
    """The two parts tiktoken's BPE leaves `token` in using ranks below max_rank (its merge)."""
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]
    assert len(parts) == 2, token
    return parts


def main():
    ranks = load_ranks(os.path.join(HERE, "gpt2-first2048.tiktoken"))
    n = len(ranks)
    vocab = {to_unicode(b): r for b, r in ranks.items()}
    merges = []
    for b, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(b) > 1:
            a, c = tiktoken_pair(ranks, b, r)
            merges.append((to_unicode(a), to_unicode(c)))

    # GPT-2's layout: ByteLevel with its regex, <|endoftext|> after the ranks.
    gpt2 = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.post_processor = processors.ByteLevel(trim_offsets=False)
    gpt2.add_special_tokens(["<|endoftext|>"])
    gpt2.save(os.path.join(HERE, "gpt2-first2048.tokenizer.json"), pretty=False)

    # Llama 3's layout on a tokenizer trained here: Split with Llama 3's regex, ByteLevel
    # without its regex, ignore_merges, <|begin_of_text|> by the TemplateProcessing.
    llama_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tiny = Tokenizer(models.BPE())
    tiny.pre_tokenizer = llama_pre
    trainer = trainers.BpeTrainer(vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    sample = os.path.join(HERE, "..", "..", "..", "scenarios", "data", "devils-dictionary", "devils-dictionary.txt")
    tiny.train([sample], trainer)
    j = json.loads(tiny.to_str())
    j["model"]["ignore_merges"] = True
    tiny = Tokenizer.from_str(json.dumps(j))
    tiny.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    bot = tiny.token_to_id("<|begin_of_text|>")
    tiny.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bot)])
    tiny.decoder = decoders.ByteLevel()
    tiny.save(os.path.join(HERE, "llama3-style-tiny.tokenizer.json"), pretty=False)

    # Ordinary text: special tokens spelled in the text are not matched (as llm.c tokenizes).
    gpt2.encode_special_tokens = True
    tiny.encode_special_tokens = True
    llama_tt = tiktoken.Encoding(name="llama3-first2048", pat_str=LLAMA3_PAT, mergeable_ranks=ranks, special_tokens={})
    gpt2_tt = tiktoken.Encoding(name="gpt2-first2048", pat_str=R50K_PAT, mergeable_ranks=ranks, special_tokens={})

    texts = [c["text"] for c in json.load(open(os.path.join(HERE, "cases.json")))["cases"]]
    texts += [
        "It'S THEY'LL we'Re you'VE I'M he'D 'ſ don't",
        "1234567 and 12 apples, 3.14159; 2024-11-24",
        "line one\n\n\nline two\r\n\r\n  indented\n \n\tend",
        "hello!!!\n\nworld...\r\n(ok)?\n",
        "  multiple   spaces\t\there  ",
        "<|endoftext|> is ordinary text <|begin_of_text|>",
        "Ǆemo ǅemo Ⅻ ⅻ ١٢٣٤ ४२ 〇",
        "emoji 👩‍👩‍👧 🇫🇷 ❤️ ok",
        "Привет, мир! Hallo Welt. مرحبا بالعالم. שלום",
    ]
    cases = []
    mismatches = 0
    for t in texts:
        g = gpt2.encode(t, add_special_tokens=False).ids
        if g != gpt2_tt.encode_ordinary(t):
            mismatches += 1
        cases.append({
            "text": t,
            "llama3_pieces": regex.findall(LLAMA3_PAT, t),
            "gpt2_json_ids": g,
            "llama3_tiktoken_ids": llama_tt.encode_ordinary(t),
            "llama3_tiny_json_ids": tiny.encode(t, add_special_tokens=False).ids,
        })
    import tokenizers
    json.dump({"generator": f"tokenizers {tokenizers.__version__}, tiktoken {tiktoken.__version__}, regex {regex.__version__}",
               "cases": cases}, open(os.path.join(HERE, "hf_cases.json"), "w"), ensure_ascii=False)
    print(f"{len(cases)} cases; GPT-2 tokenizer.json vs tiktoken: {mismatches} differ; tiny vocab {tiny.get_vocab_size()}, "
          f"begin_of_text {bot}")


if __name__ == "__main__":
    main()
