/* Per-stream state of qwen3_5 / qwen3_5_moe (layout in qwen3_5_impl.h): sizing, keep (rollback after a verify
 * window) and prompt-cache snapshots.
 *
 * Rollback. Attention caches need nothing (rows past cache_len are overwritten later), but a recurrent state
 * cannot be "trimmed". Thanks to the double-buffered recurrent blocks the state at the start of the stream's
 * last forward is always still there; keep(p) inside that forward rebuilds the state at p from it:
 *  - REPLAY (default): re-run conv + recurrence of the kept rows from their recorded inputs (m, b, α per GDN
 *    layer: C + 2·Hv floats per row and layer). Same code as the forward, so the same bits.
 *  - SNAPSHOT: copy back the whole recurrent state saved after that row.
 * Measured (test_qwen3_5_state, Release build, one thread, 5-row verify window then keep 2): on the fixtures
 * keep costs 13–50 µs in REPLAY mode against ~0.5 µs in SNAPSHOT mode, the verify forward itself (~2 ms)
 * shows no difference within noise, and a state of capacity 64 is 93 KB against 337 KB. So on the fixtures
 * SNAPSHOT is the cheaper keep. REPLAY is still the default because of what happens at real sizes: at
 * Qwen3.5-27B a recurrent block is ~150 MiB (48 GDN layers × (48·128·128 + 3·10240) fp32), so SNAPSHOT needs
 * 16 × 150 MiB = 2.3 GiB of window per stream and copies 150 MiB for every verified row (~50 ms per row on
 * the dev machine), whereas REPLAY records 1.9 MiB per row (30 MiB of window) and pays one recurrence step
 * per kept row at keep time (~100 ms per row on one thread for the 27B shape, divided across the pool's
 * threads). */
#include "families/mtp.h"
#include "families/qwen3_5_impl.h"

#include <string.h>

static size_t window_floats(const q35 *m) {
    return (size_t)Q35_WINDOW * (m->keep_mode == Q35_KEEP_SNAPSHOT ? m->block_floats : m->rec_floats);
}

static size_t kv_floats(const q35 *m, int capacity) {
    return (size_t)capacity * (size_t)(m->Hkv * m->d);
}

size_t q35_state_bytes(const void *fam, int capacity) {
    const q35 *m = fam;
    size_t f = 2 * m->block_floats + window_floats(m) + (size_t)m->n_attn * 2 * kv_floats(m, capacity);
    return sizeof(q35_hdr) + f * sizeof(float);
}

void q35_state_init(const void *fam, void *state, int capacity) {
    memset(state, 0, q35_state_bytes(fam, capacity));
    q35_hdr *h = state;
    h->capacity = capacity;
}

float *q35_block(const q35 *m, q35_hdr *h, int which) {
    return (float *)(h + 1) + (size_t)which * m->block_floats;
}

float *q35_window(const q35 *m, q35_hdr *h) {
    return (float *)(h + 1) + 2 * m->block_floats;
}

float *q35_kv(const q35 *m, q35_hdr *h, int attn_idx, int which) {
    return q35_window(m, h) + window_floats(m) +
           ((size_t)attn_idx * 2 + (size_t)which) * kv_floats(m, h->capacity);
}

/* Rebuilds the recurrent state after the first n rows of the window into block[1 − start] by replaying them.
 */
static void replay(q35 *m, weft_pool *pool, q35_hdr *h, int n) {
    float *win = q35_window(m, h);
    q35_group g = {0,  0, n, h->win_start, 0, h, q35_block(m, h, h->start), q35_block(m, h, 1 - h->start),
                   win};
    for (int64_t l = 0; l < m->L; l++) {
        const q35_layer *ly = &m->layers[l];
        if (!ly->linear) continue;
        const float *mq = win + (size_t)ly->idx * (size_t)(m->C + 2 * m->Hv);
        q35_gdn_job job = {.m = m,
                           .ly = ly,
                           .groups = &g,
                           .n_groups = 1,
                           .mq = mq,
                           .bq = mq + m->C,
                           .aq = mq + m->C + m->Hv,
                           .m_stride = (int64_t)m->rec_floats,
                           .ba_stride = (int64_t)m->rec_floats,
                           .c = m->cbuf,
                           .beta = m->beta,
                           .decay = m->decay,
                           .o = m->o};
        q35_gdn_run(pool, &job, n, m->kscratch);
    }
}

weft_status q35_keep(void *fam, weft_pool *pool, void *state, int cache_len, weft_err *err) {
    q35 *m = fam;
    q35_hdr *h = state;
    if (cache_len < 0 || cache_len > h->len)
        return weft_err_set(err, WEFT_ERANGE, "keep: position %d outside the stream's %d positions",
                            cache_len, h->len);
    if (cache_len == h->len) return WEFT_OK;
    if (cache_len < h->win_start || cache_len > h->win_start + h->win_rec)
        return weft_err_set(
            err, WEFT_ERANGE,
            "keep: cannot roll back to position %d: the last forward's rollback window covers "
            "positions %d..%d (a recurrent state cannot be trimmed further)",
            cache_len, h->win_start, h->win_start + h->win_rec);
    int n = cache_len - h->win_start;
    if (n == 0) {
        h->cur = h->start;
    } else if (m->keep_mode == Q35_KEEP_SNAPSHOT) {
        memcpy(q35_block(m, h, 1 - h->start), q35_window(m, h) + (size_t)(n - 1) * m->block_floats,
               m->block_floats * sizeof(float));
        h->cur = 1 - h->start;
    } else {
        replay(m, pool, h, n);
        h->cur = 1 - h->start;
    }
    h->len = cache_len;
    h->win_rec = n;
    return WEFT_OK;
}

/* Snapshot layout: the recurrent block at pos, then per attention layer K rows [0, pos) and V rows [0, pos).
 */
size_t q35_snapshot_bytes(const void *fam, int pos) {
    const q35 *m = fam;
    return (m->block_floats + (size_t)m->n_attn * 2 * kv_floats(m, pos)) * sizeof(float);
}

weft_status q35_snapshot_save(const void *fam, const void *state, int pos, void *dst, weft_err *err) {
    const q35 *m = fam;
    q35_hdr *h = (q35_hdr *)state; /* read only */
    if (pos != h->len)
        return weft_err_set(err, WEFT_ERANGE,
                            "snapshot at position %d: the stream holds %d positions (a recurrent "
                            "state exists only at its current length)",
                            pos, h->len);
    char *out = dst;
    memcpy(out, q35_block(m, h, h->cur), m->block_floats * sizeof(float));
    out += m->block_floats * sizeof(float);
    size_t rows = kv_floats(m, pos) * sizeof(float);
    for (int a = 0; a < m->n_attn; a++)
        for (int w = 0; w < 2; w++, out += rows) memcpy(out, q35_kv(m, h, a, w), rows);
    return WEFT_OK;
}

weft_status q35_snapshot_restore(const void *fam, void *state, int pos, const void *src, weft_err *err) {
    const q35 *m = fam;
    q35_hdr *h = state;
    if (pos < 0 || pos > h->capacity)
        return weft_err_set(err, WEFT_ERANGE, "restore at position %d outside capacity %d", pos, h->capacity);
    const char *in = src;
    memcpy(q35_block(m, h, 0), in, m->block_floats * sizeof(float));
    in += m->block_floats * sizeof(float);
    size_t rows = kv_floats(m, pos) * sizeof(float);
    for (int a = 0; a < m->n_attn; a++)
        for (int w = 0; w < 2; w++, in += rows) memcpy(q35_kv(m, h, a, w), in, rows);
    h->len = pos;
    h->cur = h->start = 0;
    h->win_start = pos;
    h->win_rec = 0;
    return WEFT_OK;
}

weft_status weft_qwen3_5_set_keep_mode(weft_family_model *fm, q35_keep_mode mode, weft_err *err) {
    if (mode != Q35_KEEP_REPLAY && mode != Q35_KEEP_SNAPSHOT)
        return weft_err_set(err, WEFT_EINVAL, "qwen3_5: unknown keep mode %d", (int)mode);
    q35 *m = weft_mtp_trunk(fm); /* under the MTP head's wrapper, if any */
    m->keep_mode = mode;
    return WEFT_OK;
}
