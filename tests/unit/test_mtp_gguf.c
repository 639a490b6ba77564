/* test_mtp_gguf.c — MTP draft heads loaded from GGUF files written by llama.cpp's converter (NextN blocks;
 * src/model/format/gguf_mtp.c, src/model/model_mtp.c, the qwen3_5 head in src/families/qwen3_5_mtp.c):
 * - the head inside the model's file (tests/data/gguf_hybrid/qwen3_5-f32.gguf, qwen3_5_moe-f16.gguf) and the
 *   head converted alone (`--mtp`, tests/data/mtp/mtp-*-bf16.gguf, beside the `--no-nextn` model) propose
 *   exactly the drafts of the safetensors fixture's head: the same tokens at each of 40 positions (4 each),
 *   the trunk's greedy ids alike, and the head's final norm the same fp32 bits (the converter's 1 + w is not
 *   shifted again);
 * - a NextN block's own embedding / vocab head (optional in llama.cpp) is used by the head when present;
 * - a GGUF without NextN blocks (Nemotron-H, whose converter drops the head; a `--no-nextn` model alone)
 *   loads with no head;
 * - the head file is found beside the model as mtp-<file name> or as any fitting mtp-*.gguf (the
 *   converter's default names differ), other models' heads are passed over, an mtp-<file name> that does not
 *   fit is an error, and a head file given as the model is refused;
 * - corrupt NextN tensors (one missing, a wrong shape, a wrong type, in the model's file and in the head
 *   file) and a misshapen tensor of the NextN block's layer are errors naming the tensor, never a crash. */
#include "check.h"
#include "weft/families.h"
#include "weft/model.h"

#include "families/mtp.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define CTX   96
#define P     12 /* prompt tokens */
#define STEPS 40 /* positions with drafts compared */
#define D     4  /* draft depth asked */

static const weft_sampling GREEDY = {.temperature = 0, .top_p = 1, .repetition_penalty = 1, .logprobs = -1};

static weft_model *load(const char *path) {
    weft_model *m = NULL;
    weft_err err = {0};
    CHECK_MSG(weft_model_load(path, &m, &err) == WEFT_OK, "%s: %s", path, err.msg);
    return m;
}

static bool backend(const weft_model *m, weft_backend *be) {
    weft_err err = {0};
    weft_backend_opts bo = {.kind = "cpu", .threads = 2, .max_slots = 1, .max_rows = 32, .max_context = CTX};
    weft_status st = weft_model_backend(m, &bo, be, &err);
    CHECK_MSG(st == WEFT_OK, "backend: %s", err.msg);
    if (st == WEFT_OK) CHECK(be->ops->open(be->self, 0, CTX, &err) == WEFT_OK);
    return st == WEFT_OK;
}

/* One stream fed seq (teacher forcing; seq[c + 1] = its own greedy draw when own): its greedy draws and its
 * head's proposals at positions P .. P + STEPS - 1. */
typedef struct trace {
    int32_t seq[CTX], draw[CTX], dr[CTX][D];
    int nd[CTX];
} trace;

static void fwd(weft_backend *be, const int32_t *seq, int start, int rows, int32_t *draw) {
    weft_segment s = {.slot = 0,
                      .start = start,
                      .n_rows = rows,
                      .seq = seq,
                      .n_prompt = P,
                      .n_draw = 1,
                      .sampling = &GREEDY,
                      .draws = draw};
    weft_err err = {0};
    CHECK_MSG(be->ops->forward(be->self, &s, 1, &err) == WEFT_OK, "forward at %d: %s", start, err.msg);
}

static void run_trace(weft_backend *be, trace *t, bool own) {
    fwd(be, t->seq, 0, P, &t->draw[P]);
    if (own) t->seq[P] = t->draw[P];
    for (int c = P; c < P + STEPS; c++) {
        weft_err err = {0};
        t->nd[c] = -1;
        CHECK_MSG(be->ops->draft(be->self, 0, t->seq, c + 1, D, t->dr[c], &t->nd[c], &err) == WEFT_OK,
                  "draft at %d: %s", c, err.msg);
        fwd(be, t->seq, c, 1, &t->draw[c + 1]);
        if (own) t->seq[c + 1] = t->draw[c + 1];
    }
}

/* The head's final norm as used, from a family made of m (NULL when m has no head); *fm to destroy. */
static const float *head_norm(const weft_model *m, weft_family_model *fm) {
    weft_family_opts fo = {16, CTX, m->format == WEFT_FORMAT_MLX};
    weft_err err = {0};
    memset(fm, 0, sizeof *fm);
    CHECK_MSG(weft_family_create(&m->cfg, m->tensors, &fo, fm, &err) == WEFT_OK, "%s", err.msg);
    return fm->ops ? weft_qwen3_5_mtp_norm(fm) : NULL;
}

/* How many of the STEPS positions b proposes a's drafts at (a's stream teacher-forces b's; b's greedy ids
 * must be a's), or -1 when something failed. */
static int same_drafts(const weft_model *a, const weft_model *b, const char *what) {
    trace *ta = calloc(1, sizeof *ta), *tb = calloc(1, sizeof *tb);
    weft_backend ba = {0}, bb = {0};
    int same = -1;
    if (ta && tb && backend(a, &ba) && backend(b, &bb) && ba.ops->draft && bb.ops->draft) {
        uint32_t x = 777;
        for (int i = 0; i < P; i++) ta->seq[i] = (int32_t)((x = x * 1103515245u + 12345u) >> 8) % 1024;
        run_trace(&ba, ta, true);
        memcpy(tb->seq, ta->seq, sizeof tb->seq);
        run_trace(&bb, tb, false);
        int distinct = 0;
        same = 0;
        for (int c = P; c < P + STEPS; c++) {
            CHECK_MSG(ta->nd[c] == D && tb->nd[c] == D, "%s at %d: %d and %d drafts", what, c, ta->nd[c],
                      tb->nd[c]);
            CHECK_MSG(tb->draw[c + 1] == ta->draw[c + 1], "%s: greedy id at %d differs", what, c + 1);
            same += ta->nd[c] == tb->nd[c] && !memcmp(ta->dr[c], tb->dr[c], sizeof ta->dr[c]);
            distinct += c > P && memcmp(ta->dr[c], ta->dr[c - 1], sizeof ta->dr[c]) != 0;
        }
        CHECK_MSG(distinct > STEPS / 2, "%s: the proposals hardly change (%d): nothing was compared", what,
                  distinct);
    } else {
        CHECK_MSG(0, "%s: no draft head (%d, %d)", what, ba.ops && ba.ops->draft, bb.ops && bb.ops->draft);
    }
    if (ba.ops) ba.ops->destroy(ba.self);
    if (bb.ops) bb.ops->destroy(bb.self);
    free(ta);
    free(tb);
    return same;
}

static weft_model *load_hub(const char *hub) {
    char dir[256];
    snprintf(dir, sizeof dir, "%sfixtures/%s", TEST_DATA, hub);
    return load(dir);
}

/* The GGUF at path drafts exactly as the safetensors fixture `hub` does. */
static void check_same_drafts(const char *hub, const char *path) {
    weft_model *a = load_hub(hub), *b = load(path);
    if (a && b) {
        weft_family_model fa, fb;
        const float *na = head_norm(a, &fa), *nb = head_norm(b, &fb);
        CHECK_MSG(na && nb && !memcmp(na, nb, (size_t)a->cfg.hidden_size * sizeof(float)),
                  "%s: the head's final norm differs from %s's", path, hub);
        if (fa.ops) fa.ops->destroy(fa.self);
        if (fb.ops) fb.ops->destroy(fb.self);
        int same = same_drafts(a, b, path);
        CHECK_MSG(same == STEPS, "%s: %d of %d positions propose the safetensors head's drafts", path, same,
                  STEPS);
    }
    weft_model_free(a);
    weft_model_free(b);
}

/* A NextN block's own embedding and vocab head (nextn.embed_tokens / nextn.shared_head_head →
 * mtp.embed_tokens / mtp.shared_head_head) replace the trunk's in the head: the trunk's own tensors under
 * those names change nothing, the (untied) embedding as the head's vocab head changes the drafts, a wrong
 * shape is named. */
static void check_dedicated(void) {
    static const char *const names[2] = {"mtp.embed_tokens.weight", "mtp.shared_head_head.weight"};
    static const char *const trunk[2] = {"model.embed_tokens.weight", "lm_head.weight"};
    for (int k = 0; k < 3; k++) {
        weft_model *a = load_hub("qwen3_5"), *b = load(TEST_DATA "gguf_hybrid/qwen3_5-f32.gguf");
        if (!a || !b) {
            weft_model_free(a);
            weft_model_free(b);
            return;
        }
        /* k = 0: both as the trunk's; 1: the embedding as the vocab head; 2: a vocab head one row short */
        for (int i = 0; i < 2; i++) {
            weft_tensor t = *weft_tensor_set_get(b->tensors, trunk[k == 0 ? i : 0]);
            t.name = names[k == 0 ? i : 1];
            if (k == 2) t.shape[0] -= 1;
            weft_err err = {0};
            CHECK_MSG(weft_tensor_set_add(b->tensors, &t, &err) == WEFT_OK, "%s", err.msg);
            if (k) break;
        }
        if (k < 2) {
            int same = same_drafts(a, b, k ? "the embedding as the head's vocab head" : "the trunk's own");
            if (k == 0)
                CHECK_MSG(same == STEPS, "dedicated = the trunk's tensors: %d of %d the same", same, STEPS);
            if (k == 1)
                CHECK_MSG(same >= 0 && same < STEPS / 2, "another vocab head: %d of %d the same", same,
                          STEPS);
        } else {
            weft_family_model fm;
            weft_family_opts fo = {16, CTX, false};
            weft_err err = {0};
            weft_status st = weft_family_create(&b->cfg, b->tensors, &fo, &fm, &err);
            CHECK_MSG(st == WEFT_EFORMAT && strstr(err.msg, names[1]) && strstr(err.msg, "shape"), "%d: %s",
                      (int)st, err.msg);
            if (st == WEFT_OK) fm.ops->destroy(fm.self);
        }
        weft_model_free(a);
        weft_model_free(b);
    }
}

static void check_no_head(const char *path) {
    weft_model *m = load(path);
    weft_backend be = {0};
    if (m && backend(m, &be)) CHECK_MSG(be.ops->draft == NULL, "%s: a draft head without NextN blocks", path);
    if (be.ops) be.ops->destroy(be.self);
    weft_model_free(m);
}

/* ---- a scratch directory of links and patched copies ---- */

typedef struct scratch {
    char dir[64];
    char names[8][64];
    int n;
} scratch;

static bool scratch_new(scratch *s) {
    snprintf(s->dir, sizeof s->dir, "/tmp/weft_mtpgguf_XXXXXX");
    s->n = 0;
    return mkdtemp(s->dir) != NULL;
}

/* s/name → tests/data/<src> (a link). */
static bool scratch_link(scratch *s, const char *src, const char *name) {
    char from[512], abs_src[PATH_MAX], to[256];
    snprintf(from, sizeof from, "%s%s", TEST_DATA, src);
    snprintf(to, sizeof to, "%s/%s", s->dir, name);
    snprintf(s->names[s->n++], sizeof s->names[0], "%s", name);
    return realpath(from, abs_src) && !symlink(abs_src, to);
}

static void scratch_free(scratch *s) {
    char p[256];
    for (int i = 0; i < s->n; i++) {
        snprintf(p, sizeof p, "%s/%s", s->dir, s->names[i]);
        unlink(p);
    }
    rmdir(s->dir);
}

/* How a copy of a GGUF is spoilt: tensor `tensor` renamed to `rename` (same length), or its type set to
 * ggml type `type`, or its ne[dim] set to `ne`. */
typedef struct patch {
    const char *tensor, *rename;
    int type;
    int dim;
    uint64_t ne;
} patch;

/* s/name = tests/data/<src> with p applied to its tensor directory (in place: same sizes). */
static bool scratch_patched(scratch *s, const char *src, const char *name, const patch *p) {
    char from[512], to[256];
    snprintf(from, sizeof from, "%s%s", TEST_DATA, src);
    snprintf(to, sizeof to, "%s/%s", s->dir, name);
    snprintf(s->names[s->n++], sizeof s->names[0], "%s", name);
    FILE *f = fopen(from, "rb");
    if (!f) return false;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len);
    bool ok = buf && fread(buf, 1, (size_t)len, f) == (size_t)len;
    fclose(f);
    /* the tensor's directory entry: u64 name length, name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset
     */
    size_t nl = strlen(p->tensor);
    unsigned char key[8 + 128];
    for (int i = 0; i < 8; i++) key[i] = (unsigned char)((uint64_t)nl >> (8 * i));
    memcpy(key + 8, p->tensor, nl);
    unsigned char *at = NULL;
    for (long i = 0; ok && i + (long)(8 + nl) < len && !at; i++)
        if (!memcmp(buf + i, key, 8 + nl)) at = buf + i;
    ok = ok && at;
    if (ok) {
        unsigned char *nd = at + 8 + nl;
        uint32_t n_dims = nd[0] | nd[1] << 8;
        if (p->rename) memcpy(at + 8, p->rename, nl);
        if (p->dim >= 0)
            for (int i = 0; i < 8; i++) nd[4 + 8 * p->dim + i] = (unsigned char)(p->ne >> (8 * i));
        if (p->type >= 0)
            for (int i = 0; i < 4; i++)
                nd[4 + 8 * n_dims + i] = (unsigned char)((uint32_t)p->type >> (8 * i));
    }
    f = ok ? fopen(to, "wb") : NULL;
    ok = f && fwrite(buf, 1, (size_t)len, f) == (size_t)len;
    if (f) fclose(f);
    free(buf);
    return ok;
}

/* Loading (and, with at_backend, making the backend of) s/model fails with code and an error naming what. */
static void check_refused(const scratch *s, const char *model, bool at_backend, weft_status code,
                          const char *what) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", s->dir, model);
    weft_model *m = NULL;
    weft_err err = {0};
    weft_status st = weft_model_load(path, &m, &err);
    if (at_backend && st == WEFT_OK) {
        weft_backend be = {0};
        weft_backend_opts bo = {
            .kind = "cpu", .threads = 1, .max_slots = 1, .max_rows = 8, .max_context = 32};
        st = weft_model_backend(m, &bo, &be, &err);
        if (st == WEFT_OK) be.ops->destroy(be.self);
    }
    CHECK_MSG(st == code, "%s (%s): status %d, expected %d: %s", model, what, (int)st, (int)code, err.msg);
    CHECK_MSG(strstr(err.msg, what) != NULL, "%s: the error does not name %s: %s", model, what, err.msg);
    weft_model_free(m);
}

/* ---- finding the head file ---- */

static void check_discovery(void) {
    scratch s = {0};
    if (!scratch_new(&s)) {
        CHECK_MSG(0, "cannot make a scratch directory");
        return;
    }
    char path[256];
    /* the converter's default names, and a head of another model listed first */
    bool ok = scratch_link(&s, "mtp/qwen3_5-bf16.gguf", "Qwen3_5-1.2M-BF16.gguf") &&
              scratch_link(&s, "mtp/mtp-qwen3_5-bf16.gguf", "mtp-Qwen3_5-BF16.gguf") &&
              scratch_link(&s, "mtp/mtp-qwen3_5_moe-bf16.gguf", "mtp-Aaa-BF16.gguf") &&
              scratch_link(&s, "mtp/qwen3_5_moe-bf16.gguf", "lonely.gguf") &&
              scratch_link(&s, "mtp/qwen3_5-bf16.gguf", "paired.gguf") &&
              scratch_link(&s, "mtp/mtp-qwen3_5_moe-bf16.gguf", "mtp-paired.gguf");
    CHECK_MSG(ok, "cannot link the test files into %s", s.dir);
    if (ok) {
        snprintf(path, sizeof path, "%s/Qwen3_5-1.2M-BF16.gguf", s.dir);
        check_same_drafts("qwen3_5", path);
        snprintf(path, sizeof path, "%s/lonely.gguf", s.dir); /* the qwen35moe head, under another name */
        check_same_drafts("qwen3_5_moe", path);
        check_refused(&s, "paired.gguf", false, WEFT_EFORMAT,
                      "architecture qwen35moe, the model's is qwen35");
        check_refused(&s, "mtp-Qwen3_5-BF16.gguf", false, WEFT_EFORMAT, "holds only an MTP head");
    }
    scratch_free(&s);
    /* the --no-nextn model alone */
    if (!scratch_new(&s)) return;
    if (scratch_link(&s, "mtp/qwen3_5-bf16.gguf", "qwen3_5-bf16.gguf")) {
        snprintf(path, sizeof path, "%s/qwen3_5-bf16.gguf", s.dir);
        check_no_head(path);
    } else {
        CHECK_MSG(0, "cannot link the test files into %s", s.dir);
    }
    scratch_free(&s);
}

/* ---- corrupt NextN tensors ---- */

typedef struct spoil {
    patch p;
    bool at_backend; /* the family's check (the layer's tensors), not the GGUF reader's */
    weft_status code;
    const char *what;
} spoil;

static const spoil SPOILS[] = {
    {{"blk.4.nextn.hnorm.weight", "blk.4.ffn_up_exps.weight", -1, -1, 0},
     false,
     WEFT_EFORMAT,
     "lacks tensor blk.4.nextn.hnorm.weight"},
    {{"blk.4.nextn.eh_proj.weight", NULL, -1, 0, 64},
     false,
     WEFT_EFORMAT,
     "blk.4.nextn.eh_proj.weight: ne {128, 64}"},
    {{"blk.4.nextn.shared_head_norm.weight", NULL, -1, 0, 32},
     false,
     WEFT_EFORMAT,
     "blk.4.nextn.shared_head_norm.weight: ne {64}"},
    {{"blk.4.nextn.enorm.weight", NULL, 26, -1, 0},
     false,
     WEFT_ENOTSUP,
     "blk.4.nextn.enorm.weight: type I32"},
    {{"blk.4.attn_q.weight", NULL, -1, 1, 128}, true, WEFT_EFORMAT, "mtp.layers.0.self_attn.q_proj.weight"},
};

static void check_corrupt(void) {
    for (size_t i = 0; i < sizeof SPOILS / sizeof *SPOILS; i++)
        for (int sidecar = 0; sidecar < 2; sidecar++) {
            scratch s = {0};
            if (!scratch_new(&s)) {
                CHECK_MSG(0, "cannot make a scratch directory");
                return;
            }
            const spoil *sp = &SPOILS[i];
            bool ok = sidecar ? scratch_link(&s, "mtp/qwen3_5-bf16.gguf", "m.gguf") &&
                                    scratch_patched(&s, "mtp/mtp-qwen3_5-bf16.gguf", "mtp-m.gguf", &sp->p)
                              : scratch_patched(&s, "gguf_hybrid/qwen3_5-f32.gguf", "m.gguf", &sp->p);
            CHECK_MSG(ok, "cannot patch %s in a copy (%s)", sp->p.tensor,
                      sidecar ? "head file" : "model file");
            if (ok) check_refused(&s, "m.gguf", sp->at_backend, sp->code, sp->what);
            scratch_free(&s);
        }
}

int main(void) {
    check_same_drafts("qwen3_5", TEST_DATA "gguf_hybrid/qwen3_5-f32.gguf");
    check_same_drafts("qwen3_5_moe", TEST_DATA "gguf_hybrid/qwen3_5_moe-f16.gguf");
    check_same_drafts("qwen3_5", TEST_DATA "mtp/qwen3_5-bf16.gguf");
    check_same_drafts("qwen3_5_moe", TEST_DATA "mtp/qwen3_5_moe-bf16.gguf");
    check_no_head(TEST_DATA "gguf_hybrid/nemotron_h-f32.gguf");
    check_no_head(TEST_DATA "gguf_hybrid/nemotron_h_moe-f16.gguf");
    check_dedicated();
    check_discovery();
    check_corrupt();
    return check_report("test_mtp_gguf");
}
