/* mtp_head.c — the parts of a draft head's layer that every family's head shares (rules in mtp.h): its
 * fc / norm weights, the fused input, the head K/V cache writes, the attention over that cache and the
 * residual steps. What differs between families (biases, q/k norms, RoPE, output gate, the FFN or MoE) stays
 * in the family's file, which calls these in order from its mtp_head_vt.run. Scratch is mtp_model's,
 * allocated once by weft_mtp_wrap: nothing here allocates. */
#include "families/mtp.h"
#include "weft/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

weft_status weft_mtp_io_load(mtp_io *io, const weft_tensor_set *ts, const char *family, const char *fc_name,
                             const char *const norm_names[3], int64_t H, size_t *bytes, weft_err *err) {
    io->fc = weft_mtp_mat(ts, family, fc_name, H, 2 * H, err);
    if (!io->fc) return err ? err->code : WEFT_EFORMAT;
    float **dst[3] = {&io->enorm, &io->hnorm, &io->out_norm};
    for (int i = 0; i < 3; i++)
        if (!(*dst[i] = weft_mtp_vec(ts, family, norm_names[i], H, false, bytes, err)))
            return err ? err->code : WEFT_EFORMAT;
    return WEFT_OK;
}

void weft_mtp_io_free(mtp_io *io) {
    free(io->enorm);
    free(io->hnorm);
    free(io->out_norm);
}

weft_status weft_mtp_head_in(mtp_model *mm, weft_pool *pool, const mtp_row *rows, int n, const float *hid,
                             const float *in_norm, float *xb, weft_err *err) {
    const mtp_io *io = mm->io;
    const int64_t H = mm->H;
    for (int r = 0; r < n; r++) {
        weft_status st = weft_tensor_dequant_row(io->embed, rows[r].tok, mm->e, err);
        if (st) return st;
        float *c = mm->cat + (int64_t)r * 2 * H;
        weft_rmsnorm(c, mm->e, io->enorm, H, io->eps); /* embedding first (§3.9) */
        weft_rmsnorm(c + H, hid + (int64_t)r * H, io->hnorm, H, io->eps);
    }
    weft_matmul(pool, io->fc, mm->cat, n, mm->x, H);
    for (int r = 0; r < n; r++) weft_rmsnorm(xb + r * H, mm->x + r * H, in_norm, H, io->eps);
    return WEFT_OK;
}

void weft_mtp_store_kv(const mtp_model *mm, const mtp_row *rows, int n, const float *k, const float *v) {
    const int64_t kvd = mm->kvd;
    for (int r = 0; r < n; r++) {
        mtp_hdr *hs = rows[r].hs;
        memcpy(weft_mtp_kv(mm, hs, 0) + (int64_t)rows[r].pos * kvd, k + r * kvd, (size_t)kvd * sizeof(float));
        memcpy(weft_mtp_kv(mm, hs, 1) + (int64_t)rows[r].pos * kvd, v + r * kvd, (size_t)kvd * sizeof(float));
    }
}

void weft_mtp_attend(mtp_model *mm, weft_pool *pool, const mtp_row *rows, int n, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, const float *q, float *out) {
    const int64_t kvd = mm->kvd, qd = n_heads * head_dim;
    /* The head's context starts at head_start (mtp.h): cache row head_start is attention position 0. */
    for (int r = 0; r < n; r++) {
        mtp_hdr *hs = rows[r].hs;
        mm->krow[r] = weft_mtp_kv(mm, hs, 0) + (int64_t)hs->head_start * kvd;
        mm->vrow[r] = weft_mtp_kv(mm, hs, 1) + (int64_t)hs->head_start * kvd;
        mm->apos[r] = rows[r].pos - hs->head_start;
    }
    weft_attn_args aa = {.n_rows = n,
                         .n_heads = (int)n_heads,
                         .n_kv_heads = (int)n_kv_heads,
                         .head_dim = (int)head_dim,
                         .scale = 1.0f / sqrtf((float)head_dim),
                         .q = q,
                         .q_stride = qd,
                         .out = out,
                         .out_stride = qd,
                         .k = mm->krow,
                         .v = mm->vrow,
                         .kv_stride = kvd,
                         .pos = mm->apos};
    weft_attention(pool, &aa);
}

void weft_mtp_residual(mtp_model *mm, int n, const float *add, const float *w, float *out) {
    const int64_t H = mm->H;
    for (int64_t i = 0; i < (int64_t)n * H; i++) mm->x[i] += add[i];
    for (int r = 0; r < n; r++) weft_rmsnorm(out + r * H, mm->x + r * H, w, H, mm->io->eps);
}
