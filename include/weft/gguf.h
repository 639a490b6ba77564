/* weft/gguf.h — GGUF v2/v3 reader: validated metadata, tensor directory, canonical tensor set and config.
 *
 * Layout (docs families-and-formats §6.3; gguf-py constants.py): little-endian header
 *   magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv × {key, value}, n_tensors × tensor info,
 *   padding to general.alignment (default 32), tensor data (each tensor at data_start + offset).
 * v2 and v3 are read identically (v3 only added big-endian files, which are refused); v1 is refused.
 *
 * Opening validates the whole header before anything is returned: magic, version, counts against the file
 * size, every string and array length against the end of the file, value types, general.alignment (a power
 * of two), tensor n_dims (1..4), ne > 0, type (ggml types weft decodes: F32 F16 BF16 F64 I8 I16 I32 I64
 * Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K), ne0 a multiple of the type's block size, offsets
 * aligned, data inside the file, no two tensors overlapping, no duplicate keys or tensor names.
 * Errors: WEFT_EIO (open/mmap), WEFT_EFORMAT (corrupt; the message names the file and what is wrong),
 * WEFT_ENOTSUP (GGUF v1, big-endian, a newer version, an unsupported ggml type such as IQ*: names the tensor
 * and type number), WEFT_ENOMEM.
 *
 * Ownership: a handle opened from a file owns a read-only private mmap of it until weft_gguf_tensors hands
 * that mapping to a tensor set (then the set unmaps it when freed). A handle opened from memory never owns
 * the bytes: the caller keeps them alive as long as the handle, any set filled from it and any config whose
 * rope.freq_divisors points into it. Keys, string values and string array elements are copied at open
 * (NUL-terminated, owned by the handle, valid until weft_gguf_close) so they outlive the mapping. */
#ifndef WEFT_GGUF_H
#define WEFT_GGUF_H

#include "weft/common.h"
#include "weft/config.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_gguf weft_gguf;

/* GGUF metadata value types; the numbers are the on-disk codes. */
typedef enum weft_gguf_type {
    WEFT_GGUF_U8 = 0,
    WEFT_GGUF_I8 = 1,
    WEFT_GGUF_U16 = 2,
    WEFT_GGUF_I16 = 3,
    WEFT_GGUF_U32 = 4,
    WEFT_GGUF_I32 = 5,
    WEFT_GGUF_F32 = 6,
    WEFT_GGUF_BOOL = 7,
    WEFT_GGUF_STRING = 8,
    WEFT_GGUF_ARRAY = 9,
    WEFT_GGUF_U64 = 10,
    WEFT_GGUF_I64 = 11,
    WEFT_GGUF_F64 = 12,
    WEFT_GGUF_TYPE_COUNT
} weft_gguf_type;

/* "u32", "string", "array", ...; "?" for an unknown code. */
const char *weft_gguf_type_name(weft_gguf_type t);

/* ggml tensor type number → weft dtype. false for types weft cannot decode (Q8_1, Q8_K, IQ*, TQ*, MXFP4...)
 * and for unknown numbers. weft_gguf_ggml_type_name gives ggml's name ("IQ2_XXS") or "unknown". */
bool weft_gguf_dtype_from_ggml(uint32_t ggml_type, weft_dtype *out);
const char *weft_gguf_ggml_type_name(uint32_t ggml_type);

/* ---- open / close ---- */

/* Maps `path` read-only and validates it (see above). On success *out is a new handle. */
weft_status weft_gguf_open_file(const char *path, weft_gguf **out, weft_err *err);

/* Validates `len` bytes at `data` (not copied; see Ownership). `data` must be 8-byte aligned (WEFT_EINVAL
 * otherwise) so that tensor data at aligned offsets is aligned for its element type. Messages name the
 * source "<memory>". */
weft_status weft_gguf_open_memory(const void *data, size_t len, weft_gguf **out, weft_err *err);

/* Frees the handle and its mapping unless a tensor set took the mapping. NULL is a no-op. */
void weft_gguf_close(weft_gguf *g);

uint32_t weft_gguf_version(const weft_gguf *g);   /* 2 or 3 */
const char *weft_gguf_source(const weft_gguf *g); /* the path, or "<memory>" */
size_t weft_gguf_alignment(const weft_gguf *g);   /* general.alignment or 32 */
size_t weft_gguf_data_offset(const weft_gguf *g); /* file offset of the tensor data section */
const char *weft_gguf_arch(const weft_gguf *g);   /* general.architecture, or NULL when absent/not a string */

/* ---- metadata ---- */

size_t weft_gguf_kv_count(const weft_gguf *g);
const char *weft_gguf_kv_key(const weft_gguf *g, size_t i); /* i < kv_count, in file order */
weft_gguf_type weft_gguf_kv_type(const weft_gguf *g, size_t i);
/* Index of `key`, or -1 when absent. */
int64_t weft_gguf_find(const weft_gguf *g, const char *key);

/* Typed getters. Absent key or an incompatible type: WEFT_EFORMAT naming the file and key (callers with an
 * optional key test weft_gguf_find first).
 * - get_int: any integer type or bool; a u64 above INT64_MAX is WEFT_ERANGE.
 * - get_float: F32 or F64 (converted exactly to double), or any integer type.
 * - get_bool: BOOL only (a stored byte other than 0/1 was already refused at open).
 * - get_str: STRING; *out is NUL-terminated and owned by g; *len (may be NULL) is the stored byte length
 *   (a string may contain NUL bytes; then strlen(*out) < *len). */
weft_status weft_gguf_get_int(const weft_gguf *g, const char *key, int64_t *out, weft_err *err);
weft_status weft_gguf_get_float(const weft_gguf *g, const char *key, double *out, weft_err *err);
weft_status weft_gguf_get_bool(const weft_gguf *g, const char *key, bool *out, weft_err *err);
weft_status weft_gguf_get_str(const weft_gguf *g, const char *key, const char **out, size_t *len,
                              weft_err *err);

/* An array value (a view; valid until weft_gguf_close; numeric element bytes point into the GGUF data, so
 * for a file-backed handle they are valid while the mapping is, see Ownership). Arrays of arrays are refused
 * at open, as llama.cpp's gguf reader refuses them. */
typedef struct weft_gguf_arr {
    weft_gguf_type type; /* element type (never ARRAY) */
    uint64_t count;
    const uint8_t *data;     /* count × element size, little-endian; NULL for STRING */
    const char *const *strs; /* STRING: count NUL-terminated copies; else NULL */
    const uint64_t *lens;    /* STRING: stored byte lengths; else NULL */
} weft_gguf_arr;

/* Absent key or not an array: WEFT_EFORMAT naming the key. */
weft_status weft_gguf_get_arr(const weft_gguf *g, const char *key, weft_gguf_arr *out, weft_err *err);

/* Element i (< count) of an array. arr_int: integer or bool elements (u64 above INT64_MAX saturates);
 * arr_float: any numeric element (F32/F64 exact); arr_str: STRING elements (len may be NULL). On a wrong
 * element type or i >= count they return 0, 0.0 and NULL: callers check `type` once. */
int64_t weft_gguf_arr_int(const weft_gguf_arr *a, uint64_t i);
double weft_gguf_arr_float(const weft_gguf_arr *a, uint64_t i);
const char *weft_gguf_arr_str(const weft_gguf_arr *a, uint64_t i, uint64_t *len);

/* ---- tensor directory (GGUF names and ggml order) ---- */

typedef struct weft_gguf_tensor_info {
    const char *name;   /* as stored ("blk.0.attn_q.weight"); owned by the handle */
    uint32_t ggml_type; /* type number in the file */
    weft_dtype dtype;   /* the matching weft dtype */
    int n_dims;         /* 1..4 */
    int64_t ne[4]; /* ggml order: ne[0] is the contiguous dimension (PyTorch shape reversed); 1 past n_dims */
    uint64_t offset;     /* from the start of the data section (a multiple of the alignment) */
    const uint8_t *data; /* stored bytes (see Ownership) */
    size_t nbytes;       /* (ne0/block)·block_bytes·ne1·ne2·ne3 */
} weft_gguf_tensor_info;

size_t weft_gguf_tensor_count(const weft_gguf *g);
const weft_gguf_tensor_info *weft_gguf_tensor_at(const weft_gguf *g,
                                                 size_t i); /* file order; NULL past end */
const weft_gguf_tensor_info *weft_gguf_tensor_find(const weft_gguf *g, const char *name); /* NULL if absent */

/* ---- translation to weft's model description ---- */

/* The canonical HF name of a GGUF tensor name for `arch` ("llama", "qwen3"), written to out[cap]:
 *   token_embd.weight → model.embed_tokens.weight      output_norm.weight → model.norm.weight
 *   output.weight → lm_head.weight                     rope_freqs.weight → rope_freqs.weight (llama)
 *   blk.N.attn_norm → model.layers.N.input_layernorm   blk.N.ffn_norm → ….post_attention_layernorm
 *   blk.N.attn_{q,k,v,output} → ….self_attn.{q,k,v,o}_proj   blk.N.attn_{q,k}_norm → ….self_attn.{q,k}_norm
 * (qwen3) blk.N.ffn_{gate,up,down} → ….mlp.{gate,up,down}_proj with the .weight suffix (and .bias for
 * projections of llama). N is a decimal without leading zeros. Errors: WEFT_EFORMAT for a name with no
 * mapping (never skipped), WEFT_ENOTSUP for an arch whose names are not mapped (qwen35, nemotron_h...: their
 * GGUF tensors also carry converter transforms, docs §6.5), WEFT_EINVAL if cap is too small. */
weft_status weft_gguf_canonical_name(const char *arch, const char *gguf_name, char *out, size_t cap,
                                     weft_err *err);

/* Adds every tensor of g to `set` under its canonical name, shape = ne reversed (PyTorch order), data
 * pointing at the stored bytes (no conversion; the llama Q/K rows stay in the file's adjacent-pair order,
 * see cfg.rope.adjacent_pairs). A file-backed handle hands its mapping to the set
 * (weft_tensor_set_own_mapping): the set then owns the bytes and the handle, still usable for metadata,
 * must not outlive the set if its tensor data or a config's freq_divisors are used. Calling it a second
 * time on a file-backed handle is WEFT_EINVAL. Errors: as weft_gguf_canonical_name (unknown architecture:
 * WEFT_ENOTSUP; missing general.architecture: WEFT_EFORMAT), and the set's own errors (duplicates). On error
 * the set may hold part of the tensors and the mapping stays with the handle. */
weft_status weft_gguf_tensors(weft_gguf *g, weft_tensor_set *set, weft_err *err);

/* Fills cfg (fully overwritten) from the metadata of an arch `llama` or `qwen3` file:
 *   {arch}.embedding_length → hidden_size, block_count → n_layers, feed_forward_length → intermediate_size,
 *   attention.head_count(_kv) → n_heads/n_kv_heads (kv defaults to heads), attention.key_length → head_dim
 *   (default hidden/heads), attention.layer_norm_rms_epsilon, context_length → max_position_embeddings,
 *   rope.freq_base → rope.theta (default 10000), rope.dimension_count → partial_rotary_factor,
 *   rope.scaling.{type,factor,original_context_length,yarn_beta_fast,yarn_beta_slow} (linear, yarn),
 *   {arch}.vocab_size or the length of tokenizer.ggml.tokens → vocab_size,
 *   tokenizer.ggml.{bos,padding}_token_id (-1 if absent), tokenizer.ggml.{eos,eot,eom}_token_id → eos ids,
 *   general.sampling.{temp,top_k,top_p,min_p} → generation defaults when present.
 * Derived: tie_word_embeddings = no output.weight tensor; attention_bias/mlp_bias = bias tensors present;
 * rope.adjacent_pairs = (arch == llama) (GGUF llama Q/K rows are permuted to pair order, §10);
 * rope.freq_divisors = the F32 data of rope_freqs.weight ([rope_dim/2], llama3 scaling in GGUF, §10) or NULL
 * (the pointer lives as long as the mapping, see Ownership). Per-layer arrays (feed_forward_length,
 * head_count...) must be uniform.
 * Errors: WEFT_EFORMAT naming a missing or mistyped key or an inconsistent value, WEFT_ENOTSUP for another
 * architecture or an unsupported rope scaling. */
weft_status weft_gguf_config(const weft_gguf *g, weft_config *cfg, weft_err *err);

/* ---- NextN (MTP) draft heads (gguf_mtp.c; docs families-and-formats §3.9, §6.5) ----
 * In a qwen35 / qwen35moe file the trailing {arch}.nextn_predict_layers blocks are the MTP head:
 * weft_gguf_tensors names them mtp.fc (blk.L.nextn.eh_proj), mtp.pre_fc_norm_embedding (nextn.enorm),
 * mtp.pre_fc_norm_hidden (nextn.hnorm), mtp.norm (nextn.shared_head_norm), mtp.embed_tokens /
 * mtp.shared_head_head (the optional nextn.embed_tokens / nextn.shared_head_head) and mtp.layers.(L − first
 * NextN block).* (the block's attn_* / post_attention_norm / ffn_* tensors), after checking that every NextN
 * block holds eh_proj ({2H, H}), enorm, hnorm and shared_head_norm ({H}, F32/F16/BF16); Nemotron-H NextN
 * blocks are WEFT_ENOTSUP (llama.cpp's converter drops that head). llama.cpp's converter can also write the
 * head alone (`convert_hf_to_gguf.py --mtp`, default name mtp-<Name>-<Type>.gguf, the model then converted
 * with
 * --no-nextn): the model's metadata (block_count counting the NextN blocks), token_embd, output_norm, output
 * and the NextN blocks. */

/* True when head is such a head file for the model file trunk: the same architecture, qwen35 or qwen35moe,
 * head's nextn_predict_layers >= 1 blocks following exactly trunk's block_count blocks, trunk without NextN
 * blocks of its own, equal embedding_length and vocabulary (token_embd). Else false with the reason in
 * why[cap]. */
bool weft_gguf_mtp_fits(const weft_gguf *head, const weft_gguf *trunk, char *why, size_t cap);

/* Adds head's NextN blocks to set (which holds trunk's tensors, from weft_gguf_tensors) under the names
 * above; head's other tensors are not used (the head runs on the trunk's embedding, norm and vocab head).
 * head's mapping is handed to set (as weft_gguf_tensors does) once head is known to fit, also when a tensor
 * then fails. *n_mtp = nextn_predict_layers, *bytes = stored bytes added. Errors: WEFT_EFORMAT naming both
 * files when head does not fit trunk (the reason of weft_gguf_mtp_fits); naming head and the tensor for an
 * unknown name, a NextN block missing a tensor or one of the wrong shape; WEFT_ENOTSUP for a NextN tensor of
 * a type that cannot serve (an integer matrix, a quantized norm); the set's errors. On error the set may hold
 * part of the head. */
weft_status weft_gguf_mtp_head(weft_gguf *head, const weft_gguf *trunk, weft_tensor_set *set, int64_t *n_mtp,
                               size_t *bytes, weft_err *err);

#ifdef __cplusplus
}
#endif
#endif
