/* mtp.c — the family ops of a trunk with a draft head (layout and rules in mtp.h): state sizing, the
 * forward (trunk, then head absorption), keep, prompt-cache snapshots with the head state, and draft (the
 * greedy chain). The head's math is the family's (mtp_head_vt), from the shared parts in mtp_head.c. */
#include "families/mtp.h"
#include "weft/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

static size_t head_bytes(const mtp_model *mm, int capacity) {
    return sizeof(mtp_hdr) +
           ((size_t)MTP_RING * (size_t)mm->H + 2 * (size_t)capacity * (size_t)mm->kvd) * sizeof(float);
}

static mtp_hdr *head_of(const mtp_model *mm, const void *state) {
    size_t off = align64(mm->trunk_ops->state_bytes(mm->trunk, mm->vt->capacity(state)));
    return (mtp_hdr *)((char *)(uintptr_t)state + off);
}

static float *ring_row(const mtp_model *mm, mtp_hdr *hs, int k) {
    return (float *)(hs + 1) + (size_t)k * (size_t)mm->H;
}

float *weft_mtp_kv(const mtp_model *mm, mtp_hdr *hs, int which) {
    return ring_row(mm, hs, MTP_RING) + (size_t)which * (size_t)hs->capacity * (size_t)mm->kvd;
}

/* The trunk's hidden row at position pos, or NULL when the ring no longer holds it. */
static float *ring_get(const mtp_model *mm, mtp_hdr *hs, int pos) {
    if (pos < 0) return NULL;
    int k = pos % MTP_RING;
    return hs->ring_pos[k] == pos ? ring_row(mm, hs, k) : NULL;
}

/* The head over mm->jobs[0..n) from mm->hin; records how far K/V rows were written. */
static weft_status run_rows(mtp_model *mm, weft_pool *pool, int n, float *y, weft_err *err) {
    for (int j = 0; j < n; j++)
        if (mm->jobs[j].hs->kv_hi < mm->jobs[j].pos + 1) mm->jobs[j].hs->kv_hi = mm->jobs[j].pos + 1;
    return mm->vt->run(mm, pool, mm->jobs, n, mm->hin, y, err);
}

static size_t mtp_state_bytes(const void *fam, int capacity) {
    const mtp_model *mm = fam;
    return align64(mm->trunk_ops->state_bytes(mm->trunk, capacity)) + head_bytes(mm, capacity);
}

static void mtp_state_init(const void *fam, void *state, int capacity) {
    const mtp_model *mm = fam;
    mm->trunk_ops->state_init(mm->trunk, state, capacity);
    mtp_hdr *hs = head_of(mm, state);
    memset(hs, 0, head_bytes(mm, capacity));
    hs->capacity = capacity;
    for (int k = 0; k < MTP_RING; k++) hs->ring_pos[k] = -1;
}

/* Rows may no longer be absorbed past `lim` (the stream's length - 1): drop them. */
static void head_trim(mtp_hdr *hs, int lim) {
    if (lim < 0) lim = 0;
    if (hs->head_len > lim) hs->head_len = lim;
    if (hs->head_start > hs->head_len) hs->head_start = hs->head_len;
}

static weft_status mtp_forward(void *fam, weft_pool *pool, void *const *states, const weft_row *rows, int n,
                               const int *out_rows, int n_out, float *logits, weft_err *err) {
    mtp_model *mm = fam;
    weft_status st = mm->trunk_ops->forward(mm->trunk, pool, states, rows, n, out_rows, n_out, logits, err);
    if (st || n <= 0) return st;
    const size_t H = (size_t)mm->H;
    mm->vt->trunk_hidden(mm, n, mm->hid);
    /* Row p of a stream makes row p - 1 absorbable (its next token is now known): its hidden is the previous
     * row of the same stream in this call, or for the stream's first row the ring (last call's last row). */
    int n_groups = 0, nj = 0;
    for (int r = 0; r < n; r++) {
        const weft_row *w = &rows[r];
        mtp_hdr *hs = head_of(mm, states[w->slot]);
        int g = 0;
        while (g < n_groups && mm->g_slot[g] != w->slot) g++;
        const float *prev;
        if (g == n_groups) {
            mm->g_slot[n_groups++] = w->slot;
            prev = ring_get(mm, hs, w->pos - 1);
        } else {
            prev = mm->hid + (size_t)mm->g_last[g] * H;
        }
        mm->g_last[g] = r;
        if (w->pos == 0) {
            hs->head_start = hs->head_len = 0;
            continue;
        }
        head_trim(hs, w->pos - 1);
        if (hs->head_len == w->pos - 1 && prev) {
            mm->jobs[nj] = (mtp_row){hs, w->pos - 1, w->token};
            memcpy(mm->hin + (size_t)nj * H, prev, H * sizeof(float));
            nj++;
            hs->head_len = w->pos;
        } else { /* the hidden of row pos - 1 is gone: the head's context restarts at this row */
            hs->head_start = hs->head_len = w->pos;
        }
    }
    for (int r = 0; r < n; r++) {
        mtp_hdr *hs = head_of(mm, states[rows[r].slot]);
        int k = rows[r].pos % MTP_RING;
        memcpy(ring_row(mm, hs, k), mm->hid + (size_t)r * H, H * sizeof(float));
        hs->ring_pos[k] = rows[r].pos;
    }
    return nj ? run_rows(mm, pool, nj, NULL, err) : WEFT_OK;
}

static weft_status mtp_keep(void *fam, weft_pool *pool, void *state, int cache_len, weft_err *err) {
    mtp_model *mm = fam;
    const int len = mm->vt->length(state);
    weft_status st = mm->trunk_ops->keep(mm->trunk, pool, state, cache_len, err);
    if (st || cache_len == len) return st; /* keeping everything changes nothing */
    /* Rows from cache_len - 1 on were absorbed with tokens that are gone (or not yet known). What is dropped
     * is zeroed, as the trunks do, so that the state's bytes are those of a stream fed the kept tokens. */
    mtp_hdr *hs = head_of(mm, state);
    head_trim(hs, cache_len - 1);
    const size_t kvd = (size_t)mm->kvd;
    if (hs->kv_hi > hs->head_len) {
        for (int w = 0; w < 2; w++)
            memset(weft_mtp_kv(mm, hs, w) + (size_t)hs->head_len * kvd, 0,
                   (size_t)(hs->kv_hi - hs->head_len) * kvd * sizeof(float));
        hs->kv_hi = hs->head_len;
    }
    for (int k = 0; k < MTP_RING; k++)
        if (hs->ring_pos[k] >= cache_len) { /* rows rolled back */
            hs->ring_pos[k] = -1;
            memset(ring_row(mm, hs, k), 0, (size_t)mm->H * sizeof(float));
        }
    return WEFT_OK;
}

/* Checks one draft request (errors name request i when there are several). */
static weft_status draft_check(const mtp_model *mm, const weft_family_draft *q, int i, int n, weft_err *err) {
    *q->n_out = 0;
    const int c = q->n_tokens - 1, len = q->state ? mm->vt->length(q->state) : -1;
    char who[32] = "";
    if (n > 1) snprintf(who, sizeof who, " (request %d)", i);
    if (!q->seq || !q->state || c != len)
        return weft_err_set(err, WEFT_EINVAL, "draft%s: %d tokens given but the stream holds %d positions",
                            who, q->n_tokens, len);
    if (q->seq[c] < 0 || q->seq[c] >= mm->V)
        return weft_err_set(err, WEFT_ERANGE, "draft%s: pending token %d outside the vocabulary (%lld)", who,
                            q->seq[c], (long long)mm->V);
    return WEFT_OK;
}

/* The greedy chains of reqs[0..n) (n <= mm->draft_group, checked): step 0 absorbs each stream's row c - 1
 * with its pending token through the whole layer, then every step reads the vocab head over the streams
 * still drafting and feeds their drafts back as the next rows — one head call per step for all of them. */
static weft_status draft_group(mtp_model *mm, weft_pool *pool, const weft_family_draft *reqs, int n,
                               weft_err *err) {
    const size_t H = (size_t)mm->H, V = (size_t)mm->V;
    int idx[MTP_DRAFT_GROUP], lim[MTP_DRAFT_GROUP], cpos[MTP_DRAFT_GROUP], na = 0;
    for (int i = 0; i < n; i++) {
        const weft_family_draft *q = &reqs[i];
        const int c = q->n_tokens - 1;
        mtp_hdr *hs = head_of(mm, q->state);
        /* chain rows sit at positions c - 1 .. c + max_n - 2 */
        int room = hs->capacity < mm->max_context ? hs->capacity : mm->max_context, max_n = q->max_n;
        if (max_n > room - c + 1) max_n = room - c + 1;
        const float *h = ring_get(mm, hs, c - 1);
        if (max_n < 1 || c < 1 || !h || hs->head_len < c - 1 || hs->head_start > c - 1) continue;
        memcpy(mm->hin + (size_t)na * H, h, H * sizeof(float));
        mm->jobs[na] = (mtp_row){hs, c - 1, q->seq[c]};
        idx[na] = i;
        lim[na] = max_n;
        cpos[na++] = c;
    }
    if (na == 0) return WEFT_OK;
    weft_status st = run_rows(mm, pool, na, mm->y, err);
    if (st) return st;
    for (int j = 0; j < na; j++) mm->jobs[j].hs->head_len = cpos[j]; /* row c - 1 holds (h_{c-1}, t_c) */
    for (int k = 0;; k++) {
        weft_matmul(pool, mm->io->lm_head, mm->y, na, mm->logits, mm->V); /* the trunk's vocab head */
        int m = 0;
        for (int j = 0; j < na; j++) {
            const float *lg = mm->logits + (size_t)j * V;
            int32_t best = 0; /* greedy; ties to the lower id */
            for (int64_t v = 1; v < mm->V; v++)
                if (lg[v] > lg[best]) best = (int32_t)v;
            const weft_family_draft *q = &reqs[idx[j]];
            q->out[k] = best;
            *q->n_out = k + 1;
            if (k + 1 == lim[j]) continue; /* this stream's chain is done: it drops out */
            memcpy(mm->hin + (size_t)m * H, mm->y + (size_t)j * H, H * sizeof(float));
            mm->jobs[m] = (mtp_row){mm->jobs[j].hs, cpos[j] + k, best};
            idx[m] = idx[j];
            lim[m] = lim[j];
            cpos[m++] = cpos[j];
        }
        if ((na = m) == 0) return WEFT_OK;
        if ((st = run_rows(mm, pool, na, mm->y, err))) return st;
    }
}

static weft_status mtp_draft_many(void *fam, weft_pool *pool, const weft_family_draft *reqs, int n,
                                  weft_err *err) {
    mtp_model *mm = fam;
    for (int i = 0; i < n; i++) *reqs[i].n_out = 0;
    for (int i = 0; i < n; i++) {
        weft_status st = draft_check(mm, &reqs[i], i, n, err);
        if (st) return st;
        for (int j = 0; j < i; j++)
            if (reqs[j].state == reqs[i].state)
                return weft_err_set(err, WEFT_EINVAL, "draft: requests %d and %d are the same stream", j, i);
    }
    /* groups of draft_group streams (the scratch's rows); row invariance makes the cut invisible */
    for (int b = 0; b < n; b += mm->draft_group) {
        weft_status st =
            draft_group(mm, pool, reqs + b, n - b < mm->draft_group ? n - b : mm->draft_group, err);
        if (st) return st;
    }
    return WEFT_OK;
}

static weft_status mtp_draft(void *fam, weft_pool *pool, void *state, const int32_t *seq, int n_tokens,
                             int max_n, int32_t *out, int *n_out, weft_err *err) {
    weft_family_draft q = {state, seq, n_tokens, max_n, out, n_out};
    return mtp_draft_many(fam, pool, &q, 1, err);
}

/* ---- prompt-cache snapshots: the trunk's bytes, then the head's ----
 * head part: int32 [head_len, head_start, has_hidden, 0] (16 bytes), the hidden row of pos - 1 [H] (zeros
 * when absent), then K and V rows [0, pos) (rows outside [head_start, head_len) zero), all fp32. */
static size_t head_snap_bytes(const mtp_model *mm, int pos) {
    return 16 + ((size_t)mm->H + 2 * (size_t)pos * (size_t)mm->kvd) * sizeof(float);
}

static size_t mtp_snapshot_bytes(const void *fam, int pos) {
    const mtp_model *mm = fam;
    size_t t = mm->trunk_ops->snapshot_bytes(mm->trunk, pos);
    return t ? t + head_snap_bytes(mm, pos) : 0;
}

static weft_status mtp_snapshot_save(const void *fam, const void *state, int pos, void *dst, weft_err *err) {
    const mtp_model *mm = fam;
    weft_status st = mm->trunk_ops->snapshot_save(mm->trunk, state, pos, dst, err);
    if (st) return st;
    mtp_hdr *hs = head_of(mm, state);
    char *o = (char *)dst + mm->trunk_ops->snapshot_bytes(mm->trunk, pos);
    memset(o, 0, head_snap_bytes(mm, pos));
    /* a row absorbed with a token past pos (a draft call) is not part of the prefix [0, pos) */
    int32_t len = hs->head_len < pos - 1 ? hs->head_len : (pos > 0 ? pos - 1 : 0);
    int32_t start = hs->head_start < len ? hs->head_start : len;
    const float *h = ring_get(mm, hs, pos - 1);
    int32_t hdr[4] = {len, start, h != NULL, 0};
    memcpy(o, hdr, sizeof hdr);
    o += sizeof hdr;
    const size_t H = (size_t)mm->H, kvd = (size_t)mm->kvd;
    if (h) memcpy(o, h, H * sizeof(float));
    o += H * sizeof(float);
    for (int w = 0; w < 2; w++, o += (size_t)pos * kvd * sizeof(float))
        if (len > start)
            memcpy(o + (size_t)start * kvd * sizeof(float), weft_mtp_kv(mm, hs, w) + (size_t)start * kvd,
                   (size_t)(len - start) * kvd * sizeof(float));
    return WEFT_OK;
}

static weft_status mtp_snapshot_restore(const void *fam, void *state, int pos, const void *src,
                                        weft_err *err) {
    const mtp_model *mm = fam;
    weft_status st = mm->trunk_ops->snapshot_restore(mm->trunk, state, pos, src, err);
    if (st) return st;
    mtp_hdr *hs = head_of(mm, state);
    const char *in = (const char *)src + mm->trunk_ops->snapshot_bytes(mm->trunk, pos);
    int32_t hdr[4];
    memcpy(hdr, in, sizeof hdr);
    in += sizeof hdr;
    if (hdr[0] < 0 || hdr[0] > (pos > 0 ? pos - 1 : 0) || hdr[1] < 0 || hdr[1] > hdr[0])
        return weft_err_set(err, WEFT_EFORMAT, "restore: head rows [%d, %d) do not fit a snapshot at %d",
                            hdr[1], hdr[0], pos);
    const size_t H = (size_t)mm->H, kvd = (size_t)mm->kvd;
    for (int k = 0; k < MTP_RING; k++) hs->ring_pos[k] = -1;
    if (hdr[2] && pos > 0) {
        int k = (pos - 1) % MTP_RING;
        memcpy(ring_row(mm, hs, k), in, H * sizeof(float));
        hs->ring_pos[k] = pos - 1;
    }
    in += H * sizeof(float);
    for (int w = 0; w < 2; w++, in += (size_t)pos * kvd * sizeof(float))
        memcpy(weft_mtp_kv(mm, hs, w), in, (size_t)pos * kvd * sizeof(float));
    hs->head_len = hdr[0];
    hs->head_start = hdr[1];
    hs->kv_hi = pos;
    return WEFT_OK;
}

static void mtp_destroy(void *fam) {
    mtp_model *mm = fam;
    if (!mm) return;
    if (mm->vt && mm->head) mm->vt->destroy(mm->head);
    if (mm->trunk_ops) mm->trunk_ops->destroy(mm->trunk);
    free(mm->hid);
    free(mm->hin);
    free(mm->y);
    free(mm->logits);
    free(mm->jobs);
    free(mm->g_slot);
    free(mm->g_last);
    free(mm->cat);
    free(mm->x);
    free(mm->e);
    free((void *)mm->krow);
    free((void *)mm->vrow);
    free(mm->apos);
    free(mm);
}

weft_status weft_mtp_discard(weft_family_model *fm, const mtp_head_vt *vt, void *head, weft_status st) {
    vt->destroy(head);
    fm->ops->destroy(fm->self);
    memset(fm, 0, sizeof *fm);
    return st;
}

weft_status weft_mtp_wrap(weft_family_model *fm, const mtp_head_vt *vt, void *head, const mtp_io *io,
                          int64_t H, int64_t kvd, int max_context, size_t head_bytes_decoded, weft_err *err) {
    mtp_model *mm = calloc(1, sizeof *mm);
    if (mm) {
        mm->trunk_ops = fm->ops;
        mm->trunk = fm->self;
        mm->vt = vt;
        mm->head = head;
        mm->io = io;
        mm->H = H;
        mm->V = fm->vocab_size;
        mm->kvd = kvd;
        mm->max_rows = fm->max_rows;
        mm->max_context = max_context;
        size_t R = (size_t)fm->max_rows;
        mm->hid = malloc(R * (size_t)H * sizeof(float));
        mm->hin = malloc(R * (size_t)H * sizeof(float));
        mm->draft_group = fm->max_rows < MTP_DRAFT_GROUP ? fm->max_rows : MTP_DRAFT_GROUP;
        mm->y = malloc((size_t)mm->draft_group * (size_t)H * sizeof(float));
        mm->logits = malloc((size_t)mm->draft_group * (size_t)mm->V * sizeof(float));
        mm->jobs = malloc(R * sizeof *mm->jobs);
        mm->g_slot = malloc(R * sizeof(int));
        mm->g_last = malloc(R * sizeof(int));
        mm->cat = malloc(R * 2 * (size_t)H * sizeof(float));
        mm->x = malloc(R * (size_t)H * sizeof(float));
        mm->e = malloc((size_t)H * sizeof(float));
        mm->krow = malloc(R * sizeof(float *));
        mm->vrow = malloc(R * sizeof(float *));
        mm->apos = malloc(R * sizeof(int));
    }
    if (!mm || !mm->hid || !mm->hin || !mm->y || !mm->logits || !mm->jobs || !mm->g_slot || !mm->g_last ||
        !mm->cat || !mm->x || !mm->e || !mm->krow || !mm->vrow || !mm->apos) {
        if (mm) {
            mm->trunk_ops = NULL; /* the trunk and the head are weft_mtp_discard's */
            mm->vt = NULL;
            mtp_destroy(mm);
        }
        return weft_mtp_discard(
            fm, vt, head,
            weft_err_set(err, WEFT_ENOMEM, "mtp head: out of memory for %d rows", fm->max_rows));
    }
    mm->ops = *fm->ops;
    mm->ops.state_bytes = mtp_state_bytes;
    mm->ops.state_init = mtp_state_init;
    mm->ops.forward = mtp_forward;
    mm->ops.keep = mtp_keep;
    mm->ops.destroy = mtp_destroy;
    mm->ops.draft = mtp_draft;
    mm->ops.draft_many = mtp_draft_many;
    bool snaps = fm->ops->snapshot_bytes && fm->ops->snapshot_save && fm->ops->snapshot_restore;
    mm->ops.snapshot_bytes = snaps ? mtp_snapshot_bytes : NULL;
    mm->ops.snapshot_save = snaps ? mtp_snapshot_save : NULL;
    mm->ops.snapshot_restore = snaps ? mtp_snapshot_restore : NULL;
    fm->ops = &mm->ops;
    fm->self = mm;
    /* the pool's per-thread scratch holds decoded weight rows (cpu.h): the fc's are 2H wide */
    if (fm->scratch_floats < (size_t)(2 * H)) fm->scratch_floats = (size_t)(2 * H);
    fm->weights_bytes += head_bytes_decoded;
    return WEFT_OK;
}

void *weft_mtp_trunk(const weft_family_model *fm) {
    return fm->ops && fm->ops->draft == mtp_draft ? ((mtp_model *)fm->self)->trunk : fm->self;
}

bool weft_mtp_present(const weft_tensor_set *ts) {
    size_t n = weft_tensor_set_count(ts);
    for (size_t i = 0; i < n; i++)
        if (strncmp(weft_tensor_set_at(ts, i)->name, "mtp.", 4) == 0) return true;
    return false;
}

const weft_tensor *weft_mtp_mat(const weft_tensor_set *ts, const char *family, const char *name, int64_t rows,
                                int64_t cols, weft_err *err) {
    const weft_tensor *t = weft_tensor_set_get(ts, name);
    if (!t) {
        weft_err_set(err, WEFT_EFORMAT, "%s: missing tensor %s (MTP head)", family, name);
        return NULL;
    }
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s: shape [%lld, %lld] expected, found %d-D [%lld, %lld]",
                     family, name, (long long)rows, (long long)cols, t->ndim, (long long)t->shape[0],
                     (long long)(t->ndim > 1 ? t->shape[1] : 0));
        return NULL;
    }
    bool weight = t->dtype == WEFT_DT_F32 || t->dtype == WEFT_DT_F16 || t->dtype == WEFT_DT_BF16 ||
                  t->dtype == WEFT_DT_MLX_AFFINE || (t->dtype >= WEFT_DT_Q4_0 && t->dtype <= WEFT_DT_Q6_K);
    if (!weight) {
        weft_err_set(err, WEFT_ENOTSUP, "%s: tensor %s: dtype %s cannot be used as a weight", family, name,
                     weft_dtype_get(t->dtype) ? weft_dtype_get(t->dtype)->name : "?");
        return NULL;
    }
    return t;
}

float *weft_mtp_vec(const weft_tensor_set *ts, const char *family, const char *name, int64_t n, bool shift,
                    size_t *bytes, weft_err *err) {
    const weft_tensor *t = weft_tensor_set_get(ts, name);
    if (!t) {
        weft_err_set(err, WEFT_EFORMAT, "%s: missing tensor %s (MTP head)", family, name);
        return NULL;
    }
    float *v = weft_tensor_to_f32(t, n, err);
    if (!v) return NULL;
    if (shift)
        for (int64_t i = 0; i < n; i++) v[i] = 1.0f + v[i];
    *bytes += (size_t)n * sizeof(float);
    return v;
}
