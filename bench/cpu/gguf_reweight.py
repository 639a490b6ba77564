#!/usr/bin/env python3
"""A same-shape, random-weight copy of a GGUF model, for timing on a machine the real file cannot be copied to.

  gguf_reweight.py split MODEL.gguf HEAD.bin MANIFEST.json   (needs the PyPI `gguf` package)
      HEAD.bin: the file's bytes before the tensor data (header, metadata with the tokenizer, tensor infos);
      MANIFEST.json: each tensor's type, offset from the data start and size in bytes.
  gguf_reweight.py build HEAD.bin MANIFEST.json OUT.gguf      (Python standard library only)
      writes HEAD.bin then random tensor data of the same types and sizes: F32 tensors (norms) are 1.0, block
      types get random codes and fixed, moderate fp16 scales (no NaN, inf or subnormal), F16/BF16 small values.

Both weft and llama.cpp then read identical bytes with the original's architecture, vocabulary, tensor types
and shapes, so their throughput is the original's (the work does not depend on the values; the generated
tokens are meaningless). Used by bench/cpu/device_run.sh.
"""
import json
import os
import struct
import sys

# bytes per block and the offsets of fp16 scale fields, with the value each gets (ggml-common.h layouts)
BLOCKS = {
    "Q4_0": (18, [(0, 0x2000)]),
    "Q4_1": (20, [(0, 0x2000), (2, 0xA000)]),
    "Q5_0": (22, [(0, 0x2000)]),
    "Q5_1": (24, [(0, 0x2000), (2, 0xA000)]),
    "Q8_0": (34, [(0, 0x1C00)]),
    "Q2_K": (84, [(80, 0x2000), (82, 0x2000)]),
    "Q3_K": (110, [(108, 0x2000)]),
    "Q4_K": (144, [(0, 0x2000), (2, 0x2000)]),
    "Q5_K": (176, [(0, 0x2000), (2, 0x2000)]),
    "Q6_K": (210, [(208, 0x1C00)]),
}


def split(model, head, manifest):
    import gguf

    r = gguf.GGUFReader(model)
    start = r.data_offset
    with open(model, "rb") as f:
        hb = f.read(start)
    with open(head, "wb") as f:
        f.write(hb)
    tensors = [
        {"name": t.name, "type": t.tensor_type.name, "offset": int(t.data_offset - start), "nbytes": int(t.n_bytes)}
        for t in r.tensors
    ]
    size = os.path.getsize(model)
    with open(manifest, "w") as f:
        json.dump({"data_start": start, "file_size": size, "tensors": tensors}, f)


def fill(ttype, n):
    if ttype == "F32":
        return bytearray(struct.pack("<f", 1.0) * (n // 4))
    buf = bytearray(os.urandom(n))
    if ttype in ("F16", "BF16"):  # small finite values: clear the top exponent bits
        hi = buf[1::2]
        buf[1::2] = bytes(b & 0x3B for b in hi) if ttype == "F16" else bytes((b & 0xBB) | 0x38 for b in hi)
        return buf
    bb, scales = BLOCKS[ttype]
    nb = n // bb
    for off, val in scales:
        buf[off::bb] = bytes([val & 0xFF]) * nb
        buf[off + 1 :: bb] = bytes([val >> 8]) * nb
    return buf


def build(head, manifest, out):
    m = json.load(open(manifest))
    with open(out, "wb") as f:
        f.write(open(head, "rb").read())
        pos = 0
        for t in sorted(m["tensors"], key=lambda t: t["offset"]):
            if t["offset"] > pos:
                f.write(b"\0" * (t["offset"] - pos))
            f.write(fill(t["type"], t["nbytes"]))
            pos = t["offset"] + t["nbytes"]
        tail = m["file_size"] - m["data_start"] - pos
        if tail > 0:
            f.write(b"\0" * tail)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "split":
        split(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "build":
        build(*sys.argv[2:])
    else:
        sys.exit(__doc__)
