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
/* Streams drafted together by one draft_many group (its scratch rows: y, logits); more go in groups. */
#define MTP_DRAFT_GROUP 16

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
     * also attention, FFN and the head norm: y [n, H]. The parts every head has are mtp_head.c's. */
    weft_status (*run)(mtp_model *mm, weft_pool *pool, const mtp_row *rows, int n, const float *hid, float *y,
                       weft_err *err);
    void (*destroy)(void *head);
} mtp_head_vt;

/* The weights around the head's layer that every family's head has (§3.9, §4.7): its input fusion
 * x = fc([RMSNorm(E[t_{i+1}]; enorm) | RMSNorm(h_i; hnorm)]) and its output norm y = RMSNorm(x; out_norm),
 * whose logits come from the trunk's vocab head. Part of the family's head (weft_mtp_io_load fills it). */
typedef struct mtp_io {
    const weft_tensor *embed, *lm_head; /* the trunk's [V, H], borrowed */
    const weft_tensor *fc;              /* [H, 2H]: eh_proj (nemotron_h), fc (qwen3_5) */
    float *enorm, *hnorm, *out_norm;    /* [H] each, as applied (qwen3_5: 1+w), owned */
    float eps;                          /* RMSNorm epsilon of every head norm (the trunk's) */
} mtp_io;

struct mtp_model {
    weft_family_ops ops; /* the wrapped ops (name and optional entries follow the trunk's) */
    const weft_family_ops *trunk_ops;
    void *trunk;
    const mtp_head_vt *vt;
    void *head;
    const mtp_io *io;  /* inside head */
    int64_t H, V, kvd; /* hidden size, vocab, head K/V floats per position */
    int max_rows;
    int max_context; /* positions the trunk serves (its attention scratch); chain rows stay below */
    int draft_group; /* streams per draft chain call: min(max_rows, MTP_DRAFT_GROUP) */
    /* scratch, allocated once */
    float *hid;    /* [max_rows, H] trunk hidden rows of the last forward */
    float *hin;    /* [max_rows, H] head inputs */
    float *y;      /* [draft_group, H] head outputs of the draft chains */
    float *logits; /* [draft_group, V] */
    mtp_row *jobs; /* [max_rows] */
    int *g_slot;   /* [max_rows] slots seen in a forward */
    int *g_last;   /* [max_rows] their last row */
    /* the head layer's scratch (mtp_head.c), shared by the families' heads */
    float *cat;                 /* [max_rows, 2H] fc input */
    float *x;                   /* [max_rows, H] the head's residual stream */
    float *e;                   /* [H] one embedding row */
    const float **krow, **vrow; /* [max_rows] each row's head K/V cache from its head_start */
    int *apos;                  /* [max_rows] attention positions, relative to head_start */
};

/* The head's K or V cache (which 0/1) of a stream: [capacity][kvd]. */
float *weft_mtp_kv(const mtp_model *mm, mtp_hdr *hs, int which);

/* Wraps fm (the trunk, already created) with a head: fm->ops/self become the wrapper's; scratch_floats is
 * raised to 2H (the fc input rows) when lower; max_context: the trunk's (chain rows stay below it). io lies
 * in head. Takes ownership of head (vt->destroy) and, on failure, destroys both the head and the trunk (fm
 * zeroed). kvd: the head's K/V floats per position. Errors: WEFT_ENOMEM. */
weft_status weft_mtp_wrap(weft_family_model *fm, const mtp_head_vt *vt, void *head, const mtp_io *io,
                          int64_t H, int64_t kvd, int max_context, size_t head_bytes, weft_err *err);

/* A family's attach that failed (st, with err already filled): destroys head (vt->destroy; NULL allowed) and
 * the trunk, zeroes fm and returns st, so that a failed attach leaves nothing behind. */
weft_status weft_mtp_discard(weft_family_model *fm, const mtp_head_vt *vt, void *head, weft_status st);

/* The trunk model behind fm: fm->self, or the wrapped trunk when fm has a head (for internal accessors). */
void *weft_mtp_trunk(const weft_family_model *fm);

/* A 2-D weight [rows, cols] named name (WEFT_EFORMAT "<family>: missing tensor NAME" / wrong shape). */
const weft_tensor *weft_mtp_mat(const weft_tensor_set *ts, const char *family, const char *name, int64_t rows,
                                int64_t cols, weft_err *err);
/* A vector of n elements as fp32 (malloc'd), +1 when shift (zero-centred norm stored as w). NULL + err. */
float *weft_mtp_vec(const weft_tensor_set *ts, const char *family, const char *name, int64_t n, bool shift,
                    size_t *bytes, weft_err *err);

/* ---- the head layer's shared parts (mtp_head.c); the family's run calls them in this order ---- */

/* Loads io->fc (fc_name, [H, 2H]) and the norms norm_names = {enorm, hnorm, out_norm} as stored (no +1);
 * io->embed, lm_head and eps are the caller's to set. On failure what was loaded stays in io for
 * weft_mtp_io_free. Errors: those of weft_mtp_mat / weft_mtp_vec naming the tensor. */
weft_status weft_mtp_io_load(mtp_io *io, const weft_tensor_set *ts, const char *family, const char *fc_name,
                             const char *const norm_names[3], int64_t H, size_t *bytes, weft_err *err);
void weft_mtp_io_free(mtp_io *io);

/* The head's input for rows[0..n) from hid [n, H]: mm->x = fc([RMSNorm(E[tok]; enorm) | RMSNorm(hid; hnorm)])
 * [n, H], and xb [n, H] = RMSNorm(mm->x; in_norm), the attention's input. Errors: those of dequantizing an
 * embedding row (a token outside the vocabulary). */
weft_status weft_mtp_head_in(mtp_model *mm, weft_pool *pool, const mtp_row *rows, int n, const float *hid,
                             const float *in_norm, float *xb, weft_err *err);
/* Writes row r's k, v [n, kvd] (after the family's bias / norm / RoPE) at its position in its stream's
 * head cache. */
void weft_mtp_store_kv(const mtp_model *mm, const mtp_row *rows, int n, const float *k, const float *v);
/* Causal attention of q [n, n_heads·head_dim] over each row's head cache rows [head_start, pos], scale
 * 1/sqrt(head_dim), into out [n, n_heads·head_dim]; the positions are relative to head_start. */
void weft_mtp_attend(mtp_model *mm, weft_pool *pool, const mtp_row *rows, int n, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, const float *q, float *out);
/* The residual step after a sublayer: mm->x += add [n, H], then out [n, H] = RMSNorm(mm->x; w) (the next
 * sublayer's input, or with w = io->out_norm the head's output y). */
void weft_mtp_residual(mtp_model *mm, int n, const float *add, const float *w, float *out);

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
