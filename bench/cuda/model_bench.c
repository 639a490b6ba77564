/* The CUDA backend end to end at a real shape, on random weights made in memory (no checkpoint file needed):
 * the Llama-3.1-8B shape (or the 32B dense shape with "32b") as GGUF Q4_0, MLX affine 4-bit g64, F16 or BF16.
 * Measures, through the backend vtable exactly as the lane core drives it:
 *   prefill tok/s of a P-token prompt (chunks of max_rows), batch-1 decode tok/s over G tokens (sampled at
 *   temperature 1), aggregate decode tok/s at 1/4/16/64 streams (64-token prompts, 32 rounds),
 * with weight bytes per decode token / time as achieved bandwidth.
 * Usage: bench_cuda_model [q4_0|mlx4|f16|bf16] [8b|32b] [P] [G] */
#include "weft/cuda_backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fill_job {
    uint8_t *p;
    size_t n;
    uint64_t seed;
    int kind; /* 0 random bytes, 1 f16 small, 2 bf16 small, 3 q4_0 blocks, 4 const bf16 (scales), 5 bf16 bias
               */
} fill_job;

static uint64_t xs(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static void *fill_thread(void *arg) {
    fill_job *j = arg;
    uint64_t s = j->seed * 0x9E3779B97F4A7C15ull + 1;
    if (j->kind == 3) { /* Q4_0: {fp16 d; 16 bytes} */
        for (size_t b = 0; b + 18 <= j->n; b += 18) {
            uint64_t r = xs(&s), r2 = xs(&s);
            uint16_t d = (uint16_t)(0x2000 | (r & 0x3ff)); /* ~0.008 */
            memcpy(j->p + b, &d, 2);
            memcpy(j->p + b + 2, &r2, 8);
            r2 = xs(&s);
            memcpy(j->p + b + 10, &r2, 8);
        }
        return NULL;
    }
    for (size_t i = 0; i + 8 <= j->n; i += 8) {
        uint64_t r = xs(&s);
        if (j->kind == 1)
            r = (r & 0x83FF83FF83FF83FFull) | 0x2000200020002000ull;
        else if (j->kind == 2)
            r = (r & 0x807F807F807F807Full) | 0x3C003C003C003C00ull;
        else if (j->kind == 4)
            r = 0x3C233C233C233C23ull; /* bf16 0.00995 */
        else if (j->kind == 5)
            r = 0xBDA3BDA3BDA3BDA3ull; /* bf16 -0.0796 */
        memcpy(j->p + i, &r, 8);
    }
    return NULL;
}

/* Fills n bytes (a multiple of 8, or of 18 for Q4_0) with 16 threads. */
static void fill(uint8_t *p, size_t n, int kind, uint64_t seed) {
    enum { NT = 16 };
    pthread_t th[NT];
    fill_job jobs[NT];
    size_t unit = kind == 3 ? 18 : 8, units = n / unit, per = (units + NT - 1) / NT;
    for (int t = 0; t < NT; t++) {
        size_t a = (size_t)t * per, b = a + per < units ? a + per : units;
        jobs[t] = (fill_job){p + a * unit, (b > a ? b - a : 0) * unit, seed * 131 + (uint64_t)t, kind};
        pthread_create(&th[t], NULL, fill_thread, &jobs[t]);
    }
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
}

static int add_mat(weft_tensor_set *ts, const char *name, int64_t rows, int64_t cols, const char *fmt,
                   uint64_t seed) {
    weft_tensor t = {0};
    t.name = name;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    size_t n = (size_t)rows * (size_t)cols;
    weft_err err = {0};
    if (!strcmp(fmt, "q4_0")) {
        t.dtype = WEFT_DT_Q4_0;
        t.nbytes = n / 32 * 18;
    } else if (!strcmp(fmt, "mlx4")) {
        t.dtype = WEFT_DT_MLX_AFFINE;
        t.bits = 4;
        t.group_size = 64;
        t.scale_dtype = WEFT_DT_BF16;
        t.nbytes = n / 2;
    } else {
        t.dtype = !strcmp(fmt, "f16") ? WEFT_DT_F16 : WEFT_DT_BF16;
        t.nbytes = n * 2;
    }
    uint8_t *p = malloc(t.nbytes);
    if (!p) return 1;
    fill(p, t.nbytes,
         t.dtype == WEFT_DT_Q4_0   ? 3
         : t.dtype == WEFT_DT_F16  ? 1
         : t.dtype == WEFT_DT_BF16 ? 2
                                   : 0,
         seed);
    t.data = p;
    weft_tensor_set_own_memory(ts, p);
    if (t.dtype == WEFT_DT_MLX_AFFINE) {
        size_t sb = n / 64 * 2;
        uint8_t *s = malloc(sb), *b = malloc(sb);
        if (!s || !b) return 1;
        fill(s, sb, 4, 0);
        fill(b, sb, 5, 0);
        t.scales = s;
        t.biases = b;
        weft_tensor_set_own_memory(ts, s);
        weft_tensor_set_own_memory(ts, b);
    }
    if (weft_tensor_set_add(ts, &t, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}

static int add_ones(weft_tensor_set *ts, const char *name, int64_t n) {
    weft_tensor t = {0};
    t.name = name;
    t.ndim = 1;
    t.shape[0] = n;
    t.dtype = WEFT_DT_F32;
    t.nbytes = (size_t)n * 4;
    float *p = malloc(t.nbytes);
    if (!p) return 1;
    for (int64_t i = 0; i < n; i++) p[i] = 1.0f;
    t.data = (const uint8_t *)p;
    weft_tensor_set_own_memory(ts, p);
    weft_err err = {0};
    return weft_tensor_set_add(ts, &t, &err) != WEFT_OK;
}

static double forward_timed(weft_backend *be, weft_segment *segs, int n) {
    weft_err err = {0};
    double t0 = weft_now();
    if (be->ops->forward(be->self, segs, n, &err)) {
        fprintf(stderr, "forward: %s\n", err.msg);
        exit(1);
    }
    return weft_now() - t0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *fmt = argc > 1 ? argv[1] : "q4_0", *shape = argc > 2 ? argv[2] : "8b";
    const int P = argc > 3 ? atoi(argv[3]) : 512, G = argc > 4 ? atoi(argv[4]) : 128;
    const bool big = !strcmp(shape, "32b");
    const int64_t H = big ? 5120 : 4096, I = big ? 25600 : 14336, L = big ? 64 : 32, Hq = big ? 40 : 32,
                  Hkv = 8, d = 128, V = 128256;
    char cfg_json[1024];
    snprintf(cfg_json, sizeof cfg_json,
             "{\"model_type\":\"llama\",\"vocab_size\":%lld,\"hidden_size\":%lld,\"intermediate_size\":%lld,"
             "\"num_hidden_layers\":%lld,\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_"
             "dim\":128,"
             "\"rms_norm_eps\":1e-5,\"max_position_embeddings\":131072,\"tie_word_embeddings\":false,"
             "\"rope_theta\":500000.0,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
             "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192}}",
             (long long)V, (long long)H, (long long)I, (long long)L, (long long)Hq, (long long)Hkv);
    weft_config cfg;
    weft_err err = {0};
    if (weft_config_parse(cfg_json, NULL, &cfg, &err)) {
        fprintf(stderr, "config: %s\n", err.msg);
        return 1;
    }
    double t0 = weft_now();
    weft_tensor_set *ts = weft_tensor_set_new();
    int bad = add_mat(ts, "model.embed_tokens.weight", V, H, fmt, 1) |
              add_mat(ts, "lm_head.weight", V, H, fmt, 2) | add_ones(ts, "model.norm.weight", H);
    static char names[64 * 9][96];
    int nn = 0;
    for (int64_t l = 0; l < L && !bad; l++) {
        const struct {
            const char *s;
            int64_t r, c;
        } m[7] = {{"self_attn.q_proj.weight", Hq * d, H},  {"self_attn.k_proj.weight", Hkv * d, H},
                  {"self_attn.v_proj.weight", Hkv * d, H}, {"self_attn.o_proj.weight", H, Hq * d},
                  {"mlp.gate_proj.weight", I, H},          {"mlp.up_proj.weight", I, H},
                  {"mlp.down_proj.weight", H, I}};
        for (int i = 0; i < 7; i++) {
            snprintf(names[nn], sizeof names[nn], "model.layers.%lld.%s", (long long)l, m[i].s);
            bad |= add_mat(ts, names[nn++], m[i].r, m[i].c, fmt, 100 + (uint64_t)l * 7 + (uint64_t)i);
        }
        snprintf(names[nn], sizeof names[nn], "model.layers.%lld.input_layernorm.weight", (long long)l);
        bad |= add_ones(ts, names[nn++], H);
        snprintf(names[nn], sizeof names[nn], "model.layers.%lld.post_attention_layernorm.weight",
                 (long long)l);
        bad |= add_ones(ts, names[nn++], H);
    }
    if (bad) {
        fprintf(stderr, "cannot build the random weights\n");
        return 1;
    }
    double t_fill = weft_now() - t0;
    const int cap = (P + G + 16 > 8200 ? P + G + 16 : 8200), max_slots = 64;
    weft_cuda_backend_opts o = {0,
                                max_slots,
                                256,
                                cap > 128 ? cap : 128,
                                0,
                                getenv("WEFT_NO_GRAPHS") != NULL,
                                getenv("WEFT_F16") != NULL}; /* WEFT_F16: --activations f16 */
    weft_backend be;
    t0 = weft_now();
    if (weft_cuda_backend_new(&cfg, ts, &o, &be, &err)) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    double t_up = weft_now() - t0;
    size_t wbytes = weft_cuda_backend_device_bytes(&be);
    printf("model %s %s: %.2f GB on the device (fill %.1f s, upload %.1f s)\n", shape, fmt, wbytes / 1e9,
           t_fill, t_up);

    weft_sampling sp, greedy;
    weft_sampling_defaults(&sp);
    sp.seed = 7;
    greedy = sp;
    greedy.temperature = 0; /* drawn on the device: only ids come back */
    int32_t *seq = malloc((size_t)(cap + 8) * sizeof *seq), draws[256];
    /* warm-up: one small forward in another slot (module load, first launches) */
    be.ops->open(be.self, 1, cap, &err);
    for (int i = 0; i < 4; i++) seq[i] = i + 1;
    weft_segment w = {1, 0, 4, seq, 4, 1, &sp, draws, NULL};
    forward_timed(&be, &w, 1);
    be.ops->release(be.self, 1);
    /* WEFT_BENCH_GREEDY_ONLY (non-empty): skip the temperature-1 pass (shorter device runs) */
    const char *go = getenv("WEFT_BENCH_GREEDY_ONLY");
    const int n_modes = go && *go ? 1 : 2;
    for (int mode = 0; mode < n_modes; mode++) {
        const weft_sampling *ps = mode ? &sp : &greedy;
        const char *mname = mode ? "temperature 1 (host draws)" : "greedy (device argmax)";
        for (int i = 0; i < P; i++) seq[i] = (int32_t)((i * 7919 + 13) % V);
        if (be.ops->open(be.self, 0, cap, &err)) {
            fprintf(stderr, "open: %s\n", err.msg);
            return 1;
        }
        double t_pre = 0;
        for (int a = 0; a < P; a += 256) {
            int n = P - a < 256 ? P - a : 256;
            weft_segment s = {0, a, n, seq, P, a + n == P ? 1 : 0, ps, draws, NULL};
            t_pre += forward_timed(&be, &s, 1);
        }
        seq[P] = draws[0];
        double t_dec = 0;
        for (int g = 0; g < G; g++) {
            weft_segment s = {0, P + g, 1, seq, P, 1, ps, draws, NULL};
            t_dec += forward_timed(&be, &s, 1);
            seq[P + g + 1] = draws[0];
        }
        be.ops->release(be.self, 0);
        double tps = G / t_dec;
        printf("%s: prefill %d tokens: %.0f tok/s | batch-1 decode %d tokens: %.1f tok/s, %.2f ms/token, "
               "weights %.0f GB/s (%.0f%% of 4.6 TB/s)\n",
               mname, P, P / t_pre, G, tps, 1e3 * t_dec / G, wbytes * tps / 1e9,
               100.0 * wbytes * tps / 4.6e12);

        /* aggregate decode at S streams: 64-token prompts (untimed), then 32 rounds of S rows */
        static int32_t sseq[64][256];
        static int32_t sdraw[64][4];
        weft_segment segs[64];
        for (int S = 1; S <= 64; S *= 4) {
            for (int i = 0; i < S; i++) {
                be.ops->open(be.self, i, 128, &err);
                for (int t = 0; t < 64; t++) sseq[i][t] = (int32_t)((t * 31 + i * 1009) % V);
                segs[i] = (weft_segment){i, 0, 64, sseq[i], 64, 1, ps, sdraw[i], NULL};
                forward_timed(&be, &segs[i], 1); /* prompts one by one: 64 x 64 rows exceed the row budget */
                sseq[i][64] = sdraw[i][0];
            }
            double t = 0;
            for (int r = 0; r < 32; r++) {
                for (int i = 0; i < S; i++)
                    segs[i] = (weft_segment){i, 64 + r, 1, sseq[i], 64, 1, ps, sdraw[i], NULL};
                t += forward_timed(&be, segs, S);
                for (int i = 0; i < S; i++) sseq[i][65 + r] = sdraw[i][0];
            }
            printf("  %2d streams: %.0f tok/s aggregate (%.2f ms per round)\n", S, 32.0 * S / t,
                   1e3 * t / 32);
            for (int i = 0; i < S; i++) be.ops->release(be.self, i);
        }
    }
    /* prefill at 2k (and 8k when the context allows): chunks of 256 rows, greedy last row */
    for (int PL = 2048; PL <= 8192; PL *= 4) {
        if (PL + 8 > cap) break;
        for (int i = 0; i < PL; i++) seq[i] = (int32_t)((i * 7919 + 13) % V);
        if (be.ops->open(be.self, 0, PL + 8, &err)) break;
        double t_pre = 0;
        for (int a = 0; a < PL; a += 256) {
            int n = PL - a < 256 ? PL - a : 256;
            weft_segment s = {0, a, n, seq, PL, a + n == PL ? 1 : 0, &greedy, draws, NULL};
            t_pre += forward_timed(&be, &s, 1);
        }
        be.ops->release(be.self, 0);
        printf("prefill %d tokens: %.0f tok/s\n", PL, PL / t_pre);
    }
    be.ops->destroy(be.self);
    free(seq);
    weft_tensor_set_free(ts);
    return 0;
}
