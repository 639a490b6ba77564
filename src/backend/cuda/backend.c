/* The CUDA backend (weft/cuda_backend.h): creation with device-memory admission, weight upload, stream slots
 * with device KV caches, keep/release, prompt-cache snapshots, memory report, destroy. forward.c runs rounds.
 */
#include "cuda_model.h"

#include "weft/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB(x) ((double)(x) / 1048576.0)

int weft_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

int weft_cuda_device_info(int device, char *name, size_t name_size, int *cc_major, int *cc_minor,
                          size_t *memory_bytes) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    if (name && name_size) snprintf(name, name_size, "%s", p.name);
    *cc_major = p.major;
    *cc_minor = p.minor;
    *memory_bytes = p.totalGlobalMem;
    return 0;
}

/* Bytes of one KV cache element: the f16 mode's cache holds the f16 words its attention reads (weft_cu_row).
 */
static size_t kv_elem_bytes(const cu_backend *b) {
    return b->act_f16 ? 2 : sizeof(float);
}

size_t cu_kv_bytes(const cu_backend *b, int capacity) {
    return (size_t)b->L * 2 * (size_t)capacity * (size_t)(b->Hkv * b->d) * kv_elem_bytes(b);
}

/* Free device memory minus the reserve (0 when the reserve is larger). */
static size_t device_free(const cu_backend *b) {
    size_t fr = 0, total = 0;
    if (cudaSetDevice(b->dev) != cudaSuccess || cudaMemGetInfo(&fr, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return fr > b->reserve ? fr - b->reserve : 0;
}

static weft_status cu_open(void *self, int slot, int capacity, weft_err *err) {
    cu_backend *b = self;
    if (slot < 0 || slot >= b->max_slots) return weft_err_set(err, WEFT_EINVAL, "slot %d out of range", slot);
    if (b->kv[slot]) return weft_err_set(err, WEFT_EINVAL, "slot %d is already open", slot);
    if (capacity < 1 || capacity > b->max_context)
        return weft_err_set(err, WEFT_EINVAL, "capacity %d outside [1, %d]", capacity, b->max_context);
    size_t bytes = cu_kv_bytes(b, capacity), avail = device_free(b);
    if (bytes > avail)
        return weft_err_set(
            err, WEFT_ENOMEM,
            "cuda: a stream of %d positions needs %.1f MiB of KV cache; %.1f MiB of device memory is "
            "free beyond the %.1f MiB reserve",
            capacity, MIB(bytes), MIB(avail), MIB(b->reserve));
    CU_TRY(cudaSetDevice(b->dev), "selecting the device");
    int smem_max = 0;
    CU_TRY(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, b->dev),
           "reading the device's shared memory per block");
    const size_t attn_smem = weft_cu_attention_smem((int)b->Hq, (int)b->Hkv, (int)b->d);
    if (attn_smem > (size_t)smem_max)
        return weft_err_set(
            err, WEFT_ENOTSUP,
            "cuda backend: attention with head_dim %lld and %lld query heads per kv head needs %zu "
            "bytes of shared memory per block; device %d allows %d",
            (long long)b->d, (long long)(b->Hq / b->Hkv), attn_smem, b->dev, smem_max);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return weft_err_set(err, WEFT_ENOMEM, "cuda: cannot allocate %.1f MiB of KV cache for slot %d: %s",
                            MIB(bytes), slot, cudaGetErrorString(e));
    }
    b->kv[slot] = p;
    b->cap[slot] = capacity;
    b->slots_bytes += bytes;
    return WEFT_OK;
}

static void cu_release(void *self, int slot) {
    cu_backend *b = self;
    if (slot < 0 || slot >= b->max_slots || !b->kv[slot]) return;
    cudaSetDevice(b->dev);
    cudaFree(b->kv[slot]);
    b->slots_bytes -= cu_kv_bytes(b, b->cap[slot]);
    b->kv[slot] = NULL;
    b->cap[slot] = 0;
}

static weft_status cu_keep(void *self, int slot, int cache_len, weft_err *err) {
    cu_backend *b = self;
    if (slot < 0 || slot >= b->max_slots || !b->kv[slot])
        return weft_err_set(err, WEFT_EINVAL, "keep: slot %d is not open", slot);
    if (cache_len < 0 || cache_len > b->cap[slot])
        return weft_err_set(err, WEFT_ERANGE, "keep: %d outside capacity %d", cache_len, b->cap[slot]);
    return WEFT_OK; /* rows past cache_len are overwritten by the next forward before any row reads them */
}

static void cu_memory(void *self, size_t *used, size_t *free_bytes) {
    cu_backend *b = self;
    if (used) *used = b->allocs.bytes + b->slots_bytes;
    if (free_bytes) *free_bytes = device_free(b);
}

/* Snapshot at pos: per layer the K rows [0, pos) then the V rows [0, pos) (the CPU family's layout; f16 words
 * in the f16 mode, kv_elem_bytes). */
static size_t cu_snapshot_bytes(void *self, int pos) {
    const cu_backend *b = self;
    return pos < 0 ? 0 : cu_kv_bytes(b, pos);
}

static weft_status snapshot_copy(cu_backend *b, int slot, int pos, void *host, size_t bytes, int to_host,
                                 weft_err *err) {
    if (slot < 0 || slot >= b->max_slots || !b->kv[slot])
        return weft_err_set(err, WEFT_EINVAL, "%s: slot %d is not open", to_host ? "save" : "restore", slot);
    if (pos < 0 || pos > b->cap[slot])
        return weft_err_set(err, WEFT_ERANGE, "snapshot at %d outside capacity %d", pos, b->cap[slot]);
    if (bytes != cu_kv_bytes(b, pos))
        return weft_err_set(err, WEFT_EINVAL, "snapshot: %zu bytes given for a snapshot at %d", bytes, pos);
    CU_TRY(cudaSetDevice(b->dev), "selecting the device");
    const size_t kvd = (size_t)(b->Hkv * b->d), es = kv_elem_bytes(b), rows = (size_t)pos * kvd * es;
    char *h = host;
    for (int64_t l = 0; l < b->L; l++)
        for (int w = 0; w < 2; w++, h += rows) {
            char *dev = (char *)b->kv[slot] + ((size_t)(2 * l + w) * (size_t)b->cap[slot]) * kvd * es;
            if (!rows) continue;
            CU_TRY(to_host ? cudaMemcpy(h, dev, rows, cudaMemcpyDeviceToHost)
                           : cudaMemcpy(dev, h, rows, cudaMemcpyHostToDevice),
                   "copying a snapshot");
        }
    /* A copy from pageable host memory may return before its DMA lands, and forwards run on a non-blocking
     * stream that does not wait for the legacy one: the restored entries must be in place first (the decode
     * attention even reads them before its PDL wait, cuda_kernels.h). */
    if (!to_host) CU_TRY(cudaDeviceSynchronize(), "finishing a snapshot restore");
    return WEFT_OK;
}

static weft_status cu_save(void *self, int slot, int pos, void *dst, size_t bytes, weft_err *err) {
    return snapshot_copy(self, slot, pos, dst, bytes, 1, err);
}

static weft_status cu_restore(void *self, int slot, int pos, const void *src, size_t bytes, weft_err *err) {
    return snapshot_copy(self, slot, pos, (void *)src, bytes, 0, err);
}

static void cu_destroy(void *self) {
    cu_backend *b = self;
    if (!b) return;
    cudaSetDevice(b->dev);
    if (b->stream) cudaStreamSynchronize(b->stream);
    for (int i = 0; i < 3; i++)
        if (b->ev_n[i])
            fprintf(stderr,
                    "weft cuda timing: %s-row forwards: %ld, kernels %.3f ms each (events), wall %.3f ms\n",
                    i == 0   ? "1"
                    : i == 1 ? "2..16"
                             : ">16",
                    b->ev_n[i], b->ev_ms[i] / (double)b->ev_n[i], b->wall_ms[i] / (double)b->ev_n[i]);
    if (b->ev0) cudaEventDestroy(b->ev0);
    if (b->ev1) cudaEventDestroy(b->ev1);
    for (int s = 0; b->kv && s < b->max_slots; s++) cu_release(b, s);
    cu_free_all(&b->allocs);
    if (b->h_rows) cudaFreeHost(b->h_rows);
    if (b->h_outrows) cudaFreeHost(b->h_outrows);
    if (b->h_logits) cudaFreeHost(b->h_logits);
    if (b->exec) cudaGraphExecDestroy(b->exec);
    if (b->stream) cudaStreamDestroy(b->stream);
    for (int i = 0; b->samplers && i < b->n_samplers; i++) weft_sampler_free(b->samplers[i]);
    weft_sampler_free(b->solo);
    free(b->samplers);
    free(b->free_s);
    free(b->tasks);
    if (b->pool) weft_pool_free(b->pool);
    if (b->smu_ok) pthread_mutex_destroy(&b->smu);
    if (b->h_gsel) cudaFreeHost(b->h_gsel);
    if (b->h_ids) cudaFreeHost(b->h_ids);
    if (b->h_tiles) cudaFreeHost(b->h_tiles);
    free(b->layers);
    free(b->kv);
    free(b->cap);
    free(b);
}

static const weft_backend_ops CUDA_OPS = {
    .name = "cuda",
    .open = cu_open,
    .forward = cu_forward,
    .keep = cu_keep,
    .release = cu_release,
    .memory = cu_memory,
    .snapshot_bytes = cu_snapshot_bytes,
    .save = cu_save,
    .restore = cu_restore,
    .destroy = cu_destroy,
};

/* ---- creation ---- */

/* A device matrix and the stored tensor(s) it is made of (several when fused at upload). */
typedef struct mat_ref {
    weft_cu_weight *w;
    const weft_tensor *t[3];
    int n;
    bool interleave8;
} mat_ref;

/* Two planned weights that one WEFT_CU_Q4F matrix can hold (the same format and row length). */
static bool same_q4f(const weft_cu_weight *a, const weft_cu_weight *b) {
    return a->kind == WEFT_CU_Q4F && b->kind == WEFT_CU_Q4F && a->mode == b->mode && a->sdt == b->sdt &&
           a->group == b->group && a->cols == b->cols;
}

static void plan_fused(weft_cu_weight *f, const weft_cu_weight *like, int64_t rows) {
    *f = *like;
    f->rows = rows;
    f->bytes = weft_cu_weight_bytes(f->kind, f->mode, f->sdt, f->group, rows, f->cols);
}

static const weft_tensor *need(const weft_tensor_set *ts, const char *name, weft_err *err) {
    const weft_tensor *t = weft_tensor_set_get(ts, name);
    if (!t) weft_err_set(err, WEFT_EFORMAT, "missing tensor %s", name);
    return t;
}

/* Plans every matrix (shape and dtype checks, device bytes) before any upload. */
static weft_status plan_mats(cu_backend *b, const weft_config *cfg, const weft_tensor_set *ts, mat_ref *mats,
                             int *n_mats, bool *tied, weft_err *err) {
    const int64_t H = b->H, qd = b->Hq * b->d, kvd = b->Hkv * b->d, I = b->I;
    int n = 0;
    weft_status st;
    const weft_tensor *emb = need(ts, "model.embed_tokens.weight", err);
    if (!emb) return WEFT_EFORMAT;
    const weft_tensor *head = weft_tensor_set_get(ts, "lm_head.weight");
    *tied = cfg->tie_word_embeddings || !head || head == emb;
    if (*tied) head = emb;
    if ((st = cu_weight_plan(emb, b->V, H, &b->embed, err))) return st;
    mats[n++] = (mat_ref){&b->embed, {emb}, 1, false};
    if ((st = cu_weight_plan(head, b->V, H, &b->head, err))) return st;
    if (!*tied) mats[n++] = (mat_ref){&b->head, {head}, 1, false};
    for (int64_t l = 0; l < b->L; l++) {
        cu_layer *ly = &b->layers[l];
        struct {
            const char *suffix;
            weft_cu_weight *w;
            int64_t rows, cols;
        } want[7] = {
            {"self_attn.q_proj.weight", &ly->wq, qd, H},  {"self_attn.k_proj.weight", &ly->wk, kvd, H},
            {"self_attn.v_proj.weight", &ly->wv, kvd, H}, {"self_attn.o_proj.weight", &ly->wo, H, qd},
            {"mlp.gate_proj.weight", &ly->wg, I, H},      {"mlp.up_proj.weight", &ly->wu, I, H},
            {"mlp.down_proj.weight", &ly->wd, H, I}};
        const weft_tensor *tt[7];
        for (int i = 0; i < 7; i++) {
            char nm[160];
            snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, want[i].suffix);
            tt[i] = need(ts, nm, err);
            if (!tt[i]) return WEFT_EFORMAT;
            if ((st = cu_weight_plan(tt[i], want[i].rows, want[i].cols, want[i].w, err))) return st;
        }
        /* Q|K|V and gate|up as single matrices when their formats allow (one launch, one pass over x). */
        ly->qkv = !b->baseline && same_q4f(&ly->wq, &ly->wk) && same_q4f(&ly->wq, &ly->wv);
        ly->gu = !b->baseline && same_q4f(&ly->wg, &ly->wu);
        if (ly->qkv) {
            plan_fused(&ly->wqkv, &ly->wq, qd + 2 * kvd);
            mats[n++] = (mat_ref){&ly->wqkv, {tt[0], tt[1], tt[2]}, 3, false};
        } else {
            for (int i = 0; i < 3; i++) mats[n++] = (mat_ref){want[i].w, {tt[i]}, 1, false};
        }
        mats[n++] = (mat_ref){&ly->wo, {tt[3]}, 1, false};
        if (ly->gu) {
            plan_fused(&ly->wgu, &ly->wg, 2 * I);
            mats[n++] = (mat_ref){&ly->wgu, {tt[4], tt[5]}, 2, true};
        } else {
            for (int i = 4; i < 6; i++) mats[n++] = (mat_ref){want[i].w, {tt[i]}, 1, false};
        }
        mats[n++] = (mat_ref){&ly->wd, {tt[6]}, 1, false};
    }
    *n_mats = n;
    return WEFT_OK;
}

static weft_status upload_vectors(cu_backend *b, const weft_config *cfg, const weft_tensor_set *ts,
                                  weft_err *err) {
    weft_status st;
    const weft_tensor *fn = need(ts, "model.norm.weight", err);
    if (!fn) return WEFT_EFORMAT;
    if ((st = cu_vec_upload(fn, b->H, &b->final_norm, &b->allocs, err))) return st;
    const bool qk = cfg->family == WEFT_FAMILY_QWEN3;
    for (int64_t l = 0; l < b->L; l++) {
        cu_layer *ly = &b->layers[l];
        char nm[160];
#define VEC(suffix, n, dst, required)                                                                        \
    do {                                                                                                     \
        snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, suffix);                               \
        const weft_tensor *t_ = weft_tensor_set_get(ts, nm);                                                 \
        if (!t_ && (required)) return weft_err_set(err, WEFT_EFORMAT, "missing tensor %s", nm);              \
        if ((st = cu_vec_upload(t_, n, dst, &b->allocs, err))) return st;                                    \
    } while (0)
        VEC("input_layernorm.weight", b->H, &ly->attn_norm, true);
        VEC("post_attention_layernorm.weight", b->H, &ly->ffn_norm, true);
        VEC("self_attn.q_proj.bias", b->Hq * b->d, &ly->bq, cfg->attention_bias);
        VEC("self_attn.k_proj.bias", b->Hkv * b->d, &ly->bk, cfg->attention_bias);
        VEC("self_attn.v_proj.bias", b->Hkv * b->d, &ly->bv, cfg->attention_bias);
        if (qk) {
            VEC("self_attn.q_norm.weight", b->d, &ly->q_norm, true);
            VEC("self_attn.k_norm.weight", b->d, &ly->k_norm, true);
        }
#undef VEC
    }
    return WEFT_OK;
}

/* Rows weft_cu_attention_decode takes in a forward at most (forward.c: decode rounds of at most
 * weft_cu_attention_decode_rows streams). */
enum { kDecodeRows = WEFT_CU_ATTN_DECODE_MAX_ROWS };

/* The attention's scratch: the span partials of any forward, or the one-kernel decode's key-block records. */
static size_t attn_scratch_floats(const cu_backend *b) {
    const size_t a = weft_cu_attention_scratch_floats(b->max_rows, (int)b->Hq, (int)b->d, b->max_context),
                 c = weft_cu_attention_decode_scratch_floats(kDecodeRows, (int)b->Hq, (int)b->d);
    return a > c ? a : c;
}

/* The split-K scratch the model's matmuls need (weft_cu_epi.part): the largest need over the planned Q4_0
 * weights (the layout whose products take the split-K forms, mma_q4x.cu) — weft_cu_gemv_part_floats for
 * 9..16-row products and, with forwards past 16 rows, weft_cu_gemm_q4w_part_floats at up to 64 rows for the
 * weights whose 64-row GEMM grid is small — 0 when none does or a forward has fewer than 9 rows, or in
 * baseline mode (its products never read prepared activations). */
static size_t mm_part_floats(const cu_backend *b, const mat_ref *mats, int n_mats) {
    size_t m = 0;
    if (b->baseline || b->max_rows < 9) return 0;
    for (int i = 0; i < n_mats; i++) {
        const weft_cu_weight *w = mats[i].w;
        if (w->kind != WEFT_CU_Q4F || w->mode != WEFT_CU_OFF8) continue;
        size_t f = weft_cu_gemv_part_floats(w->rows, w->cols);
        if (b->max_rows > 16 && (w->rows / 16 + 7) / 8 < WEFT_CU_GEMM_MIN_BLOCKS) {
            const size_t g =
                weft_cu_gemm_q4w_part_floats(w->rows, w->cols, b->max_rows < 64 ? b->max_rows : 64);
            f = g > f ? g : f;
        }
        m = f > m ? f : m;
    }
    return m;
}

static size_t attn_counters_bytes(const cu_backend *b) {
    return (size_t)weft_cu_attention_decode_counters(kDecodeRows, (int)b->Hkv) * sizeof(int);
}

static weft_status alloc_activations(cu_backend *b, weft_err *err) {
    const size_t R = (size_t)b->max_rows, H = (size_t)b->H, qd = (size_t)(b->Hq * b->d),
                 kvd = (size_t)(b->Hkv * b->d), I = (size_t)b->I, V = (size_t)b->V, f = sizeof(float);
    struct {
        void **p;
        size_t bytes;
    } acts[] = {{(void **)&b->x, R * H * f},
                {(void **)&b->xb, R * H * f},
                {(void **)&b->q, R * qd * f},
                {(void **)&b->k, R * kvd * f},
                {(void **)&b->v, R * kvd * f},
                {(void **)&b->att, R * qd * f},
                {(void **)&b->g, R * I * f},
                {(void **)&b->u, R * I * f},
                {(void **)&b->logits, R * V * f},
                {(void **)&b->d_rows, R * sizeof(weft_cu_row)},
                {(void **)&b->d_outrows, R * sizeof(int)},
                {(void **)&b->d_gsel, R * sizeof(int)},
                {(void **)&b->d_ids, R * sizeof(int32_t)},
                {(void **)&b->attn_scratch, attn_scratch_floats(b) * f},
                {(void **)&b->mm_part, b->mm_part_floats * f},
                {(void **)&b->mm_xb, b->mm_xb_words * sizeof(uint32_t)},
                {(void **)&b->xq_f, 2 * R * (size_t)b->xq_k * sizeof(uint32_t)},
                {(void **)&b->xq_s, 2 * R * (size_t)(b->xq_k / 32) * f},
                {(void **)&b->d_tiles, R * sizeof(weft_cu_tile)},
                {(void **)&b->attn_counters, attn_counters_bytes(b)}};
    weft_status st;
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if ((st = cu_alloc(&b->allocs, acts[i].p, acts[i].bytes, "activations", err))) return st;
    CU_TRY(cudaMemset(b->attn_counters, 0, attn_counters_bytes(b)), "attention counters");
    /* (on the legacy stream; the forwards' non-blocking stream does not wait for it) */
    CU_TRY(cudaDeviceSynchronize(), "zeroing the attention counters");
    CU_TRY(cudaMallocHost((void **)&b->h_rows, R * sizeof(weft_cu_row)), "pinned row table");
    CU_TRY(cudaMallocHost((void **)&b->h_outrows, R * sizeof(int)), "pinned drawn-row table");
    CU_TRY(cudaMallocHost((void **)&b->h_logits, R * V * f), "pinned logits");
    CU_TRY(cudaMallocHost((void **)&b->h_gsel, R * sizeof(int)), "pinned greedy-row table");
    CU_TRY(cudaMallocHost((void **)&b->h_ids, R * sizeof(int32_t)), "pinned greedy ids");
    CU_TRY(cudaMallocHost((void **)&b->h_tiles, R * sizeof(weft_cu_tile)), "pinned tile table");
    return WEFT_OK;
}

static size_t activation_bytes(const cu_backend *b) {
    const size_t R = (size_t)b->max_rows;
    return R * sizeof(float) * (size_t)(2 * b->H + 2 * b->Hq * b->d + 2 * b->Hkv * b->d + 2 * b->I + b->V) +
           R * (sizeof(weft_cu_row) + 3 * sizeof(int)) +
           (attn_scratch_floats(b) + b->mm_part_floats) * sizeof(float) + b->mm_xb_words * sizeof(uint32_t) +
           R * (2 * (size_t)b->xq_k * sizeof(uint32_t) + 2 * (size_t)(b->xq_k / 32) * sizeof(float) +
                sizeof(weft_cu_tile)) +
           attn_counters_bytes(b);
}

static weft_status create(cu_backend *b, const weft_config *cfg, const weft_tensor_set *ts,
                          const weft_cuda_backend_opts *opts, weft_err *err) {
    if (cfg->family != WEFT_FAMILY_LLAMA && cfg->family != WEFT_FAMILY_QWEN3)
        return weft_err_set(err, WEFT_ENOTSUP,
                            "cuda backend: model family %s is not supported (llama, qwen3)",
                            weft_family_name(cfg->family));
    b->H = cfg->hidden_size;
    b->Hq = cfg->n_heads;
    b->Hkv = cfg->n_kv_heads > 0 ? cfg->n_kv_heads : cfg->n_heads;
    b->d = cfg->head_dim > 0 ? cfg->head_dim : (cfg->n_heads > 0 ? cfg->hidden_size / cfg->n_heads : 0);
    b->I = cfg->intermediate_size;
    b->V = cfg->vocab_size;
    b->L = cfg->n_layers;
    b->eps = (float)cfg->rms_norm_eps;
    b->tile_rows = !b->baseline && weft_cu_attention_tiles_ok((int)b->Hq, (int)b->Hkv, (int)b->d)
                       ? weft_cu_attention_tile_rows((int)b->Hq, (int)b->Hkv)
                       : 0;
    b->xq_k = b->H > b->Hq * b->d ? b->H : b->Hq * b->d;
    if (b->I > b->xq_k) b->xq_k = b->I;
    /* a multiple of 128: the down projection's sums (buffer 1, max_rows·xq_k/32 floats in) then start on 16
     * bytes, which its 16-byte cp.async copies need (mma_q4x.cu X1S, gemm_q4.cu) whatever max_rows is */
    b->xq_k = (b->xq_k + 127) / 128 * 128;
    if (b->H <= 0 || b->Hq <= 0 || b->Hkv <= 0 || b->d <= 0 || b->I <= 0 || b->V <= 0 || b->L <= 0 ||
        b->Hq % b->Hkv)
        return weft_err_set(err, WEFT_EFORMAT,
                            "config: invalid shape (hidden %lld, heads %lld/%lld, head_dim %lld)",
                            (long long)b->H, (long long)b->Hq, (long long)b->Hkv, (long long)b->d);
    if (!weft_cu_attention_ok((int)b->Hq, (int)b->Hkv, (int)b->d))
        return weft_err_set(
            err, WEFT_ENOTSUP,
            "cuda backend: head_dim %lld with %lld query heads per kv head (head_dim a multiple of 16, "
            "at most 256; at most 16 query heads per kv head)",
            (long long)b->d, (long long)(b->Hq / b->Hkv));
    int ndev = weft_cuda_device_count();
    if (ndev <= 0) return weft_err_set(err, WEFT_ENOTSUP, "cuda backend: no CUDA device is visible");
    if (opts->device < 0 || opts->device >= ndev)
        return weft_err_set(err, WEFT_EINVAL, "cuda backend: device %d of %d", opts->device, ndev);
    b->dev = opts->device;
    CU_TRY(cudaSetDevice(b->dev), "selecting the device");
    b->reserve = opts->reserve_bytes ? opts->reserve_bytes : (size_t)1 << 30;
    b->layers = calloc((size_t)b->L, sizeof *b->layers);
    b->kv = calloc((size_t)b->max_slots, sizeof *b->kv);
    b->cap = calloc((size_t)b->max_slots, sizeof *b->cap);
    /* Host draws: one sampler per pool thread (the CPUs, at most 16 and at most max_rows). */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    b->n_samplers = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu;
    if (b->n_samplers > b->max_rows) b->n_samplers = b->max_rows;
    b->samplers = calloc((size_t)b->n_samplers, sizeof *b->samplers);
    b->free_s = calloc((size_t)b->n_samplers, sizeof *b->free_s);
    b->tasks = calloc((size_t)b->max_rows, sizeof *b->tasks);
    b->pool = weft_pool_new(b->n_samplers, 1);
    b->smu_ok = b->samplers && b->free_s && pthread_mutex_init(&b->smu, NULL) == 0;
    bool samplers_ok = b->smu_ok && b->tasks && b->pool;
    for (int i = 0; samplers_ok && i < b->n_samplers; i++) {
        b->samplers[i] = b->free_s[i] = weft_sampler_new(b->V);
        samplers_ok = b->samplers[i] != NULL;
    }
    b->n_free = b->n_samplers;
    b->solo = samplers_ok ? weft_sampler_new(b->V) : NULL;
    samplers_ok =
        b->solo && (b->n_samplers < 2 || weft_sampler_set_parallel(b->solo, weft_pool_run_plain, b->pool,
                                                                   b->n_samplers) == WEFT_OK);
    mat_ref *mats = malloc(((size_t)b->L * 7 + 2) * sizeof *mats);
    if (!b->layers || !b->kv || !b->cap || !samplers_ok || !mats) {
        free(mats);
        return weft_err_set(err, WEFT_ENOMEM, "out of host memory creating the CUDA backend");
    }
    int n_mats = 0;
    bool tied = false;
    weft_status st = plan_mats(b, cfg, ts, mats, &n_mats, &tied, err);
    if (st) {
        free(mats);
        return st;
    }
    size_t wbytes = 0;
    for (int i = 0; i < n_mats; i++) wbytes += mats[i].w->bytes;
    b->weights_bytes = wbytes;
    b->mm_part_floats = mm_part_floats(b, mats, n_mats);
    /* the wgmma GEMM's bulk copies: f16 mode, forwards past 64 rows (weft_cu_epi.xb) */
    b->mm_xb_words = b->act_f16 && b->max_rows > 64 ? weft_cu_gemm_q4w_xb_words(b->xq_k, b->max_rows) : 0;
    b->act_bytes = activation_bytes(b);
    /* Admission (SPEC §4.6): weights + activations must fit before anything is uploaded. */
    size_t avail = device_free(b), need_bytes = wbytes + b->act_bytes;
    if (need_bytes > avail) {
        free(mats);
        return weft_err_set(
            err, WEFT_ENOMEM,
            "cuda: the model needs %.1f MiB of device memory (weights %.1f MiB, activations for %d "
            "rows %.1f MiB); %.1f MiB is free beyond the %.1f MiB reserve",
            MIB(need_bytes), MIB(wbytes), b->max_rows, MIB(b->act_bytes), MIB(avail), MIB(b->reserve));
    }
    for (int i = 0; i < n_mats && !st; i++)
        st = mats[i].n == 1 ? cu_weight_upload(mats[i].t[0], mats[i].w, &b->allocs, err)
                            : cu_weight_upload_cat(mats[i].t, mats[i].n, mats[i].interleave8, mats[i].w,
                                                   &b->allocs, err);
    free(mats);
    if (st) return st;
    if (tied) {
        b->head = b->embed;
        b->head.bytes = 0;
    }
    if ((st = upload_vectors(b, cfg, ts, err))) return st;
    weft_rope_table rt;
    if ((st = weft_rope_init(&rt, &cfg->rope, b->d, err))) return st;
    b->rope.rot = rt.rot;
    b->rope.adjacent = rt.adjacent;
    b->rope.attn_factor = rt.attn_factor;
    float *inv = NULL;
    if (rt.rot > 0) {
        st = cu_alloc(&b->allocs, (void **)&inv, (size_t)(rt.rot / 2) * sizeof(float), "rope table", err);
        if (!st && cudaMemcpy(inv, rt.inv_freq, (size_t)(rt.rot / 2) * sizeof(float), cudaMemcpyHostToDevice))
            st = weft_err_set(err, WEFT_EINTERNAL, "cuda: copying the rope table failed");
    }
    weft_rope_free(&rt);
    if (st) return st;
    b->rope.inv_freq = inv;
    if ((st = alloc_activations(b, err))) return st;
    CU_TRY(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "creating a stream");
    return WEFT_OK;
}

weft_status weft_cuda_backend_new(const weft_config *cfg, const weft_tensor_set *ts,
                                  const weft_cuda_backend_opts *opts, weft_backend *out, weft_err *err) {
    cu_backend *b = calloc(1, sizeof *b);
    if (!b) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    b->max_slots = opts->max_slots > 0 ? opts->max_slots : 1;
    b->max_rows = opts->max_rows > 0 ? opts->max_rows : 256;
    b->max_context = opts->max_context > 0 ? opts->max_context : 4096;
    b->graphs = !opts->no_graphs;
    /* WEFT_CUDA_BASELINE (non-empty): session 2's kernels and no fused matrices, for side-by-side timing. */
    const char *base = getenv("WEFT_CUDA_BASELINE");
    b->baseline = base && *base && strcmp(base, "0") != 0;
    b->act_f16 = opts->act_f16;
    if (b->baseline && b->act_f16) { /* the baseline's fp32-x products have no f16 form */
        free(b);
        return weft_err_set(err, WEFT_ENOTSUP, "cuda: WEFT_CUDA_BASELINE cannot run --activations f16");
    }
    const char *twice = getenv("WEFT_CUDA_TIMING_TWICE");
    b->twice = twice ? (unsigned)strtoul(twice, NULL, 0) : 0;
    if ((b->twice & WEFT_CU_T_EVENTS) &&
        (cudaEventCreate(&b->ev0) != cudaSuccess || cudaEventCreate(&b->ev1) != cudaSuccess))
        b->twice &= ~(unsigned)WEFT_CU_T_EVENTS;
    if (b->twice)
        fprintf(stderr,
                "weft cuda: WEFT_CUDA_TIMING_TWICE=%#x: stages launched twice for timing; logits are "
                "wrong when rope or matmul stages are doubled\n",
                b->twice);
    weft_status st = create(b, cfg, ts, opts, err);
    if (st) {
        cu_destroy(b);
        return st;
    }
    /* (once: the answer is fixed by the heads, the mode and the device — it queries the device's clusters) */
    b->attn_rows = weft_cu_attention_decode_rows((int)b->Hq, (int)b->Hkv, (int)b->d, b->act_f16);
    out->ops = &CUDA_OPS;
    out->self = b;
    out->max_slots = b->max_slots;
    out->max_rows = b->max_rows;
    out->vocab_size = b->V;
    return WEFT_OK;
}

/* The logits stay on the device after a forward (greedy rows' never come back on their own): this hook
 * copies all drawn rows back on demand. */
const float *weft_cuda_backend_last_logits(const weft_backend *be, int *n_rows) {
    cu_backend *b = be->self;
    if (n_rows) *n_rows = b->n_last;
    if (b->n_last > 0 && (cudaSetDevice(b->dev) != cudaSuccess ||
                          cudaMemcpy(b->h_logits, b->logits, (size_t)b->n_last * (size_t)b->V * sizeof(float),
                                     cudaMemcpyDeviceToHost) != cudaSuccess)) {
        (void)cudaGetLastError();
        if (n_rows) *n_rows = 0;
        return NULL;
    }
    return b->h_logits;
}

size_t weft_cuda_backend_device_bytes(const weft_backend *be) {
    const cu_backend *b = be->self;
    return b->allocs.bytes + b->slots_bytes;
}
