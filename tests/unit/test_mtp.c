/* test_mtp.c — MTP draft heads (src/families/mtp*.c, families-and-formats §3.9, §4.7) on the fixtures
 * qwen3_5, qwen3_5_moe and nemotron_h_moe, through the CPU backend's `draft` op:
 * - the heads load (the backend offers draft; fixtures without `mtp.*` tensors do not), a missing head
 *   tensor or a wrong shape is an error naming it;
 * - proposals are a function of the tokens only: a stream prefilled in one call and decoded one token per
 *   forward (A), one prefilled in chunks of 5 and decoded through verify windows that are accepted in full,
 *   in part or not at all and rolled back with keep() (B), and one restored from A's prompt-cache snapshot
 *   (C) propose the same drafts at every position, and B's snapshots (trunk + head state) equal A's byte
 *   for byte. The fixtures' heads are random, so most proposals are wrong: the windows built from them are
 *   rejected and rolled back, which is what is being exercised. */
#include "check.h"
#include "weft/families.h"
#include "weft/model.h"

#include "families/mtp.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#define CTX   96
#define P     12 /* prompt tokens */
#define STEPS 40 /* positions decoded after the prompt */
#define D     4  /* draft depth asked */

static const weft_sampling GREEDY = {.temperature = 0, .top_p = 1, .repetition_penalty = 1, .logprobs = -1};

/* A fixture by name, or a checkpoint directory (a name with a '/'). */
static weft_model *load(const char *name) {
    char dir[512];
    if (strchr(name, '/'))
        snprintf(dir, sizeof dir, "%s", name);
    else
        snprintf(dir, sizeof dir, "%sfixtures/%s", TEST_DATA, name);
    weft_model *m = NULL;
    weft_err err = {0};
    CHECK_MSG(weft_model_load(dir, &m, &err) == WEFT_OK, "%s: %s", dir, err.msg);
    return m;
}

static bool backend(const weft_model *m, weft_backend *be) {
    weft_err err = {0};
    weft_backend_opts bo = {.kind = "cpu", .threads = 2, .max_slots = 3, .max_rows = 32, .max_context = CTX};
    weft_status st = weft_model_backend(m, &bo, be, &err);
    CHECK_MSG(st == WEFT_OK, "backend: %s", err.msg);
    return st == WEFT_OK;
}

/* ---- loading ---- */

static void check_present(const char *name, bool has_head) {
    weft_model *m = load(name);
    if (!m) return;
    weft_backend be;
    if (backend(m, &be)) {
        CHECK_MSG((be.ops->draft != NULL) == has_head, "%s: draft op %s", name,
                  has_head ? "missing" : "present");
        be.ops->destroy(be.self);
    }
    weft_model_free(m);
}

/* Removing `tensor` (or giving it a wrong shape) fails the family with an error naming it. */
static void check_refused(const char *name, const char *tensor, bool reshape) {
    weft_model *m = load(name);
    if (!m) return;
    if (reshape) {
        weft_tensor *t = weft_tensor_set_get_mut(m->tensors, tensor);
        CHECK_MSG(t != NULL, "%s: no %s in the fixture", name, tensor);
        if (t) t->shape[0] += 1;
    } else {
        CHECK_MSG(weft_tensor_set_get(m->tensors, tensor) != NULL, "%s: no %s in the fixture", name, tensor);
        weft_tensor_set_remove(m->tensors, tensor);
    }
    weft_family_opts fo = {16, CTX, false};
    weft_family_model fm = {0};
    weft_err err = {0};
    weft_status st = weft_family_create(&m->cfg, m->tensors, &fo, &fm, &err);
    CHECK_MSG(st == WEFT_EFORMAT, "%s without %s: status %d", name, tensor, (int)st);
    CHECK_MSG(strstr(err.msg, tensor) != NULL, "%s: the error does not name %s: %s", name, tensor, err.msg);
    if (reshape) CHECK_MSG(strstr(err.msg, "shape") != NULL, "%s: %s", name, err.msg);
    if (st == WEFT_OK) fm.ops->destroy(fm.self);
    weft_model_free(m);
}

/* ---- drafting ---- */

static void fwd(weft_backend *be, int slot, const int32_t *seq, int start, int rows, int draw, int32_t *out) {
    weft_segment s = {.slot = slot,
                      .start = start,
                      .n_rows = rows,
                      .seq = seq,
                      .n_prompt = P,
                      .n_draw = draw,
                      .sampling = &GREEDY,
                      .draws = out};
    weft_err err = {0};
    CHECK_MSG(be->ops->forward(be->self, &s, 1, &err) == WEFT_OK, "forward at %d: %s", start, err.msg);
}

static int draft(weft_backend *be, int slot, const int32_t *seq, int c, int32_t *out) {
    int n = -1;
    weft_err err = {0};
    CHECK_MSG(be->ops->draft(be->self, slot, seq, c + 1, D, out, &n, &err) == WEFT_OK, "draft at %d: %s", c,
              err.msg);
    return n;
}

typedef struct serial {
    int32_t seq[CTX];   /* A's tokens: prompt then greedy reply */
    int32_t dr[CTX][D]; /* A's proposals with position c pending */
    int nd[CTX];
    void *snap[CTX]; /* A's snapshot at c (before feeding c) */
    size_t snap_bytes[CTX];
} serial;

static void run_serial(weft_backend *be, serial *a, int vocab) {
    uint32_t x = 12345;
    for (int i = 0; i < P; i++) a->seq[i] = (int32_t)((x = x * 1103515245u + 12345u) >> 8) % vocab;
    fwd(be, 0, a->seq, 0, P, 1, &a->seq[P]);
    weft_err err = {0};
    for (int c = P; c < P + STEPS; c++) {
        a->nd[c] = draft(be, 0, a->seq, c, a->dr[c]);
        CHECK_MSG(a->nd[c] == D, "serial: %d drafts at %d", a->nd[c], c);
        a->snap_bytes[c] = be->ops->snapshot_bytes(be->self, c);
        a->snap[c] = malloc(a->snap_bytes[c]);
        CHECK(be->ops->save(be->self, 0, c, a->snap[c], a->snap_bytes[c], &err) == WEFT_OK);
        fwd(be, 0, a->seq, c, 1, 1, &a->seq[c + 1]);
    }
}

static bool same_snapshot(weft_backend *be, int slot, const serial *a, int c) {
    void *s = malloc(a->snap_bytes[c]);
    weft_err err = {0};
    bool ok = be->ops->save(be->self, slot, c, s, a->snap_bytes[c], &err) == WEFT_OK &&
              !memcmp(s, a->snap[c], a->snap_bytes[c]);
    free(s);
    return ok;
}

/* B: prefill in chunks of 5, then verify windows; proposals and snapshots must equal A's. */
static void run_windows(weft_backend *be, const serial *a, int vocab, const char *name) {
    int32_t seq[CTX + D + 1], draws[D + 1], dr[D];
    memcpy(seq, a->seq, P * sizeof *seq);
    for (int s = 0; s < P; s += 5) {
        int rows = P - s < 5 ? P - s : 5;
        fwd(be, 1, seq, s, rows, s + rows == P ? 1 : 0, &seq[P]);
    }
    CHECK_EQ_INT(seq[P], a->seq[P]);
    int c = P, step = 0, windows = 0, rejected = 0, kept_drafts = 0;
    while (c + D + 1 < P + STEPS) {
        int n = draft(be, 1, seq, c, dr);
        CHECK_MSG(n == a->nd[c] && !memcmp(dr, a->dr[c], (size_t)n * sizeof *dr),
                  "%s: proposals at %d differ from the serial stream's", name, c);
        CHECK_MSG(same_snapshot(be, 1, a, c), "%s: state at %d (trunk + head) differs from the serial one",
                  name, c);
        /* the window: the head's own drafts, or the true continuation spoilt from some depth on */
        int nd = D, mode = step++ % 4;
        for (int i = 0; i < nd; i++) {
            int32_t t = a->seq[c + 1 + i];
            seq[c + 1 + i] = mode == 0 ? dr[i] : mode == 3 || i < mode - 1 ? t : (t + 1) % vocab;
        }
        if (mode == 2) nd = 2;
        fwd(be, 1, seq, c, 1 + nd, 1 + nd, draws);
        int acc = 0;
        while (acc < nd && seq[c + 1 + acc] == draws[acc]) acc++;
        for (int i = 0; i <= acc; i++) CHECK_EQ_INT(draws[i], a->seq[c + 1 + i]);
        seq[c + 1 + acc] = draws[acc];
        windows++;
        kept_drafts += acc;
        if (acc < nd) {
            rejected++;
            weft_err err = {0};
            CHECK_MSG(be->ops->keep(be->self, 1, c + 1 + acc, &err) == WEFT_OK, "keep: %s", err.msg);
        }
        c += 1 + acc;
    }
    CHECK_MSG(rejected * 2 > windows && kept_drafts > 0, "%s: %d windows, %d rolled back, %d drafts kept",
              name, windows, rejected, kept_drafts);
    fprintf(stderr, "test_mtp: %s: %d windows, %d rolled back, %d drafts kept\n", name, windows, rejected,
            kept_drafts);
}

/* C: restored from A's snapshot in another slot, then serial again. */
static void run_restored(weft_backend *be, const serial *a, const char *name) {
    const int at = P + 7;
    int32_t seq[CTX], dr[D];
    memcpy(seq, a->seq, sizeof seq);
    weft_err err = {0};
    CHECK(be->ops->restore(be->self, 2, at, a->snap[at], a->snap_bytes[at], &err) == WEFT_OK);
    for (int c = at; c < at + 6; c++) {
        int n = draft(be, 2, seq, c, dr);
        CHECK_MSG(n == a->nd[c] && !memcmp(dr, a->dr[c], (size_t)n * sizeof *dr),
                  "%s: proposals at %d after a restore differ", name, c);
        int32_t t = -1;
        fwd(be, 2, seq, c, 1, 1, &t);
        CHECK_EQ_INT(t, a->seq[c + 1]);
    }
    /* the op checks that the slot holds what the caller says */
    int n = 0;
    CHECK(be->ops->draft(be->self, 2, seq, at + 3, D, dr, &n, &err) == WEFT_EINVAL);
    CHECK(strstr(err.msg, "positions") != NULL);
}

static void check_drafting(const char *name) {
    weft_model *m = load(name);
    if (!m) return;
    weft_backend be;
    if (!backend(m, &be)) {
        weft_model_free(m);
        return;
    }
    weft_err err = {0};
    for (int s = 0; s < 3; s++) CHECK(be.ops->open(be.self, s, CTX, &err) == WEFT_OK);
    serial *a = calloc(1, sizeof *a);
    int vocab = (int)m->cfg.vocab_size;
    if (be.ops->draft) {
        run_serial(&be, a, vocab);
        run_windows(&be, a, vocab, name);
        run_restored(&be, a, name);
    }
    for (int c = 0; c < CTX; c++) free(a->snap[c]);
    free(a);
    be.ops->destroy(be.self);
    weft_model_free(m);
}

/* ---- a TensorFold sidecar beside an MLX checkpoint (tools/make_mtp_sidecar.py) ---- */

/* tmp/ gets links to every file of the MLX fixture `mlx` and to tests/data/mtp/<sidecar> as
 * mtp-4bit.safetensors. Returns false when it cannot be made. */
static bool make_dir(char *tmp, const char *mlx, const char *sidecar) {
    char src[512], dst[1024], abs_src[PATH_MAX];
    if (!mkdtemp(tmp)) return false;
    static const char *const files[] = {"config.json", "generation_config.json", "model.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(src, sizeof src, "%sfixtures/%s/%s", TEST_DATA, mlx, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", tmp, files[i]);
        if (!realpath(src, abs_src) || symlink(abs_src, dst)) return false;
    }
    snprintf(src, sizeof src, "%smtp/%s", TEST_DATA, sidecar);
    snprintf(dst, sizeof dst, "%s/mtp-4bit.safetensors", tmp);
    return realpath(src, abs_src) && !symlink(abs_src, dst);
}

static void remove_dir(const char *tmp) {
    static const char *const files[] = {"config.json", "generation_config.json", "model.safetensors",
                                        "mtp-4bit.safetensors"};
    char p[1024];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp, files[i]);
        unlink(p);
    }
    rmdir(tmp);
}

/* The sidecar's head loads under hub names (folded, 4-bit linears, 8-bit routers), its zero-centred norms
 * end up as 1 + w whether the file baked the +1 in or not, and it drafts as a hub head does. */
static void check_sidecar(const char *hub, const char *mlx, const char *sidecar, bool qwen) {
    char tmp[] = "/tmp/weft_mtp_XXXXXX";
    if (!make_dir(tmp, mlx, sidecar)) {
        CHECK_MSG(0, "cannot build a checkpoint directory for %s + %s", mlx, sidecar);
        remove_dir(tmp);
        return;
    }
    weft_model *m = load(tmp);
    if (m) {
        CHECK(m->format == WEFT_FORMAT_MLX);
        const char *fc = qwen ? "mtp.fc.weight" : "mtp.layers.0.eh_proj.weight";
        const weft_tensor *t = weft_tensor_set_get(m->tensors, fc);
        CHECK_MSG(t && t->dtype == WEFT_DT_MLX_AFFINE && t->bits == 4, "%s: %s not a 4-bit MLX tensor", mlx,
                  fc);
        CHECK(!weft_tensor_set_get(m->tensors, "layers.0.eh_proj.weight"));
        CHECK(!weft_tensor_set_get(m->tensors, "mtp.fc.scales"));
        if (qwen && m->cfg.num_experts > 0) {
            t = weft_tensor_set_get(m->tensors, "mtp.layers.0.mlp.gate.weight");
            CHECK_MSG(t && t->dtype == WEFT_DT_MLX_AFFINE && t->bits == 8, "%s: the router is not 8-bit",
                      mlx);
        }
        if (qwen) { /* the head's norm against the hub checkpoint's 1 + w (bf16 rounding apart) */
            weft_model *h = load(hub);
            weft_family_opts fo = {16, CTX, true};
            weft_family_model fm = {0};
            weft_err err = {0};
            CHECK_MSG(weft_family_create(&m->cfg, m->tensors, &fo, &fm, &err) == WEFT_OK, "%s", err.msg);
            const float *norm = fm.ops ? weft_qwen3_5_mtp_norm(&fm) : NULL;
            float *w =
                h ? weft_tensor_to_f32(weft_tensor_set_get(h->tensors, "mtp.norm.weight"), 64, &err) : NULL;
            CHECK(norm && w);
            float worst = 0;
            for (int i = 0; norm && w && i < 64; i++) worst = fmaxf(worst, fabsf(norm[i] - (1.0f + w[i])));
            CHECK_MSG(worst < 0.01f, "%s: head norm off 1 + w by %g", sidecar, (double)worst);
            free(w);
            if (fm.ops) fm.ops->destroy(fm.self);
            weft_model_free(h);
        }
        weft_model_free(m);
    }
    check_present(tmp, true);
    check_drafting(tmp);
    remove_dir(tmp);
}

int main(void) {
    check_present("qwen3_5", true);
    check_present("qwen3_5_moe", true);
    check_present("nemotron_h_moe", true);
    check_present("nemotron_h", false);        /* num_nextn_predict_layers 0, no mtp.* */
    check_present("qwen3_5-mlx-q4g64", false); /* mlx-lm drops the head */
    check_refused("qwen3_5", "mtp.fc.weight", false);
    check_refused("qwen3_5", "mtp.pre_fc_norm_hidden.weight", false);
    check_refused("qwen3_5", "mtp.layers.0.self_attn.k_proj.weight", false);
    check_refused("qwen3_5", "mtp.layers.0.mlp.down_proj.weight", false);
    check_refused("qwen3_5", "mtp.fc.weight", true);
    check_refused("qwen3_5_moe", "mtp.layers.0.mlp.experts.3.up_proj.weight", false);
    check_refused("qwen3_5_moe", "mtp.layers.0.mlp.gate.weight", false);
    check_refused("qwen3_5_moe", "mtp.layers.0.self_attn.q_proj.weight", true);
    check_refused("nemotron_h_moe", "mtp.layers.0.eh_proj.weight", false);
    check_refused("nemotron_h_moe", "mtp.layers.0.mixer.q_proj.weight", false);
    check_refused("nemotron_h_moe", "mtp.layers.1.final_layernorm.weight", false);
    check_refused("nemotron_h_moe", "mtp.layers.1.mixer.experts.5.down_proj.weight", false);
    check_refused("nemotron_h_moe", "mtp.layers.1.mixer.shared_experts.up_proj.weight", true);
    check_drafting("qwen3_5");
    check_drafting("qwen3_5_moe");
    check_drafting("nemotron_h_moe");
    check_sidecar("qwen3_5", "qwen3_5-mlx-q4g64", "qwen3_5-mtp-4bit.safetensors", true);
    check_sidecar("qwen3_5_moe", "qwen3_5_moe-mlx-q4g64", "qwen3_5_moe-mtp-4bit.safetensors", true);
    check_sidecar("nemotron_h_moe", "nemotron_h_moe-mlx-q4g64", "nemotron_h_moe-mtp-4bit.safetensors", false);
    return check_report("test_mtp");
}
