#!/usr/bin/env python3
"""Cut a byte-level BPE tokenizer.json down to the first V ids, for random-weight benchmark checkpoints at a real
shape (the Llama-3.1-8B shape has V = 128256; only the Qwen3 tokenizer is on hand here, with 151,669 ids).
Keeps vocab entries with id < V and the merges whose two parts and result all survive, so the cut tokenizer is
a consistent BPE; drops added tokens at or past V. The text it encodes is irrelevant to the timings.
usage: vocab_for_shape.py IN_tokenizer.json OUT_tokenizer.json [V=128256]"""
import json
import sys

src, dst = sys.argv[1], sys.argv[2]
V = int(sys.argv[3]) if len(sys.argv) > 3 else 128256
tj = json.load(open(src, encoding="utf-8"))
vocab = {t: i for t, i in tj["model"]["vocab"].items() if i < V}
merges = []
for m in tj["model"]["merges"]:
    a, b = m.split(" ", 1) if isinstance(m, str) else m
    if a in vocab and b in vocab and (a + b) in vocab:
        merges.append(m)
tj["model"]["vocab"] = vocab
tj["model"]["merges"] = merges
tj["added_tokens"] = [a for a in tj.get("added_tokens", []) if a["id"] < V]
json.dump(tj, open(dst, "w", encoding="utf-8"), ensure_ascii=False)
print(f"{dst}: {len(vocab)} ids < {V}, {len(merges)} merges, {len(tj['added_tokens'])} added tokens")
