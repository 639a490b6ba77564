/* mtp.h — the model draft head (multi-token prediction, SPEC §4.5 (b)) shared by the families that have one:
 * qwen3_5 / qwen3_5_moe (families-and-formats §3.9, qwen3_5_mtp.c) and nemotron_h (§4.7, nemotron_h_mtp.c).
 *
 * A head is wrapped around the family's own model (the "trunk"): weft_mtp_wrap replaces the family's ops by
 * ops that call the trunk's and then keep the head in step with it (mtp.c). The head takes the trunk's
 * post-final-norm hidden state h_i of row i (the row the vocab head reads) and the token t_{i+1}, runs its
 * one attention layer (own KV cache) and its FFN, and its vocab logits predict t_{i+2}. Drafts chain: the
 * head's own output y replaces h for the next step, with the drafted token.
 *
 * Per stream (appended to the trunk's state, 64-byte aligned): a header, a ring of the trunk's last
 * MTP_RING hidden rows (by position) and the head's K and V caches [capacity][kv_dim]. Head row i is
 * "absorbed" when its K/V hold (h_i, t_{i+1}); rows [head_start, head_len) are absorbed. The attention of
 * a head row at position p covers rows [head_start, p]. Positions are the hidden state's position i
 * (Megatron / vLLM rule, §3.9), RoPE included.
 *
 * When rows are absorbed (eagerly, so that a prompt never has to be replayed):
 *  - forward: after the trunk, every row i whose next token is fed in the same call, and the stream's
 *    previous last row (its next token is this call's first row) — K/V only, no attention or FFN;
 *  - keep(c): rows >= c - 1 are dropped (row c - 1's next token is the new pending one, not yet known);
 *  - draft: row c - 1 is absorbed with the pending token t_c (its hidden comes from the ring) through the
 *    whole layer, then the chain runs: d1 = argmax(logits(y_{c-1})), row c = (y_{c-1}, d1) gives d2, ...
 *    Chain rows write K/V past head_len: scratch, overwritten when those positions are absorbed.
 * A row whose hidden is no longer in the ring (a rollback deeper than the ring; a restore without head
 * state) cannot be absorbed: the head then restarts its context at the next row (head_start), which only
 * changes what it proposes, never a reply.
 *
 * Prompt-cache snapshots carry the head state (absorbed K/V rows, the last hidden row), so a restored
 * stream proposes exactly what a freshly prefilled one does (resumed == fresh holds for drafts too). */
#ifndef WEFT_FAMILIES_MTP_H
#define WEFT_FAMILIES_MTP_H

#include "weft/families.h"

/* Trunk hidden rows kept per stream: covers any rollback window (Q35_WINDOW, NH_KEEP_WINDOW = 16) + 1. */
#define MTP_RING 32

typedef struct mtp_hdr {
    int32_t capacity;
    int32_t head_len;   /* head rows [head_start, head_len) are absorbed */
    int32_t head_start; /* first row the head attends to */
    int32_t kv_hi;      /* K/V rows [kv_hi, capacity) are zero (keep() zeroes what it drops) */
    int32_t pad[12];
    int32_t ring_pos[MTP_RING]; /* position of the hidden row in ring slot k, -1 = none */
} mtp_hdr;

/* One head row: the stream's head state, the row's position i and the token t_{i+1} it is fed with. */
typedef struct mtp_row {
    mtp_hdr *hs;
    int pos;
    int32_t tok;
} mtp_row;

typedef struct mtp_model mtp_model;

/* What a family supplies (its file: the head's weights and math). */
typedef struct mtp_head_vt {
    /* capacity / length (positions held) of a trunk state */
    int (*capacity)(const void *trunk_state);
    int (*length)(const void *trunk_state);
    /* Right after a trunk forward of n rows: the post-final-norm hidden rows, caller order, into out [n, H].
     */
    void (*trunk_hidden)(mtp_model *mm, int n, float *out);
    /* Runs rows[0..n) (n <= max_rows; a stream's rows in ascending positions) through the head from their
     * inputs hid [n, H]: writes each row's K/V at its position in its stream's head cache; with y non-NULL
     * also attention, FFN and the head norm: y [n, H]. */
    weft_status (*run)(mtp_model *mm, weft_pool *pool, const mtp_row *rows, int n, const float *hid, float *y,
                       weft_err *err);
    /* logits [n, V] of n head outputs through the trunk's vocab head */
    void (*logits)(mtp_model *mm, weft_pool *pool, const float *y, int n, float *logits);
    void (*destroy)(void *head);
} mtp_head_vt;

struct mtp_model {
    weft_family_ops ops; /* the wrapped ops (name and optional entries follow the trunk's) */
    const weft_family_ops *trunk_ops;
    void *trunk;
    const mtp_head_vt *vt;
    void *head;
    int64_t H, V, kvd; /* hidden size, vocab, head K/V floats per position */
    int max_rows;
    int max_context; /* positions the trunk serves (its attention scratch); chain rows stay below */
    /* scratch, allocated once */
    float *hid;    /* [max_rows, H] trunk hidden rows of the last forward */
    float *hin;    /* [max_rows, H] head inputs */
    float *y;      /* [H] head output of the draft chain */
    float *logits; /* [V] */
    mtp_row *jobs; /* [max_rows] */
    int *g_slot;   /* [max_rows] slots seen in a forward */
    int *g_last;   /* [max_rows] their last row */
};

/* The head's K or V cache (which 0/1) of a stream: [capacity][kvd]. */
float *weft_mtp_kv(const mtp_model *mm, mtp_hdr *hs, int which);

/* Wraps fm (the trunk, already created) with a head: fm->ops/self become the wrapper's; scratch_floats is
 * raised to min_scratch when lower; max_context: the trunk's (chain rows stay below it). Takes ownership of
 * head (vt->destroy) and, on failure, destroys both the head and the trunk (fm zeroed). kvd: the head's K/V
 * floats per position. Errors: WEFT_ENOMEM. */
weft_status weft_mtp_wrap(weft_family_model *fm, const mtp_head_vt *vt, void *head, int64_t H, int64_t kvd,
                          int max_context, size_t min_scratch, size_t head_bytes, weft_err *err);

/* The trunk model behind fm: fm->self, or the wrapped trunk when fm has a head (for internal accessors). */
void *weft_mtp_trunk(const weft_family_model *fm);

/* True when ts holds any tensor whose name starts with "mtp.". */
bool weft_mtp_present(const weft_tensor_set *ts);

/* A 2-D weight [rows, cols] named name (WEFT_EFORMAT "<family>: missing tensor NAME" / wrong shape). */
const weft_tensor *weft_mtp_mat(const weft_tensor_set *ts, const char *family, const char *name, int64_t rows,
                                int64_t cols, weft_err *err);
/* A vector of n elements as fp32 (malloc'd), +1 when shift (zero-centred norm stored as w). NULL + err. */
float *weft_mtp_vec(const weft_tensor_set *ts, const char *family, const char *name, int64_t n, bool shift,
                    size_t *bytes, weft_err *err);

/* Family constructors' hooks: attach the head when the checkpoint has one (config says so and `mtp.*`
 * tensors are present), else leave fm as it is. On failure fm's model is destroyed. Errors: WEFT_EFORMAT
 * naming a missing head tensor or a wrong shape, WEFT_ENOTSUP, WEFT_ENOMEM. */
weft_status weft_qwen3_5_mtp_attach(const weft_config *cfg, const weft_tensor_set *ts,
                                    const weft_family_opts *opts, weft_family_model *fm, weft_err *err);
weft_status weft_nemotron_h_mtp_attach(const weft_config *cfg, const weft_tensor_set *ts,
                                       const weft_family_opts *opts, weft_family_model *fm, weft_err *err);

/* For tests: the qwen3_5 head's final norm weights [H] as used (1+w), or NULL when fm has no head. */
const float *weft_qwen3_5_mtp_norm(const weft_family_model *fm);

#endif
