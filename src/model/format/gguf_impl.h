/* Private layout of a weft_gguf handle, shared by gguf.c (parsing), gguf_kv.c (getters), gguf_tensors.c and
 * gguf_config.c. Not installed. */
#ifndef WEFT_GGUF_IMPL_H
#define WEFT_GGUF_IMPL_H

#include "weft/gguf.h"

typedef struct gguf_kv {
    const char *key;
    weft_gguf_type type;
    /* scalars (decoded at open) */
    uint64_t u;        /* unsigned integer types and bool */
    int64_t i;         /* signed integer types */
    double f;          /* F32/F64 */
    const char *str;   /* STRING: NUL-terminated copy */
    uint64_t str_len;  /* STRING: stored length */
    weft_gguf_arr arr; /* ARRAY */
} gguf_kv;

typedef struct gguf_chunk gguf_chunk; /* string arena block */

struct weft_gguf {
    char *source;        /* path or "<memory>" */
    const uint8_t *base; /* the file bytes */
    size_t size;
    void *map; /* mmap owned by this handle, NULL when not owned (memory, or handed to a set) */
    size_t map_len;
    bool file_backed;   /* opened from a file (mapping handed off or not) */
    bool mapping_given; /* weft_gguf_tensors took the mapping */
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    gguf_kv *kvs;
    size_t n_kv;
    weft_gguf_tensor_info *tensors;
    size_t n_tensors;
    gguf_chunk *arena; /* owned strings */
};

/* Looks up a key; NULL when absent. */
const gguf_kv *weft_gguf_lookup(const weft_gguf *g, const char *key);

/* Adds tensor ti of g to set under `name` (shape = ne reversed, data = the stored bytes; qwen35: a squeezed
 * [H] shared-expert gate gets its hub shape [1, H]). Errors: the set's (a duplicate), prefixed with g's
 * source. (gguf_tensors.c) */
weft_status weft_gguf_add_tensor(const weft_gguf *g, const weft_gguf_tensor_info *ti, const char *name,
                                 bool qwen35, weft_tensor_set *set, weft_err *err);

/* The NextN blocks [from, from + n) of a qwen35 / qwen35moe file each hold the four tensors llama.cpp's
 * converter writes for them: blk.L.nextn.eh_proj.weight (ne {2H, H}, a weight type), blk.L.nextn.{enorm,
 * hnorm, shared_head_norm}.weight (ne {H}, F32/F16/BF16), H = {arch}.embedding_length. Errors: WEFT_EFORMAT
 * naming the file and the missing or misshapen tensor. (gguf_mtp.c) */
weft_status weft_gguf_nextn_check(const weft_gguf *g, long from, long n, weft_err *err);

#endif
