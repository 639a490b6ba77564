/* test_mtp_batch.c — batched MTP drafting (the CPU backend's `draft_many`, the family op of
 * src/families/mtp.c) on every fixture with a head: qwen3_5, qwen3_5_moe, nemotron_h_moe (hub safetensors),
 * the three MLX checkpoints with a TensorFold sidecar (tests/data/mtp/<fixture>-mtp-4bit.safetensors) and the
 * GGUF NextN heads (in the model's file: tests/data/gguf_hybrid; in a separate head file: tests/data/mtp).
 *
 * Two identical sets of 8 streams (prompts of 5..19 tokens, then 0..7 tokens decoded, so every stream sits
 * at its own position) are built in slots 0..7 and 8..15. In each of 8 rounds, 1..8 streams of the first
 * set draft in ONE draft_many call (in reverse slot order, each at its own depth 1..4) while their twins
 * draft alone with `draft`: every stream's proposals and its state snapshot (trunk + head) must be
 * bit-identical; then every stream of both sets is fed one greedy token (equal draws) and their snapshots
 * compared again (the head rows absorbed by drafting are then part of them). One fixture runs with
 * max_rows 6, so that 8 streams go through the head in two groups. Bad requests (slot closed, slot twice,
 * wrong length) are refused naming the request. A timing of 8 streams batched vs one by one is printed (not
 * asserted). */
#include "check.h"
#include "weft/model.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#define CTX 96
#define NS  8 /* streams per set */
#define D   4 /* deepest draft asked */

static const weft_sampling GREEDY = {.temperature = 0, .top_p = 1, .repetition_penalty = 1, .logprobs = -1};

typedef struct stream {
    int32_t seq[CTX];
    int n_prompt, c; /* c: positions held (seq[c] is the pending token) */
} stream;

static bool fwd(weft_backend *be, int slot, stream *s, int start, int rows, int draw) {
    weft_segment g = {.slot = slot,
                      .start = start,
                      .n_rows = rows,
                      .seq = s->seq,
                      .n_prompt = s->n_prompt,
                      .n_draw = draw,
                      .sampling = &GREEDY,
                      .draws = &s->seq[start + rows]};
    weft_err err = {0};
    weft_status st = be->ops->forward(be->self, &g, 1, &err);
    CHECK_MSG(st == WEFT_OK, "forward at %d: %s", start, err.msg);
    return st == WEFT_OK;
}

/* Both sets' stream i: prompt, chunked prefill (5 rows), then i greedy tokens. */
static bool build(weft_backend *be, stream *s, int i, int vocab) {
    uint32_t x = 777u + 31u * (uint32_t)i;
    s->n_prompt = 5 + 2 * i;
    for (int k = 0; k < s->n_prompt; k++) s->seq[k] = (int32_t)((x = x * 1103515245u + 12345u) >> 8) % vocab;
    for (int set = 0; set < 2; set++) {
        int slot = i + set * NS;
        for (int st = 0; st < s->n_prompt; st += 5) {
            int rows = s->n_prompt - st < 5 ? s->n_prompt - st : 5;
            if (!fwd(be, slot, s, st, rows, st + rows == s->n_prompt ? 1 : 0)) return false;
        }
        for (int k = 0; k < i; k++)
            if (!fwd(be, slot, s, s->n_prompt + k, 1, 1)) return false;
    }
    s->c = s->n_prompt + i;
    return true;
}

static bool same_snapshots(weft_backend *be, int slot, int pos) {
    size_t bytes = be->ops->snapshot_bytes(be->self, pos);
    char *a = malloc(bytes), *b = malloc(bytes);
    weft_err err = {0};
    bool ok = a && b && be->ops->save(be->self, slot, pos, a, bytes, &err) == WEFT_OK &&
              be->ops->save(be->self, slot + NS, pos, b, bytes, &err) == WEFT_OK && !memcmp(a, b, bytes);
    free(a);
    free(b);
    return ok;
}

static void refusals(weft_backend *be, stream *s) {
    int32_t out[2][D];
    int n[2];
    weft_err err = {0};
    weft_draft_req q[2] = {{0, s[0].seq, s[0].c + 1, D, out[0], &n[0]},
                           {0, s[0].seq, s[0].c + 1, D, out[1], &n[1]}};
    CHECK(be->ops->draft_many(be->self, q, 2, &err) == WEFT_EINVAL && strstr(err.msg, "same stream"));
    q[1] = (weft_draft_req){1, s[1].seq, s[1].c, D, out[1], &n[1]};
    CHECK(be->ops->draft_many(be->self, q, 2, &err) == WEFT_EINVAL && strstr(err.msg, "request 1"));
    q[1] = (weft_draft_req){16, s[1].seq, s[1].c + 1, D, out[1], &n[1]};
    CHECK(be->ops->draft_many(be->self, q, 2, &err) == WEFT_EINVAL && strstr(err.msg, "not open"));
}

static double time_drafts(weft_backend *be, stream *s, bool batched, int reps) {
    int32_t out[NS][D] = {{0}};
    int n[NS] = {0};
    weft_draft_req q[NS];
    for (int i = 0; i < NS; i++) q[i] = (weft_draft_req){i, s[i].seq, s[i].c + 1, D, out[i], &n[i]};
    weft_err err = {0};
    double t0 = weft_now();
    for (int r = 0; r < reps; r++) {
        if (batched) {
            CHECK(be->ops->draft_many(be->self, q, NS, &err) == WEFT_OK);
        } else {
            for (int i = 0; i < NS; i++)
                CHECK(be->ops->draft(be->self, i, s[i].seq, s[i].c + 1, D, out[i], &n[i], &err) == WEFT_OK);
        }
    }
    return (weft_now() - t0) / reps;
}

static void check_batched(const char *label, const char *path, int max_rows) {
    weft_model *m = NULL;
    weft_err err = {0};
    CHECK_MSG(weft_model_load(path, &m, &err) == WEFT_OK, "%s: %s", path, err.msg);
    if (!m) return;
    weft_backend be = {0};
    weft_backend_opts bo = {
        .kind = "cpu", .threads = 2, .max_slots = 2 * NS, .max_rows = max_rows, .max_context = CTX};
    CHECK_MSG(weft_model_backend(m, &bo, &be, &err) == WEFT_OK, "%s: backend: %s", label, err.msg);
    stream *s = calloc(NS, sizeof *s);
    bool ok = be.ops && s && be.ops->draft && be.ops->draft_many;
    CHECK_MSG(!be.ops || ok, "%s: no draft_many", label);
    for (int i = 0; ok && i < 2 * NS; i++) ok = be.ops->open(be.self, i, CTX, &err) == WEFT_OK;
    for (int i = 0; ok && i < NS; i++) ok = build(&be, &s[i], i, (int)m->cfg.vocab_size);
    int compared = 0;
    for (int t = 0; ok && t < NS; t++) {
        int nb = t + 1;
        int32_t out_b[NS][D] = {{0}}, out_a[NS][D] = {{0}};
        int n_b[NS] = {0}, n_a[NS] = {0}, depth[NS] = {0};
        weft_draft_req q[NS];
        for (int k = 0; k < nb; k++) {
            int i = nb - 1 - k; /* reverse order: the call's row order is not the slots' */
            depth[i] = 1 + (i + t) % D;
            n_b[i] = -1;
            q[k] = (weft_draft_req){i, s[i].seq, s[i].c + 1, depth[i], out_b[i], &n_b[i]};
        }
        CHECK_MSG(be.ops->draft_many(be.self, q, nb, &err) == WEFT_OK, "%s: draft_many: %s", label, err.msg);
        for (int i = 0; i < nb; i++) {
            CHECK_MSG(be.ops->draft(be.self, i + NS, s[i].seq, s[i].c + 1, depth[i], out_a[i], &n_a[i],
                                    &err) == WEFT_OK,
                      "%s: draft: %s", label, err.msg);
            CHECK_MSG(n_a[i] == depth[i], "%s: stream %d proposed %d of %d", label, i, n_a[i], depth[i]);
            CHECK_MSG(n_b[i] == n_a[i] && !memcmp(out_b[i], out_a[i], (size_t)n_a[i] * sizeof(int32_t)),
                      "%s: %d streams at once: stream %d (position %d, depth %d) drafts differ from alone",
                      label, nb, i, s[i].c, depth[i]);
            CHECK_MSG(same_snapshots(&be, i, s[i].c),
                      "%s: %d streams: stream %d's state differs after drafting", label, nb, i);
            compared++;
        }
        for (int i = 0; i < NS; i++) { /* every stream moves on one token, in both sets */
            int32_t t_alone;
            ok = fwd(&be, i + NS, &s[i], s[i].c, 1, 1);
            t_alone = s[i].seq[s[i].c + 1];
            ok = ok && fwd(&be, i, &s[i], s[i].c, 1, 1);
            CHECK_EQ_INT(s[i].seq[s[i].c + 1], t_alone);
            s[i].c++;
            CHECK_MSG(ok && same_snapshots(&be, i, s[i].c), "%s: stream %d's state differs at %d", label, i,
                      s[i].c);
        }
    }
    if (ok && max_rows >= 16) {
        refusals(&be, s);
        time_drafts(&be, s, true, 1); /* warm */
        double tb = time_drafts(&be, s, true, 3), ts = time_drafts(&be, s, false, 3);
        fprintf(stderr,
                "test_mtp_batch: %s: %d streams x %d drafts: batched %.2f ms, one by one %.2f ms (x%.2f)\n",
                label, NS, D, tb * 1e3, ts * 1e3, tb > 0 ? ts / tb : 0.0);
    }
    CHECK_MSG(!ok || compared == NS * (NS + 1) / 2, "%s: %d streams compared", label, compared);
    free(s);
    if (be.ops) be.ops->destroy(be.self);
    weft_model_free(m);
}

/* An MLX fixture with a TensorFold sidecar as mtp-4bit.safetensors: links in a temporary directory. */
static const char *const MLX_FILES[] = {"config.json", "generation_config.json", "model.safetensors",
                                        "mtp-4bit.safetensors"};

static void check_sidecar(const char *mlx, const char *sidecar) {
    char tmp[] = "/tmp/weft_mtpb_XXXXXX", src[512], dst[1024], abs_src[PATH_MAX];
    bool ok = mkdtemp(tmp) != NULL;
    for (int i = 0; ok && i < 4; i++) {
        if (i < 3)
            snprintf(src, sizeof src, "%sfixtures/%s/%s", TEST_DATA, mlx, MLX_FILES[i]);
        else
            snprintf(src, sizeof src, "%smtp/%s", TEST_DATA, sidecar);
        snprintf(dst, sizeof dst, "%s/%s", tmp, MLX_FILES[i]);
        ok = realpath(src, abs_src) && !symlink(abs_src, dst);
    }
    CHECK_MSG(ok, "cannot build a checkpoint directory for %s + %s", mlx, sidecar);
    if (ok) check_batched(sidecar, tmp, 32);
    for (int i = 0; i < 4; i++) {
        snprintf(dst, sizeof dst, "%s/%s", tmp, MLX_FILES[i]);
        unlink(dst);
    }
    rmdir(tmp);
}

int main(void) {
    check_batched("qwen3_5", TEST_DATA "fixtures/qwen3_5", 32);
    check_batched("qwen3_5 (max_rows 6)", TEST_DATA "fixtures/qwen3_5", 6);
    check_batched("qwen3_5_moe", TEST_DATA "fixtures/qwen3_5_moe", 32);
    check_batched("nemotron_h_moe", TEST_DATA "fixtures/nemotron_h_moe", 32);
    check_sidecar("qwen3_5-mlx-q4g64", "qwen3_5-mtp-4bit.safetensors");
    check_sidecar("qwen3_5_moe-mlx-q4g64", "qwen3_5_moe-mtp-4bit.safetensors");
    check_sidecar("nemotron_h_moe-mlx-q4g64", "nemotron_h_moe-mtp-4bit.safetensors");
    check_batched("gguf qwen3_5 (head in file)", TEST_DATA "gguf_hybrid/qwen3_5-f32.gguf", 32);
    check_batched("gguf qwen3_5_moe (head in file)", TEST_DATA "gguf_hybrid/qwen3_5_moe-f16.gguf", 32);
    check_batched("gguf qwen3_5 (head file)", TEST_DATA "mtp/qwen3_5-bf16.gguf", 32);
    check_batched("gguf qwen3_5_moe (head file)", TEST_DATA "mtp/qwen3_5_moe-bf16.gguf", 32);
    return check_report("test_mtp_batch");
}
