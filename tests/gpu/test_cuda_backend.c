/* The CUDA backend on a GPU (run by tests/gpu/run.sh; CI builds it, never runs it): every llama/qwen3 fixture
 * against the HF logits (SPEC §5.5, fp32 path: |Δ| <= 1e-3·max(1, |ref|), greedy ids equal), then the
 * exactness invariants through the backend vtable, bit for bit (SPEC §4.3): 1-row steps == one whole call,
 * chunks interleaved with another stream == whole, caches equal, restored snapshot + rest == fresh, 16
 * concurrent sampled streams == each alone, drafted windows with keep() == serial decoding; then admission
 * refusals and all device memory back after destroy. Prints one table line per fixture. With a GGUF path as
 * argument (bench/cuda/peer_gguf.py's 8B-shape file), also the same invariants at a real shape, where the
 * 4-bit matmuls take every kernel path (test_real_shape). Everything runs twice: fp32 activations, then
 * --activations f16 (act_f16), whose logits are held to SPEC §5.5's bf16-path tolerance (per-row relative L2
 * <= 1e-2, top-1 where the reference margin is >= 5e-2) and whose invariants are the same bit-exact ones.
 * Exit status 1 on any failure. */
#include "check.h"
#include "weft/cuda_backend.h"
#include "weft/gguf.h"
#include "weft/safetensors.h"

#include <cuda_runtime_api.h>
#include <jansson.h>
#include <stdlib.h>

#define CAP 64
#define NS  16 /* concurrent streams */

typedef struct fixture {
    weft_config cfg;
    weft_tensor_set *ts;
    weft_gguf *g;
    int32_t ids[CAP];
    int n_prompt, n_greedy;
    float *ref; /* [n_prompt + n_greedy, V] */
} fixture;

static bool load_fixture(const char *dir, fixture *f) {
    memset(f, 0, sizeof *f);
    char path[512];
    weft_err err = {0};
    f->ts = weft_tensor_set_new();
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    FILE *probe = fopen(path, "rb");
    if (probe) {
        fclose(probe);
        if (weft_gguf_open_file(path, &f->g, &err) || weft_gguf_config(f->g, &f->cfg, &err) ||
            weft_gguf_tensors(f->g, f->ts, &err)) {
            CHECK_MSG(0, "%s: %s", path, err.msg);
            return false;
        }
    } else {
        weft_checkpoint_info info;
        if (weft_config_load_dir(dir, &f->cfg, &err) ||
            weft_safetensors_load_checkpoint(dir, f->ts, &info, &err)) {
            CHECK_MSG(0, "%s: %s", dir, err.msg);
            return false;
        }
    }
    snprintf(path, sizeof path, "%s/golden.json", dir);
    json_error_t je;
    json_t *gj = json_load_file(path, 0, &je);
    CHECK_MSG(gj != NULL, "%s: %s", path, je.text);
    if (!gj) return false;
    json_t *p = json_object_get(gj, "prompt_ids"), *gr = json_object_get(gj, "greedy_ids");
    f->n_prompt = (int)json_array_size(p);
    f->n_greedy = (int)json_array_size(gr);
    if (f->n_prompt + f->n_greedy > CAP - 16) f->n_greedy = CAP - 16 - f->n_prompt;
    for (int i = 0; i < f->n_prompt; i++) f->ids[i] = (int32_t)json_integer_value(json_array_get(p, i));
    for (int i = 0; i < f->n_greedy; i++)
        f->ids[f->n_prompt + i] = (int32_t)json_integer_value(json_array_get(gr, i));
    json_decref(gj);
    size_t n = (size_t)(f->n_prompt + f->n_greedy) * (size_t)f->cfg.vocab_size;
    f->ref = malloc(n * sizeof(float));
    snprintf(path, sizeof path, "%s/logits.f32", dir);
    FILE *lf = fopen(path, "rb");
    CHECK_MSG(lf != NULL, "%s missing", path);
    if (!lf) return false;
    size_t got = fread(f->ref, sizeof(float), n, lf);
    fclose(lf);
    CHECK_EQ_INT(got, n);
    return got == n;
}

static void free_fixture(fixture *f) {
    weft_tensor_set_free(f->ts);
    weft_gguf_close(f->g);
    free(f->ref);
}

/* Feeds seq[a, b) into slot, drawing every row with settings sp; logits of the rows into out (may be NULL).
 */
static bool feed(weft_backend *be, int slot, const int32_t *seq, int a, int b, const weft_sampling *sp,
                 int32_t *draws, float *out) {
    weft_segment s = {slot, a, b - a, seq, 0, b - a, sp, draws, NULL};
    weft_err err = {0};
    weft_status st = be->ops->forward(be->self, &s, 1, &err);
    CHECK_MSG(st == WEFT_OK, "forward: %s", err.msg);
    if (st) return false;
    if (out) {
        int n = 0;
        const float *z = weft_cuda_backend_last_logits(be, &n);
        memcpy(out, z, (size_t)n * (size_t)be->vocab_size * sizeof(float));
    }
    return true;
}

static void open_slot(weft_backend *be, int slot) {
    weft_err err = {0};
    CHECK_MSG(be->ops->open(be->self, slot, CAP, &err) == WEFT_OK, "open %d: %s", slot, err.msg);
}

/* Decodes `steps` sampled tokens for each stream of `n` after their prompts. Concurrent mode feeds every
 * stream in the same forwards (prompts in chunks of 1 + stream index % 5 rows); solo mode one stream at a
 * time. seqs[i] holds prompt (plen[i]) then the reply. */
static void decode_streams(weft_backend *be, int n, int32_t seqs[][CAP], const int *plen, int steps,
                           const weft_sampling *sp, bool concurrent) {
    weft_segment segs[NS];
    int32_t draws[NS][CAP] = {{0}};
    weft_err err = {0};
    for (int i = 0; i < n; i++) open_slot(be, i);
    if (!concurrent) {
        for (int i = 0; i < n; i++) {
            weft_segment s = {i, 0, plen[i], seqs[i], plen[i], 1, &sp[i], draws[i], NULL};
            CHECK_MSG(be->ops->forward(be->self, &s, 1, &err) == WEFT_OK, "%s", err.msg);
            seqs[i][plen[i]] = draws[i][0];
            for (int t = 1; t < steps; t++) {
                int p = plen[i] + t - 1;
                weft_segment d = {i, p, 1, seqs[i], plen[i], 1, &sp[i], draws[i], NULL};
                CHECK_MSG(be->ops->forward(be->self, &d, 1, &err) == WEFT_OK, "%s", err.msg);
                seqs[i][p + 1] = draws[i][0];
            }
        }
    } else {
        int fed[NS] = {0}, gen[NS] = {0};
        for (bool busy = true; busy;) {
            int ns = 0;
            busy = false;
            for (int i = 0; i < n; i++) {
                if (gen[i] >= steps) continue;
                busy = true;
                if (fed[i] < plen[i]) {
                    int c = 1 + i % 5, rows = fed[i] + c < plen[i] ? c : plen[i] - fed[i];
                    bool last = fed[i] + rows == plen[i];
                    segs[ns++] = (weft_segment){i,      fed[i],   rows, seqs[i], plen[i], last ? 1 : 0,
                                                &sp[i], draws[i], NULL};
                } else {
                    segs[ns++] = (weft_segment){i, fed[i], 1, seqs[i], plen[i], 1, &sp[i], draws[i], NULL};
                }
            }
            if (!ns) break;
            CHECK_MSG(be->ops->forward(be->self, segs, ns, &err) == WEFT_OK, "%s", err.msg);
            for (int s = 0; s < ns; s++) {
                int i = segs[s].slot;
                fed[i] += segs[s].n_rows;
                if (segs[s].n_draw) seqs[i][plen[i] + gen[i]++] = draws[i][0];
            }
        }
    }
    for (int i = 0; i < n; i++) be->ops->release(be->self, i);
}

/* Drafted decoding: windows of the pending token + up to 3 drafts taken from `serial` (every third draft
 * corrupted), keep() after each; the committed tokens must equal serial. */
static void drafted_stream(weft_backend *be, const int32_t *serial, int plen, int steps,
                           const weft_sampling *sp, int32_t *out) {
    weft_err err = {0};
    int32_t seq[CAP], draws[CAP];
    memcpy(seq, serial, (size_t)plen * sizeof *seq);
    open_slot(be, 0);
    weft_segment s = {0, 0, plen, seq, plen, 1, sp, draws, NULL};
    CHECK_MSG(be->ops->forward(be->self, &s, 1, &err) == WEFT_OK, "%s", err.msg);
    int len = plen; /* tokens committed: seq[0, len] with seq[len] the pending token */
    seq[len] = draws[0];
    int round = 0;
    while (len + 1 - plen < steps) {
        int k = 1 + round % 3;
        if (len + 1 + k - plen > steps) k = steps - (len + 1 - plen);
        for (int j = 1; j <= k; j++) {
            int32_t t = serial[len + j];
            seq[len + j] = (round + j) % 3 == 0 ? (t + 1) % (int32_t)be->vocab_size : t;
        }
        weft_segment w = {0, len, 1 + k, seq, plen, 1 + k, sp, draws, NULL};
        CHECK_MSG(be->ops->forward(be->self, &w, 1, &err) == WEFT_OK, "%s", err.msg);
        int acc = 0;
        while (acc < k && seq[len + 1 + acc] == draws[acc]) acc++;
        seq[len + 1 + acc] = draws[acc]; /* bonus: the target's own draw after the kept drafts */
        len += acc + 1;
        CHECK(be->ops->keep(be->self, 0, len, &err) == WEFT_OK);
        round++;
    }
    memcpy(out, seq, (size_t)(len + 1) * sizeof *out);
    be->ops->release(be->self, 0);
}

/* SPEC §5.5's bf16 check of row r: relative L2 against the reference and, when its top-2 margin is >= 5e-2,
 * the same top-1. Returns the relative L2; *top1_bad counts a failed top-1. */
static double bf16_row(const float *got, const float *ref, int64_t V, int *top1_bad) {
    double num = 0, den = 0;
    int64_t ag = 0, ar = 0, ar2 = -1;
    for (int64_t i = 0; i < V; i++) {
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
        if (got[i] > got[ag]) ag = i;
        if (ref[i] > ref[ar]) {
            ar2 = ar;
            ar = i;
        } else if (i != ar && (ar2 < 0 || ref[i] > ref[ar2])) {
            ar2 = i;
        }
    }
    if (ar2 >= 0 && ar2 == ar) ar2 = -1;
    const double margin = ar2 >= 0 ? (double)ref[ar] - ref[ar2] : 1e9;
    if (margin >= 5e-2 && ag != ar) ++*top1_bad;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void test_fixture(const char *name, bool f16) {
    char dir[256];
    snprintf(dir, sizeof dir, TEST_DATA "fixtures/%s", name);
    fixture f;
    if (!load_fixture(dir, &f)) {
        free_fixture(&f);
        return;
    }
    const int T = f.n_prompt + f.n_greedy, fails0 = check_failures_;
    const int64_t V = f.cfg.vocab_size;
    size_t free0 = 0, total = 0;
    cudaMemGetInfo(&free0, &total);
    weft_cuda_backend_opts o = {0, NS + 2, 3 * CAP, CAP, 0, false, f16};
    weft_backend be;
    weft_err err = {0};
    if (weft_cuda_backend_new(&f.cfg, f.ts, &o, &be, &err) != WEFT_OK) {
        CHECK_MSG(0, "%s: %s", name, err.msg);
        free_fixture(&f);
        return;
    }
    weft_sampling greedy;
    weft_sampling_defaults(&greedy);
    greedy.temperature = 0;
    float *whole = malloc((size_t)T * V * sizeof(float)), *other = malloc((size_t)T * V * sizeof(float));
    int32_t draws[CAP];

    /* 1. whole sequence in one call vs the HF logits; greedy draws vs golden ids */
    open_slot(&be, 0);
    feed(&be, 0, f.ids, 0, T, &greedy, draws, whole);
    double worst = 0;
    int bad = 0, greedy_bad = 0;
    if (!f16) {
        for (int64_t i = 0; i < (int64_t)T * V; i++) {
            double ref = f.ref[i], dd = fabs((double)whole[i] - ref), tol = 1e-3 * fmax(1.0, fabs(ref));
            if (!(dd <= tol)) bad++;
            if (dd / fmax(1.0, fabs(ref)) > worst) worst = dd / fmax(1.0, fabs(ref));
        }
        CHECK_MSG(bad == 0, "%s: %d logits outside 1e-3·max(1,|ref|) (worst %.3g)", name, bad, worst);
        for (int i = 0; i < f.n_greedy; i++) greedy_bad += draws[f.n_prompt - 1 + i] != f.ids[f.n_prompt + i];
        CHECK_MSG(greedy_bad == 0, "%s: %d greedy draws differ from the golden ids", name, greedy_bad);
    } else { /* worst = the largest per-row relative L2; greedy_bad = top-1 failures past the margin */
        for (int r = 0; r < T; r++) {
            const double rl2 = bf16_row(whole + (int64_t)r * V, f.ref + (int64_t)r * V, V, &greedy_bad);
            bad += !(rl2 <= 1e-2);
            if (rl2 > worst) worst = rl2;
        }
        CHECK_MSG(bad == 0, "%s f16: %d rows past relative L2 1e-2 (worst %.3g)", name, bad, worst);
        CHECK_MSG(greedy_bad == 0, "%s f16: %d rows with a different top-1 at margin >= 5e-2", name,
                  greedy_bad);
    }

    /* 1b. the same call launched kernel by kernel (no CUDA graph) gives the same bits */
    bool graphs_eq = false;
    {
        weft_cuda_backend_opts o2 = o;
        o2.no_graphs = true;
        weft_backend be2;
        if (weft_cuda_backend_new(&f.cfg, f.ts, &o2, &be2, &err) == WEFT_OK) {
            open_slot(&be2, 0);
            feed(&be2, 0, f.ids, 0, T, &greedy, draws, other);
            graphs_eq = !memcmp(whole, other, (size_t)T * V * sizeof(float));
            be2.ops->destroy(be2.self);
        }
        CHECK_MSG(graphs_eq, "%s: kernel-by-kernel launch differs from the graph", name);
    }

    /* 1c. session 2's path (no fused matrices, fp32 activations into every matmul, per-row attention) gives
     * the same bits: the fused and prepared paths change where work happens, not the arithmetic (f16: the
     * baseline has no f16 form and must refuse) */
    bool base_eq = false;
    if (f16) {
        weft_backend be3;
        setenv("WEFT_CUDA_BASELINE", "1", 1);
        base_eq = weft_cuda_backend_new(&f.cfg, f.ts, &o, &be3, &err) == WEFT_ENOTSUP;
        unsetenv("WEFT_CUDA_BASELINE");
        CHECK_MSG(base_eq, "%s: the baseline path took --activations f16", name);
    } else {
        weft_backend be3;
        setenv("WEFT_CUDA_BASELINE", "1", 1);
        weft_status st3 = weft_cuda_backend_new(&f.cfg, f.ts, &o, &be3, &err);
        unsetenv("WEFT_CUDA_BASELINE");
        if (st3 == WEFT_OK) {
            open_slot(&be3, 0);
            feed(&be3, 0, f.ids, 0, T, &greedy, draws, other);
            base_eq = !memcmp(whole, other, (size_t)T * V * sizeof(float));
            be3.ops->destroy(be3.self);
        }
        CHECK_MSG(base_eq, "%s: the baseline path differs from the fused path", name);
    }

    /* 2. one row per call (decode steps) in slot 1 */
    open_slot(&be, 1);
    for (int r = 0; r < T; r++) feed(&be, 1, f.ids, r, r + 1, &greedy, draws, other + (int64_t)r * V);
    bool steps_eq = !memcmp(whole, other, (size_t)T * V * sizeof(float));
    CHECK_MSG(steps_eq, "%s: 1-row steps differ from the whole call", name);

    /* 3. chunks of 7 interleaved with another stream's rows in the same call */
    be.ops->release(be.self, 1);
    open_slot(&be, 1);
    open_slot(&be, 2);
    int32_t shifted[CAP];
    for (int r = 0; r < T; r++) shifted[r] = f.ids[(r + 5) % T];
    for (int a = 0; a < T; a += 7) {
        int b = a + 7 < T ? a + 7 : T;
        int32_t d1[8], d2[8];
        weft_segment segs[2] = {{2, a, b - a, shifted, 0, b - a, &greedy, d2, NULL},
                                {1, a, b - a, f.ids, 0, b - a, &greedy, d1, NULL}};
        CHECK_MSG(be.ops->forward(be.self, segs, 2, &err) == WEFT_OK, "%s", err.msg);
        int n = 0;
        const float *z = weft_cuda_backend_last_logits(&be, &n);
        memcpy(other + (int64_t)a * V, z + (int64_t)(b - a) * V, (size_t)(b - a) * V * sizeof(float));
    }
    bool chunks_eq = !memcmp(whole, other, (size_t)T * V * sizeof(float));
    CHECK_MSG(chunks_eq, "%s: interleaved chunks differ from the whole call", name);

    /* 3b. three streams' whole sequences in one call (3·T rows: the 4-bit matmuls' many-row GEMM) == whole */
    bool many_eq = false;
    {
        int32_t d4[CAP], d5[CAP], d6[CAP];
        for (int s = 4; s < 7; s++) open_slot(&be, s);
        weft_segment segs[3] = {{4, 0, T, f.ids, 0, T, &greedy, d4, NULL},
                                {5, 0, T, shifted, 0, T, &greedy, d5, NULL},
                                {6, 0, T, f.ids, 0, T, &greedy, d6, NULL}};
        CHECK_MSG(be.ops->forward(be.self, segs, 3, &err) == WEFT_OK, "%s", err.msg);
        int n = 0;
        const float *z = weft_cuda_backend_last_logits(&be, &n);
        many_eq = n == 3 * T && !memcmp(whole, z, (size_t)T * V * sizeof(float)) &&
                  !memcmp(whole, z + (int64_t)2 * T * V, (size_t)T * V * sizeof(float));
        CHECK_MSG(many_eq, "%s: a %d-row call differs from the whole call", name, 3 * T);
        for (int s = 4; s < 7; s++) be.ops->release(be.self, s);
    }

    /* 4. caches equal (snapshots of slots 0 and 1 at T); 5. restore at P, feed the rest == whole */
    size_t sb = be.ops->snapshot_bytes(be.self, T);
    /* the cache's element: fp32, or the f16 words the f16 attention reads (half the bytes) */
    const int64_t hd = f.cfg.head_dim > 0 ? f.cfg.head_dim : f.cfg.hidden_size / f.cfg.n_heads,
                  hkv = f.cfg.n_kv_heads > 0 ? f.cfg.n_kv_heads : f.cfg.n_heads;
    const size_t want_sb = (size_t)f.cfg.n_layers * 2 * (size_t)T * (size_t)(hkv * hd) * (f16 ? 2 : 4);
    CHECK_MSG(sb == want_sb, "%s: a snapshot at %d takes %zu bytes, expected %zu", name, T, sb, want_sb);
    char *s0 = malloc(sb), *s1 = malloc(sb);
    CHECK(be.ops->save(be.self, 0, T, s0, sb, &err) == WEFT_OK);
    CHECK(be.ops->save(be.self, 1, T, s1, sb, &err) == WEFT_OK);
    bool caches_eq = !memcmp(s0, s1, sb);
    CHECK_MSG(caches_eq, "%s: caches differ between whole and chunked", name);
    const int P = T / 2;
    size_t pb = be.ops->snapshot_bytes(be.self, P);
    CHECK(be.ops->save(be.self, 0, P, s1, pb, &err) == WEFT_OK);
    open_slot(&be, 3);
    CHECK(be.ops->restore(be.self, 3, P, s1, pb, &err) == WEFT_OK);
    feed(&be, 3, f.ids, P, T, &greedy, draws, other);
    bool resumed_eq = !memcmp(whole + (int64_t)P * V, other, (size_t)(T - P) * V * sizeof(float));
    CHECK_MSG(resumed_eq, "%s: restored + rest differs from the whole call", name);
    free(s0);
    free(s1);
    for (int s = 0; s < 4; s++) be.ops->release(be.self, s);

    /* 6. 16 sampled streams concurrently == each alone; 7. drafted == serial */
    static int32_t solo[NS][CAP], conc[NS][CAP];
    int plen[NS];
    weft_sampling sp[NS];
    const int steps = 12;
    for (int i = 0; i < NS; i++) {
        plen[i] = 3 + (i * 7) % (f.n_prompt > 3 ? f.n_prompt : 4);
        for (int t = 0; t < plen[i]; t++) solo[i][t] = conc[i][t] = f.ids[(t + i) % T];
        weft_sampling_defaults(&sp[i]);
        sp[i].temperature = i % 4 == 0 ? 0.0 : 0.7 + 0.1 * (i % 5);
        sp[i].top_k = i % 3 == 0 ? 40 : 0;
        sp[i].top_p = i % 2 ? 0.9 : 1.0;
        sp[i].seed = 1000 + (uint64_t)i;
    }
    decode_streams(&be, NS, solo, plen, steps, sp, false);
    decode_streams(&be, NS, conc, plen, steps, sp, true);
    int conc_bad = 0;
    for (int i = 0; i < NS; i++)
        conc_bad += memcmp(solo[i], conc[i], (size_t)(plen[i] + steps) * sizeof(int32_t)) != 0;
    CHECK_MSG(conc_bad == 0, "%s: %d of %d concurrent streams differ from solo", name, conc_bad, NS);
    int draft_bad = 0;
    for (int i = 1; i < 4; i++) {
        int32_t out[CAP];
        drafted_stream(&be, solo[i], plen[i], steps, &sp[i], out);
        draft_bad += memcmp(out, solo[i], (size_t)(plen[i] + steps) * sizeof(int32_t)) != 0;
    }
    CHECK_MSG(draft_bad == 0, "%s: %d drafted streams differ from serial", name, draft_bad);

    /* 7b. a graph captured for a round of 2 rows of distinct streams (the one-kernel attention may take it)
     * is not replayed for a window of 2 rows of one stream (it must not: each row would read cache entries
     * the other writes): slot 0's 2-row window after such a round == the same window after a plain prefill */
    bool window_eq = false;
    {
        const int p = T - 3 > 1 ? T - 3 : 1; /* positions 0..p committed, window rows p + 1, p + 2 */
        int32_t d0[2] = {0}, d1[2] = {0}, dw[2] = {0};
        float *la = calloc((size_t)2 * V, sizeof(float)), *lb = calloc((size_t)2 * V, sizeof(float));
        weft_segment w = {0, p + 1, 2, f.ids, p + 1, 2, &greedy, dw, NULL};
        for (int pass = 0; pass < 2; pass++) {
            open_slot(&be, 0);
            if (pass == 0) { /* prompts 0..p-1, then row p of both streams in one round */
                open_slot(&be, 1);
                feed(&be, 0, f.ids, 0, p, &greedy, draws, NULL);
                feed(&be, 1, f.ids, 0, p, &greedy, draws, NULL);
                weft_segment two[2] = {{0, p, 1, f.ids, p, 1, &greedy, d0, NULL},
                                       {1, p, 1, f.ids, p, 1, &greedy, d1, NULL}};
                CHECK_MSG(be.ops->forward(be.self, two, 2, &err) == WEFT_OK, "%s", err.msg);
            } else {
                feed(&be, 0, f.ids, 0, p + 1, &greedy, draws, NULL);
            }
            CHECK_MSG(be.ops->forward(be.self, &w, 1, &err) == WEFT_OK, "%s", err.msg);
            int nz = 0;
            memcpy(pass ? lb : la, weft_cuda_backend_last_logits(&be, &nz), (size_t)2 * V * sizeof(float));
            CHECK(nz == 2);
            be.ops->release(be.self, 0);
            if (pass == 0) be.ops->release(be.self, 1);
        }
        window_eq = !memcmp(la, lb, (size_t)2 * V * sizeof(float));
        CHECK_MSG(window_eq, "%s: a 2-row window after a 2-stream round differs from one after a prefill",
                  name);
        free(la);
        free(lb);
    }

    /* 8. refusals: a capacity past max_context; memory report */
    CHECK(be.ops->open(be.self, 0, CAP + 1, &err) == WEFT_EINVAL);
    size_t used = 0, fr = 0;
    be.ops->memory(be.self, &used, &fr);
    CHECK(used == weft_cuda_backend_device_bytes(&be) && used > 0);
    be.ops->destroy(be.self);
    size_t free1 = 0;
    cudaMemGetInfo(&free1, &total);
    /* everything freed: free memory back to within 8 MiB of where it was (the runtime's own pools aside) */
    CHECK_MSG(free1 + ((size_t)8 << 20) >= free0, "%s: %zu bytes not returned after destroy", name,
              free0 - free1);
    fprintf(stderr,
            "  %-18s %s V=%-5lld rows=%-3d worst=%.2e greedy=%s nograph=%s baseline=%s steps=%s chunks=%s "
            "many=%s caches=%s resumed=%s 16conc=%s drafted=%s window=%s  %s\n",
            name, f16 ? "f16 " : "fp32", (long long)V, T, worst, greedy_bad ? "BAD" : "ok",
            graphs_eq ? "eq" : "NE", base_eq ? "eq" : "NE", steps_eq ? "eq" : "NE", chunks_eq ? "eq" : "NE",
            many_eq ? "eq" : "NE", caches_eq ? "eq" : "NE", resumed_eq ? "eq" : "NE", conc_bad ? "NE" : "eq",
            draft_bad ? "NE" : "eq", window_eq ? "eq" : "NE", check_failures_ == fails0 ? "PASS" : "FAIL");
    free(whole);
    free(other);
    free_fixture(&f);
}

/* Admission: a reserve larger than the device refuses the model with the numbers. */
static void test_refusal(void) {
    fixture f;
    if (!load_fixture(TEST_DATA "fixtures/llama", &f)) {
        free_fixture(&f);
        return;
    }
    weft_cuda_backend_opts o = {0, 1, 16, CAP, (size_t)1 << 50, false, false};
    weft_backend be;
    weft_err err = {0};
    weft_status st = weft_cuda_backend_new(&f.cfg, f.ts, &o, &be, &err);
    CHECK_MSG(st == WEFT_ENOMEM, "refusal expected, got %d (%s)", (int)st, err.msg);
    fprintf(stderr, "  refusal: %s\n", err.msg);
    free_fixture(&f);
}

/* Exactness at a real shape (argument 1: a GGUF such as bench/cuda/peer_gguf.py's 8B-shape Q4_0 file): one
 * 600-token prompt fed in chunks of 512 rows (the many-row products on the wgmma / shared-memory GEMM), 24
 * rows (the 17..32-row kernels, the GEMM on large weights), 7 rows (gemv_q4.cu's staged rows; the
 * cluster-split GEMM where K is too long for them), 16 rows (gemv_q4.cu's split-K form and its fold, with
 * the q|k|v and SwiGLU epilogues) and 48 rows (the wgmma GEMM's split-K form and its fold on the 4,096-row
 * weights, the q|k|v epilogue), each followed by 8 greedy decode steps: every row's logits and every draw
 * must be bit-identical across the five (SPEC §4.3: chunk-cut invariance). The fixtures are too small for
 * most of these kernel paths. */
#define RS_P     600
#define RS_STEPS 8
#define RS_CUTS  5
static void test_real_shape(const char *path, bool f16) {
    weft_err err = {0};
    weft_gguf *g = NULL;
    weft_config cfg;
    weft_tensor_set *ts = weft_tensor_set_new();
    const int T = RS_P + RS_STEPS, chunks[RS_CUTS] = {512, 24, 7, 16, 48};
    float *z[RS_CUTS] = {NULL};
    int32_t seq[RS_CUTS][RS_P + RS_STEPS], draws[RS_P + RS_STEPS];
    if (weft_gguf_open_file(path, &g, &err) || weft_gguf_config(g, &cfg, &err) ||
        weft_gguf_tensors(g, ts, &err)) {
        CHECK_MSG(0, "%s: %s", path, err.msg);
        goto done;
    }
    const int64_t V = cfg.vocab_size;
    weft_cuda_backend_opts o = {0, RS_CUTS, 512, T + 8, 0, false, f16};
    weft_backend be;
    if (weft_cuda_backend_new(&cfg, ts, &o, &be, &err) != WEFT_OK) {
        CHECK_MSG(0, "%s: %s", path, err.msg);
        goto done;
    }
    weft_sampling greedy;
    weft_sampling_defaults(&greedy);
    greedy.temperature = 0;
    uint64_t x = 0x9E3779B97F4A7C15ull; /* a fixed pseudo-random prompt */
    for (int i = 0; i < RS_P; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        for (int v = 0; v < RS_CUTS; v++) seq[v][i] = (int32_t)((x >> 33) % (uint64_t)V);
    }
    for (int v = 0; v < RS_CUTS; v++) {
        z[v] = malloc((size_t)T * (size_t)V * sizeof(float));
        CHECK_MSG(z[v] != NULL, "real shape: %zu bytes of host memory",
                  (size_t)T * (size_t)V * sizeof(float));
        if (!z[v]) break;
        CHECK_MSG(be.ops->open(be.self, v, T + 8, &err) == WEFT_OK, "open %d: %s", v, err.msg);
        for (int a = 0; a < RS_P; a += chunks[v]) {
            const int b = a + chunks[v] < RS_P ? a + chunks[v] : RS_P;
            feed(&be, v, seq[v], a, b, &greedy, draws + a, z[v] + (int64_t)a * V);
        }
        for (int s = 0; s < RS_STEPS; s++) { /* the reply: each step feeds the previous row's draw */
            seq[v][RS_P + s] = draws[RS_P - 1 + s];
            feed(&be, v, seq[v], RS_P + s, RS_P + s + 1, &greedy, draws + RS_P + s,
                 z[v] + (int64_t)(RS_P + s) * V);
        }
        be.ops->release(be.self, v);
    }
    if (z[0] && z[1] && z[2] && z[3] && z[4]) {
        const size_t bytes = (size_t)T * (size_t)V * sizeof(float);
        bool eq[RS_CUTS] = {true, true, true, true, true};
        for (int v = 1; v < RS_CUTS; v++) {
            eq[v] = !memcmp(z[0], z[v], bytes) && !memcmp(seq[0], seq[v], sizeof seq[0]);
            CHECK_MSG(eq[v], "%s: chunks of %d differ from chunks of 512", path, chunks[v]);
        }
        printf(
            "  real shape (%s, %s): %d-token prompt + %d steps, chunks 512 / 24 / 7 / 16 / 48: %s / %s / %s "
            "/ %s\n",
            path, f16 ? "f16" : "fp32", RS_P, RS_STEPS, eq[1] ? "eq" : "NE", eq[2] ? "eq" : "NE",
            eq[3] ? "eq" : "NE", eq[4] ? "eq" : "NE");
    }
    be.ops->destroy(be.self);
done:
    for (int v = 0; v < RS_CUTS; v++) free(z[v]);
    weft_tensor_set_free(ts);
    weft_gguf_close(g);
}

int main(int argc, char **argv) {
    if (weft_cuda_device_count() <= 0) {
        fprintf(stderr,
                "test_cuda_backend: no CUDA device visible; run on the GPU machine (tests/gpu/run.sh)\n");
        return 1;
    }
    const char *names[] = {"llama",          "llama-mlx-q4g64", "qwen3",          "qwen3-mlx-q4g64",
                           "llama-gguf-f16", "llama-gguf-q8_0", "llama-gguf-q4_0"};
    for (int f16 = 0; f16 < 2; f16++)
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) test_fixture(names[i], f16);
    test_refusal();
    if (argc > 1)
        for (int f16 = 0; f16 < 2; f16++) test_real_shape(argv[1], f16);
    return check_report("test_cuda_backend");
}
