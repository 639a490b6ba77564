/* GGUF files of the hybrid families, written by llama.cpp's own converter from the HF fixtures
 * (tests/data/gguf_hybrid/, made by tools/make_hybrid_gguf.py), run through the existing CPU families:
 * weft_gguf_open_file + weft_gguf_config + weft_gguf_tensors + weft_family_create must reproduce the
 * fixture's HF goldens (every logit row within 1e-3·max(1, |ref|), greedy ids, also decoding token by token).
 * The config read from GGUF metadata must agree with the HF config.json it was converted from, and the
 * converter's conventions must matter: running with any of them switched off must leave the goldens. The Q8_0
 * file is checked against its own reference (HF with the GGUF's dequantized tensors). weft_model_load + the
 * CPU backend (what `weft run` uses) load every file, tokenizer included. */
#include "check.h"
#include "weft/families.h"
#include "weft/gguf.h"
#include "weft/model.h"

#include <jansson.h>
#include <stdlib.h>

enum { MAXT = 64 };

typedef struct golden {
    int32_t ids[MAXT];
    int n_prompt, n_greedy, T;
    float *ref; /* [T, V] */
} golden;

static bool load_golden(const char *json_path, const char *logits_dir, int64_t V, golden *g) {
    memset(g, 0, sizeof *g);
    json_error_t je;
    json_t *gj = json_load_file(json_path, 0, &je);
    CHECK_MSG(gj != NULL, "%s: %s", json_path, je.text);
    if (!gj) return false;
    json_t *p = json_object_get(gj, "prompt_ids"), *gr = json_object_get(gj, "greedy_ids");
    g->n_prompt = (int)json_array_size(p);
    g->n_greedy = (int)json_array_size(gr);
    g->T = g->n_prompt + g->n_greedy;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", logits_dir, json_string_value(json_object_get(gj, "logits_file")));
    bool ok = g->T > 2 && g->T <= MAXT && g->n_greedy > 0;
    CHECK_MSG(ok, "%s: %d ids", json_path, g->T);
    for (int i = 0; ok && i < g->n_prompt; i++) g->ids[i] = (int32_t)json_integer_value(json_array_get(p, i));
    for (int i = 0; ok && i < g->n_greedy; i++)
        g->ids[g->n_prompt + i] = (int32_t)json_integer_value(json_array_get(gr, i));
    json_decref(gj);
    if (!ok) return false;
    size_t n = (size_t)g->T * (size_t)V;
    g->ref = malloc(n * sizeof(float));
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "%s missing", path);
    size_t got = f && g->ref ? fread(g->ref, sizeof(float), n, f) : 0;
    if (f) fclose(f);
    CHECK_EQ_INT(got, n);
    return got == n;
}

typedef struct runner {
    weft_family_model fm;
    weft_pool *pool;
    void *state;
    int64_t V;
} runner;

static bool runner_new(runner *r, const weft_config *cfg, const weft_tensor_set *ts, const char *what) {
    memset(r, 0, sizeof *r);
    weft_family_opts opts = {MAXT, MAXT, false};
    weft_err err = {0};
    weft_status st = weft_family_create(cfg, ts, &opts, &r->fm, &err);
    CHECK_MSG(st == WEFT_OK, "%s: weft_family_create: %s", what, err.msg);
    if (st) return false;
    r->V = r->fm.vocab_size;
    r->pool = weft_pool_new(2, r->fm.scratch_floats);
    size_t sb = (r->fm.ops->state_bytes(r->fm.self, MAXT) + 63) & ~(size_t)63;
    r->state = aligned_alloc(64, sb);
    return r->pool && r->state;
}

static void runner_reset(runner *r) {
    r->fm.ops->state_init(r->fm.self, r->state, MAXT);
}

static void runner_free(runner *r) {
    if (r->fm.ops) r->fm.ops->destroy(r->fm.self);
    weft_pool_free(r->pool);
    free(r->state);
}

/* Feeds ids[a, b) at positions a.. in one call; logits of every row into out[(r − a)·V]. */
static weft_status feed(runner *r, const int32_t *ids, int a, int b, float *out, weft_err *err) {
    weft_row rows[MAXT];
    int outr[MAXT];
    for (int i = a; i < b; i++) {
        rows[i - a] = (weft_row){0, i, ids[i]};
        outr[i - a] = i - a;
    }
    void *states[1] = {r->state};
    return r->fm.ops->forward(r->fm.self, r->pool, states, rows, b - a, outr, b - a, out, err);
}

static int argmax(const float *x, int64_t n) {
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int)i;
    return best;
}

/* Rows of logits [T, V] that differ from ref by more than 1e-3·max(1, |ref|); *maxd the largest difference.
 */
static int bad_rows(const float *logits, const float *ref, int T, int64_t V, double *maxd) {
    int bad = 0;
    *maxd = 0;
    for (int t = 0; t < T; t++) {
        bool row_bad = false;
        for (int64_t v = 0; v < V; v++) {
            double d = fabs((double)logits[t * V + v] - ref[t * V + v]);
            double tol = 1e-3 * fmax(1.0, fabs(ref[t * V + v]));
            if (d > *maxd) *maxd = d;
            if (d > tol || d != d) row_bad = true;
        }
        bad += row_bad;
    }
    return bad;
}

/* Teacher-forced logits of all T rows in one call match; greedy steps pick the golden ids; decoding token by
 * token from the prompt reproduces the greedy ids and the same logits bits as the one-call feed. */
static bool check_goldens(runner *r, const golden *g, const char *what) {
    const int64_t V = r->V;
    float *lg = malloc((size_t)g->T * (size_t)V * sizeof(float)), *step = malloc((size_t)V * sizeof(float));
    weft_err err = {0};
    runner_reset(r);
    weft_status st = feed(r, g->ids, 0, g->T, lg, &err);
    CHECK_MSG(st == WEFT_OK, "%s: forward: %s", what, err.msg);
    double maxd = 0;
    int bad = st ? g->T : bad_rows(lg, g->ref, g->T, V, &maxd);
    CHECK_MSG(bad == 0, "%s: %d of %d logit rows beyond 1e-3·max(1,|ref|) (max |diff| %g)", what, bad, g->T,
              maxd);
    for (int i = 0; !st && i < g->n_greedy; i++) {
        int got = argmax(lg + (int64_t)(g->n_prompt - 1 + i) * V, V);
        CHECK_MSG(got == g->ids[g->n_prompt + i], "%s: greedy step %d: %d != %d", what, i, got,
                  g->ids[g->n_prompt + i]);
    }
    /* prompt in one call, then one token per call, feeding back our own argmax */
    int32_t ids[MAXT];
    memcpy(ids, g->ids, (size_t)g->n_prompt * sizeof(int32_t));
    float *pl = malloc((size_t)g->n_prompt * (size_t)V * sizeof(float));
    runner_reset(r);
    bool same_bits = true;
    st = feed(r, ids, 0, g->n_prompt, pl, &err);
    const float *last = pl + (int64_t)(g->n_prompt - 1) * V;
    for (int i = 0; !st && i < g->n_greedy; i++) {
        ids[g->n_prompt + i] = argmax(last, V);
        CHECK_MSG(ids[g->n_prompt + i] == g->ids[g->n_prompt + i], "%s: decode step %d: %d != %d", what, i,
                  ids[g->n_prompt + i], g->ids[g->n_prompt + i]);
        if (i + 1 < g->n_greedy) {
            st = feed(r, ids, g->n_prompt + i, g->n_prompt + i + 1, step, &err);
            same_bits &= memcmp(step, lg + (int64_t)(g->n_prompt + i) * V, (size_t)V * sizeof(float)) == 0;
            last = step;
        }
    }
    CHECK_MSG(st == WEFT_OK, "%s: decode: %s", what, err.msg);
    CHECK_MSG(same_bits, "%s: token-by-token logits differ from the one-call feed", what);
    fprintf(stderr, "  %-24s %d rows, max |logit − HF| %.3g, greedy %s\n", what, g->T, maxd,
            bad ? "?" : "matches");
    free(pl);
    free(lg);
    free(step);
    return bad == 0;
}

/* Logits of the whole sequence leave the goldens (a switched-off convention must be visible). */
static void check_differs(const weft_config *cfg, const weft_tensor_set *ts, const golden *g,
                          const char *what) {
    runner r;
    if (!runner_new(&r, cfg, ts, what)) return;
    float *lg = malloc((size_t)g->T * (size_t)r.V * sizeof(float));
    weft_err err = {0};
    runner_reset(&r);
    weft_status st = feed(&r, g->ids, 0, g->T, lg, &err);
    double maxd;
    int bad = st ? 0 : bad_rows(lg, g->ref, g->T, r.V, &maxd);
    CHECK_MSG(st == WEFT_OK && bad > 0, "%s: logits still match the goldens (%d bad rows)", what, bad);
    free(lg);
    runner_free(&r);
}

/* The GGUF metadata gives the config HF's config.json gives (the fields the families read). */
static void check_config(const weft_config *gc, const weft_config *hc, const char *what) {
    CHECK_MSG(gc->family == hc->family, "%s: family %d != %d", what, gc->family, hc->family);
#define SAME(f) CHECK_MSG(gc->f == hc->f, "%s: " #f " %lld != %lld", what, (long long)gc->f, (long long)hc->f)
    SAME(vocab_size);
    SAME(hidden_size);
    SAME(n_layers);
    SAME(n_heads);
    SAME(n_kv_heads);
    SAME(head_dim);
    SAME(tie_word_embeddings);
    SAME(attention_bias);
    SAME(mlp_bias);
    SAME(rope.type);
    for (int64_t l = 0; l < gc->n_layers && l < hc->n_layers; l++) SAME(layer_kind[l]);
    CHECK_MSG(fabs(gc->rms_norm_eps - hc->rms_norm_eps) <= 1e-6 * hc->rms_norm_eps, "%s: eps %g != %g", what,
              gc->rms_norm_eps, hc->rms_norm_eps);
    if (hc->family == WEFT_FAMILY_NEMOTRON_H) {
        SAME(mamba_num_heads);
        SAME(mamba_head_dim);
        SAME(ssm_state_size);
        SAME(n_groups);
        SAME(conv_kernel);
        SAME(use_conv_bias);
        CHECK(gc->a_is_neg_exp && !gc->norms_plus_one && !gc->gdn_tiled_heads);
    } else if (hc->family != WEFT_FAMILY_QWEN3) {
        SAME(attn_output_gate);
        SAME(linear_conv_kernel_dim);
        SAME(linear_key_head_dim);
        SAME(linear_value_head_dim);
        SAME(linear_num_key_heads);
        SAME(linear_num_value_heads);
        SAME(mtp_num_hidden_layers);
        CHECK_MSG(gc->rope.theta == hc->rope.theta &&
                      gc->rope.partial_rotary_factor == hc->rope.partial_rotary_factor,
                  "%s: rope θ %g / %g, partial %g / %g", what, gc->rope.theta, hc->rope.theta,
                  gc->rope.partial_rotary_factor, hc->rope.partial_rotary_factor);
        CHECK(gc->a_is_neg_exp && gc->norms_plus_one && gc->gdn_tiled_heads);
    } else {
        CHECK_MSG(gc->rope.theta == hc->rope.theta, "%s: rope θ %g != %g", what, gc->rope.theta,
                  hc->rope.theta);
        CHECK(!gc->a_is_neg_exp && !gc->norms_plus_one && !gc->gdn_tiled_heads);
    }
    bool layer_mlp = false, layer_moe = false;
    for (int64_t l = 0; l < hc->n_layers; l++) {
        layer_mlp |= hc->layer_kind[l] == WEFT_LAYER_MLP;
        layer_moe |= hc->layer_kind[l] == WEFT_LAYER_MOE;
    }
    if (hc->family != WEFT_FAMILY_QWEN3_5_MOE && (hc->family != WEFT_FAMILY_NEMOTRON_H || layer_mlp))
        SAME(intermediate_size);
    if (hc->family == WEFT_FAMILY_QWEN3_5_MOE || layer_moe) {
        SAME(num_experts);
        SAME(num_experts_per_tok);
        SAME(moe_intermediate_size);
        SAME(shared_expert_intermediate_size);
        SAME(norm_topk_prob);
        SAME(n_group);
        SAME(topk_group);
        SAME(n_shared_experts);
        SAME(moe_latent_size);
        CHECK_MSG(fabs(gc->routed_scaling_factor - hc->routed_scaling_factor) < 1e-6,
                  "%s: routed scale %g != %g", what, gc->routed_scaling_factor, hc->routed_scaling_factor);
    }
#undef SAME
}

typedef struct gcase {
    const char *file;    /* under tests/data/gguf_hybrid/ */
    const char *fixture; /* HF fixture it was converted from */
    const char *arch;
    weft_dtype matrix; /* dtype of the embedding as stored */
    bool own_golden;   /* golden next to the file (quantized), else the fixture's */
} gcase;

static void test_case(const gcase *c) {
    char path[256], fdir[256], gpath[320];
    snprintf(path, sizeof path, TEST_DATA "gguf_hybrid/%s", c->file);
    snprintf(fdir, sizeof fdir, TEST_DATA "fixtures/%s", c->fixture);
    weft_err err = {0};
    weft_gguf *g = NULL;
    weft_status st = weft_gguf_open_file(path, &g, &err);
    CHECK_MSG(st == WEFT_OK, "%s: %s", path, err.msg);
    if (st) return;
    CHECK_STR(weft_gguf_arch(g), c->arch);
    weft_config cfg, hf;
    st = weft_gguf_config(g, &cfg, &err);
    CHECK_MSG(st == WEFT_OK, "%s: config: %s", c->file, err.msg);
    weft_status hst = weft_config_load_dir(fdir, &hf, &err);
    CHECK_MSG(hst == WEFT_OK, "%s: %s", fdir, err.msg);
    if (st || hst) {
        weft_gguf_close(g);
        return;
    }
    check_config(&cfg, &hf, c->file);
    weft_tensor_set *ts = weft_tensor_set_new();
    st = weft_gguf_tensors(g, ts, &err);
    CHECK_MSG(st == WEFT_OK, "%s: tensors: %s", c->file, err.msg);
    const weft_tensor *emb = weft_tensor_set_get(
        ts, hf.family == WEFT_FAMILY_NEMOTRON_H ? "backbone.embeddings.weight" : "model.embed_tokens.weight");
    CHECK_MSG(emb && emb->dtype == c->matrix, "%s: embedding dtype", c->file);
    golden gold;
    if (c->own_golden) {
        char base[128];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(c->file) - 5), c->file);
        snprintf(gpath, sizeof gpath, TEST_DATA "gguf_hybrid/%s.golden.json", base);
    } else {
        snprintf(gpath, sizeof gpath, "%s/golden.json", fdir);
    }
    runner r;
    if (!st && load_golden(gpath, c->own_golden ? TEST_DATA "gguf_hybrid" : fdir, cfg.vocab_size, &gold) &&
        runner_new(&r, &cfg, ts, c->file)) {
        check_goldens(&r, &gold, c->file);
        runner_free(&r);
        /* each convention the reader recorded must matter for this file */
        weft_config alt = cfg;
        char what[160];
        if (cfg.norms_plus_one) {
            alt.norms_plus_one = false;
            snprintf(what, sizeof what, "%s without norms_plus_one", c->file);
            check_differs(&alt, ts, &gold, what);
            alt = cfg;
        }
        if (cfg.a_is_neg_exp) {
            alt.a_is_neg_exp = false;
            snprintf(what, sizeof what, "%s without a_is_neg_exp", c->file);
            check_differs(&alt, ts, &gold, what);
            alt = cfg;
        }
        if (cfg.gdn_tiled_heads && cfg.linear_num_key_heads != cfg.linear_num_value_heads) {
            alt.gdn_tiled_heads = false;
            snprintf(what, sizeof what, "%s without gdn_tiled_heads", c->file);
            check_differs(&alt, ts, &gold, what);
        }
    }
    free(gold.ref);
    weft_tensor_set_free(ts);
    weft_gguf_close(g);
}

/* What `weft run` / `weft info` do: weft_model_load (config, tensors, tokenizer from the GGUF) and the CPU
 * backend built from the family the config names. */
static void test_model_load(const char *file, weft_family family) {
    char path[256];
    snprintf(path, sizeof path, TEST_DATA "gguf_hybrid/%s", file);
    weft_model *m = NULL;
    weft_err err = {0};
    weft_status st = weft_model_load(path, &m, &err);
    CHECK_MSG(st == WEFT_OK, "%s: weft_model_load: %s", file, err.msg);
    if (st) return;
    CHECK_MSG(m->cfg.family == family, "%s: family %d", file, m->cfg.family);
    CHECK_MSG(m->format == WEFT_FORMAT_GGUF && m->tokenizer != NULL, "%s: format / tokenizer", file);
    weft_backend_opts bo = {0};
    bo.threads = 1;
    bo.max_context = 128;
    weft_backend be;
    st = weft_model_backend(m, &bo, &be, &err);
    CHECK_MSG(st == WEFT_OK, "%s: backend: %s", file, err.msg);
    if (!st) be.ops->destroy(be.self);
    weft_model_free(m);
}

static void test_names(void) {
    static const struct {
        const char *arch, *gguf, *hub;
    } N[] = {
        {"qwen35", "blk.0.attn_qkv.weight", "model.layers.0.linear_attn.in_proj_qkv.weight"},
        {"qwen35", "blk.2.ssm_a", "model.layers.2.linear_attn.A_log"},
        {"qwen35", "blk.2.ssm_dt.bias", "model.layers.2.linear_attn.dt_bias"},
        {"qwen35moe", "blk.1.ffn_up_exps.weight", "model.layers.1.mlp.switch_mlp.up_proj.weight"},
        {"qwen35moe", "blk.1.ffn_gate_inp_shexp.weight", "model.layers.1.mlp.shared_expert_gate.weight"},
        {"qwen35", "output.weight", "lm_head.weight"},
        {"nemotron_h", "token_embd.weight", "backbone.embeddings.weight"},
        {"nemotron_h", "blk.0.ssm_d", "backbone.layers.0.mixer.D"},
        {"nemotron_h_moe", "blk.1.exp_probs_b.bias", "backbone.layers.1.mixer.gate.e_score_correction_bias"},
        {"nemotron_h_moe", "blk.1.ffn_down_exps.weight", "backbone.layers.1.mixer.experts.down_proj.weight"},
        {"nemotron_h", "output_norm.weight", "backbone.norm_f.weight"},
    };
    for (size_t i = 0; i < sizeof N / sizeof N[0]; i++) {
        char out[128];
        weft_err err = {0};
        weft_status st = weft_gguf_canonical_name(N[i].arch, N[i].gguf, out, sizeof out, &err);
        CHECK_MSG(st == WEFT_OK && !strcmp(out, N[i].hub), "%s %s -> %s (%s)", N[i].arch, N[i].gguf,
                  st ? err.msg : out, N[i].hub);
    }
    char out[128];
    weft_err err = {0};
    CHECK_EQ_INT(weft_gguf_canonical_name("qwen35", "blk.0.ssm_in.weight", out, sizeof out, &err),
                 WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_canonical_name("nemotron_h", "blk.0.attn_qkv.weight", out, sizeof out, &err),
                 WEFT_EFORMAT);
    CHECK_EQ_INT(weft_gguf_canonical_name("qwen35", "blk.0.ssm_a.bias", out, sizeof out, &err), WEFT_EFORMAT);
}

int main(void) {
    test_names();
    static const gcase CASES[] = {
        {"qwen3-f16.gguf", "qwen3", "qwen3", WEFT_DT_F16, false},
        {"qwen3_5-f32.gguf", "qwen3_5", "qwen35", WEFT_DT_F32, false},
        {"qwen3_5-q8_0.gguf", "qwen3_5", "qwen35", WEFT_DT_Q8_0, true},
        {"qwen3_5_moe-f16.gguf", "qwen3_5_moe", "qwen35moe", WEFT_DT_F16, false},
        {"nemotron_h-f32.gguf", "nemotron_h", "nemotron_h", WEFT_DT_F32, false},
        {"nemotron_h_moe-f16.gguf", "nemotron_h_moe", "nemotron_h_moe", WEFT_DT_F16, false},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) test_case(&CASES[i]);
    test_model_load("qwen3_5_moe-f16.gguf", WEFT_FAMILY_QWEN3_5_MOE);
    test_model_load("nemotron_h-f32.gguf", WEFT_FAMILY_NEMOTRON_H);
    test_model_load("qwen3_5-q8_0.gguf", WEFT_FAMILY_QWEN3_5);
    return check_report("test_hybrid_gguf");
}
