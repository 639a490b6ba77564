#!/usr/bin/env python3
"""Small synthetic HF tokenizers, one per pipeline feature, with the `tokenizers` package's own results.

Writes tests/data/tokenizer/synthetic.json: {"tokenizers": [{"name", "tokenizer": <tokenizer.json object>,
"cases": [{"text", "ids", "ids_special", "ids_plain", "decoded", "decoded_skip"}]}]} where
  ids          = encode(text, add_special_tokens=False)
  ids_special  = encode(text, add_special_tokens=True)
  ids_plain    = encode(text, add_special_tokens=False) with encode_special_tokens=True
  decoded      = decode(ids_special, skip_special_tokens=False)
  decoded_skip = decode(ids_special, skip_special_tokens=True)
The vocabularies are trained here with BpeTrainer on a fixed corpus (deterministic).

Usage: /tmp/venv/bin/python tools/gen_tok_synthetic.py
"""
import json
import os

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer", "synthetic.json")

TRAIN = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, hello there! the world is big.",
    "numbers 123 4567 89 and 2024-06-01 at 10:30",
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park with her friends.",
    "tokenizers split text into pieces; pieces become ids",
    "café naïve résumé über straße",
] * 20

CASES = [
    "",
    "hello world",
    " hello  world ",
    "Hello World!",
    "The quick brown fox, 123 jumps: over 4567 dogs.",
    "café résumé ÜBER Straße",
    "e\u0301 A\u030a ﬁ ＡＢ",
    "emoji 🦙 and 中文 x",
    "tabs\tand\nnewlines\n\n  end",
    "<s>hello</s> world <unk>",
    "say [MASK] now, [MASK]x and x[MASK] [MASK]",
    "a  <sep>  b <sep>c",
    "Hey MyTok mytok MYTOK",
    "one<sep>two<|x|>three",
    "dots... and---dashes!!! ok?",
    "12345 6789 0.5",
    "   ",
]


def train(tok, vocab_size=320, special=("<unk>", "<s>", "</s>"), alphabet=None):
    tr = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special),
                             initial_alphabet=alphabet or [], show_progress=False)
    tok.train_from_iterator(TRAIN, tr)
    return tok


def add_byte_tokens(tok):
    """Adds <0x00>..<0xFF> to the model vocabulary (not as added tokens), as SentencePiece conversions do."""
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    nxt = max(max(vocab.values()), max((a["id"] for a in j["added_tokens"]), default=-1)) + 1
    for b in range(256):
        vocab["<0x%02X>" % b] = nxt
        nxt += 1
    return Tokenizer.from_str(json.dumps(j))


def llama_legacy():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    train(tok)
    tok = add_byte_tokens(tok)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


def metaspace_nfkc():
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    train(tok, alphabet=list("ʼ"))
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    return tok


def metaspace_nosplit():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.NFD()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False)
    train(tok)
    tok = add_byte_tokens(tok)
    tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="always"),
                                     decoders.ByteFallback()])
    return tok


def splits():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.Strip(), normalizers.Replace(Regex("[0-9]{4}"), "####")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[,;:]"), behavior="merged_with_previous"),
        pre_tokenizers.Split("-", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\.+"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"!+"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"[a-z]+"), behavior="isolated", invert=True),
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ])
    train(tok, special=("<s>", "</s>"), alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.RobertaProcessing(("</s>", 1), ("<s>", 0))
    return tok


def added_flags():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    train(tok, special=("<s>", "</s>", "<unk>"), alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, single_word=True, normalized=False),
                            AddedToken("<|x|>", special=True)])
    tok.add_tokens([AddedToken("<sep>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("MyTok", normalized=True, single_word=False)])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return tok


def main():
    out = []
    for name, make in [("llama_legacy", llama_legacy), ("metaspace_nfkc", metaspace_nfkc),
                       ("metaspace_nosplit", metaspace_nosplit), ("splits", splits), ("added_flags", added_flags)]:
        tok = make()
        cases = []
        for text in CASES:
            tok.encode_special_tokens = False
            ids = tok.encode(text, add_special_tokens=False).ids
            ids_special = tok.encode(text, add_special_tokens=True).ids
            tok.encode_special_tokens = True
            plain = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = False
            cases.append({"text": text, "ids": ids, "ids_special": ids_special, "ids_plain": plain,
                          "decoded": tok.decode(ids_special, skip_special_tokens=False),
                          "decoded_skip": tok.decode(ids_special, skip_special_tokens=True)})
        out.append({"name": name, "tokenizer": json.loads(tok.to_str()), "cases": cases})
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/gen_tok_synthetic.py, tokenizers " + tokenizers.__version__,
                   "tokenizers": out}, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
