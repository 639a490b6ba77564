#!/usr/bin/env python3
"""Write a small random-weight llama-architecture F32 GGUF for quant-type end-to-end tests.

Every 2-D weight has a row length (ne[0]) that is a multiple of 256, so llama-quantize can cut
every tensor into blocks of every type weft supports, K-quants included (QK_K = 256):

    token_embd   [hidden, vocab]      rows of `hidden`   (also the output matrix: tied)
    attn_q       [hidden, heads*hd]   rows of `hidden`
    attn_k/v     [hidden, kv*hd]      rows of `hidden`
    attn_output  [heads*hd, hidden]   rows of heads*hd  (= hidden)
    ffn_gate/up  [hidden, ffn]        rows of `hidden`
    ffn_down     [ffn, hidden]        rows of `ffn`

The vocabulary (512-token SentencePiece, tokenizer.ggml.model = "llama") is copied from
stories260K.gguf so the files carry a working tokenizer (BOS added by default).

Weights are N(0, sigma) from numpy's legacy RandomState(seed), which is stable across numpy
versions, so the file is byte-for-byte reproducible. Scales are chosen for "healthy" logit
margins: the tied output gives logits = E . (g * rmsnorm(x)) with E ~ N(0, 1) and g = 1, so
the logits have a standard deviation of about sqrt(hidden) = 16 and the top-2 gap of 512
such values is usually a few units. (llama.cpp's 8-bit activation quantization still moves
the margins of the quantized copies by up to ~1.7 against a float64 reference, so some steps
are too close to compare: see golden.json.) The attention output and FFN down projections
are scaled up (gains 16 and 64) so the residual stream is not just the input token's embedding (which makes greedy decoding
repeat the input token). q/k keep sigma 1/sqrt(hidden) (gain 1): smaller gains make attention
a plain running average and greedy decoding settles into repeating one token; larger ones make
the softmax amplify llama.cpp's activation rounding. The defaults (and seed 8) were picked by a
small sweep for long agreement between llama.cpp and a float64 reference over the quant types
while the greedy continuation still changes token at most steps.

usage: make_quant_model.py OUT.gguf [--vocab-from stories260K.gguf] [--layers 1] [--seed 8]
       [--qk-gain 1] [--attn-out-gain 16] [--ffn-down-gain 64]
"""
import argparse
import sys

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover
    sys.exit("needs the gguf package (use /tmp/venv/bin/python)")


def copy_vocab(writer, path):
    """Copy the SPM vocabulary (tokens, scores, types, special ids) from another GGUF."""
    r = gguf.GGUFReader(path)
    f = r.fields
    if f["tokenizer.ggml.model"].contents() != "llama":
        sys.exit(f"{path}: tokenizer.ggml.model is not 'llama'")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(f["tokenizer.ggml.tokens"].contents())
    writer.add_token_scores(f["tokenizer.ggml.scores"].contents())
    writer.add_token_types(f["tokenizer.ggml.token_type"].contents())
    writer.add_bos_token_id(f["tokenizer.ggml.bos_token_id"].contents())
    writer.add_eos_token_id(f["tokenizer.ggml.eos_token_id"].contents())
    writer.add_unk_token_id(f["tokenizer.ggml.unknown_token_id"].contents())
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    return len(f["tokenizer.ggml.tokens"].contents())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--vocab-from", default="/work/shared/models/stories260K/stories260K.gguf")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--qk-gain", type=float, default=1.0, help="sigma of attn_q/attn_k times sqrt(hidden)")
    ap.add_argument("--attn-out-gain", type=float, default=16.0, help="sigma of attn_output times sqrt(hidden)")
    ap.add_argument("--ffn-down-gain", type=float, default=64.0, help="sigma of ffn_down times sqrt(ffn)")
    a = ap.parse_args()

    hd = a.hidden // a.heads
    if a.hidden % 256 or a.ffn % 256 or a.heads * hd != a.hidden or a.heads % a.kv_heads:
        sys.exit("hidden and ffn must be multiples of 256, heads must divide hidden, kv-heads heads")

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("weft-quant-test")
    w.add_context_length(256)
    w.add_embedding_length(a.hidden)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = copy_vocab(w, a.vocab_from)
    w.add_vocab_size(vocab)

    rng = np.random.RandomState(a.seed)

    def normal(rows, cols, sigma):
        # numpy shape (rows, cols) = GGUF ne [cols, rows]: each row has `cols` elements
        return (rng.standard_normal((rows, cols)) * sigma).astype(np.float32)

    d, f, kvd = a.hidden, a.ffn, a.kv_heads * hd
    w.add_tensor("token_embd.weight", normal(vocab, d, 1.0))
    w.add_tensor("output_norm.weight", np.full(d, 1.0, dtype=np.float32))
    for i in range(a.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32))
        w.add_tensor(p + "attn_q.weight", normal(d, d, a.qk_gain / np.sqrt(d)))
        w.add_tensor(p + "attn_k.weight", normal(kvd, d, a.qk_gain / np.sqrt(d)))
        w.add_tensor(p + "attn_v.weight", normal(kvd, d, 2.0 / np.sqrt(d)))
        w.add_tensor(p + "attn_output.weight", normal(d, d, a.attn_out_gain / np.sqrt(d)))
        w.add_tensor(p + "ffn_norm.weight", (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32))
        w.add_tensor(p + "ffn_gate.weight", normal(f, d, 1.0 / np.sqrt(d)))
        w.add_tensor(p + "ffn_up.weight", normal(f, d, 1.0 / np.sqrt(d)))
        w.add_tensor(p + "ffn_down.weight", normal(d, f, a.ffn_down_gain / np.sqrt(f)))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
