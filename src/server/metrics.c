/* src/server/metrics.c — Prometheus text exposition (SPEC §3). Each reading is published as `weft:<name>`
 * and mirrored under vLLM's name (`vllm:<name>{model_name=...}`) so existing dashboards and routers work.
 * Readings the engine cannot give (its stats report -1) are omitted, never shown as a constant zero.
 * Histogram buckets are vLLM's, so the mirrors aggregate with vLLM fleets. */
#include <string.h>
#include "internal.h"

void srv_metrics_gen(srv_metrics *m, const srv_gen *g);

static const int k_codes[9] = {200, 400, 401, 404, 405, 413, 500, 503, 0 /* other */};
static const double k_ttft[SRV_TTFT_BUCKETS] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                                0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                                20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double k_e2e[SRV_E2E_BUCKETS] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                              5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                              60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const char *const k_finish[4] = {"stop", "length", "cancelled", "error"};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_destroy(srv_metrics *m) {
    pthread_mutex_destroy(&m->mu);
}

void srv_metrics_status(srv_metrics *m, int status) {
    int i = 0;
    while (k_codes[i] && k_codes[i] != status) i++;
    pthread_mutex_lock(&m->mu);
    m->requests_by_status[i]++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_disconnect(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->disconnections++;
    pthread_mutex_unlock(&m->mu);
}

static void observe(uint64_t *counts, const double *bounds, int n, double v) {
    int i = 0;
    while (i < n && v > bounds[i]) i++;
    counts[i]++;
}

void srv_metrics_gen(srv_metrics *m, const srv_gen *g) {
    if (!g->started) return;
    int p, c, k;
    srv_gen_usage(g, &p, &c, &k);
    double e2e = weft_now() - g->t0;
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)p;
    m->generation_tokens += (uint64_t)c;
    m->cached_tokens += (uint64_t)k;
    for (int i = 0; i < g->n_ch; i++) {
        const srv_choice *ch = &g->ch[i];
        for (int f = 0; f < 4; f++)
            if (ch->finish && !strcmp(ch->finish, k_finish[f])) m->finished[f]++;
        if (ch->stats.drafted >= 0 && ch->stats.accepted >= 0) {
            m->drafts_counted = true;
            m->drafted += (uint64_t)ch->stats.drafted;
            m->accepted += (uint64_t)ch->stats.accepted;
        }
    }
    if (g->ch[0].t_first > 0) {
        double t = g->ch[0].t_first - g->t0;
        observe(m->ttft_counts, k_ttft, SRV_TTFT_BUCKETS, t);
        m->ttft_sum += t;
        m->ttft_n++;
    }
    observe(m->e2e_counts, k_e2e, SRV_E2E_BUCKETS, e2e);
    m->e2e_sum += e2e;
    m->e2e_n++;
    pthread_mutex_unlock(&m->mu);
}

void srv_engine_stats_unknown(weft_srv_engine_stats *es) {
    *es = (weft_srv_engine_stats){.requests_running = -1,
                                  .requests_waiting = -1,
                                  .kv_cache_usage = -1,
                                  .device_memory_bytes = -1,
                                  .prefix_cache_queries = -1,
                                  .prefix_cache_hits = -1,
                                  .prompt_cache_bytes = -1,
                                  .prompt_cache_budget = -1,
                                  .parallel = -1,
                                  .prompt_tokens_total = -1,
                                  .generation_tokens_total = -1,
                                  .drafted_total = -1,
                                  .accepted_total = -1};
}

typedef struct out_ctx {
    srv_buf *b;
    char label[300]; /* {model_name="..."} */
    bool ok;
} out_ctx;

/* One reading under both names. type: "gauge" / "counter". extra: a label pair or NULL. */
static void reading(out_ctx *o, const char *name, const char *type, const char *help, bool mirror, double v) {
    o->ok &= srv_buf_printf(o->b, "# HELP weft:%s %s\n# TYPE weft:%s %s\nweft:%s %.17g\n", name, help, name,
                            type, name, v);
    if (mirror)
        o->ok &= srv_buf_printf(o->b, "# HELP vllm:%s %s\n# TYPE vllm:%s %s\nvllm:%s%s %.17g\n", name, help,
                                name, type, name, o->label, v);
}

static void histogram(out_ctx *o, const char *prefix, const char *name, const char *help,
                      const uint64_t *counts, const double *bounds, int n, double sum, uint64_t total,
                      bool labelled) {
    const char *lab = labelled ? o->label : "";
    o->ok &=
        srv_buf_printf(o->b, "# HELP %s:%s %s\n# TYPE %s:%s histogram\n", prefix, name, help, prefix, name);
    uint64_t cum = 0;
    /* labels: {model_name="x",le="..."} or {le="..."} */
    char head[300];
    if (labelled)
        snprintf(head, sizeof head, "%.*s,", (int)strlen(lab) - 1, lab);
    else
        snprintf(head, sizeof head, "{");
    for (int i = 0; i <= n; i++) {
        cum += counts[i];
        if (i < n)
            o->ok &= srv_buf_printf(o->b, "%s:%s_bucket%sle=\"%g\"} %llu\n", prefix, name, head, bounds[i],
                                    (unsigned long long)cum);
        else
            o->ok &= srv_buf_printf(o->b, "%s:%s_bucket%sle=\"+Inf\"} %llu\n", prefix, name, head,
                                    (unsigned long long)cum);
    }
    o->ok &= srv_buf_printf(o->b, "%s:%s_sum%s %.17g\n%s:%s_count%s %llu\n", prefix, name, lab, sum, prefix,
                            name, lab, (unsigned long long)total);
}

bool srv_metrics_render(srv_metrics *m, const weft_model_service *svc, srv_buf *b) {
    out_ctx o = {.b = b, .ok = true};
    /* Prometheus label values escape backslash, quote and newline. */
    srv_buf lab = {0};
    const char *id = svc ? svc->model_id : "";
    o.ok &= srv_buf_adds(&lab, "{model_name=\"");
    for (const char *p = id; *p && o.ok; p++) {
        if (*p == '\\' || *p == '"')
            o.ok &= srv_buf_add(&lab, "\\", 1) && srv_buf_add(&lab, p, 1);
        else if (*p == '\n')
            o.ok &= srv_buf_adds(&lab, "\\n");
        else
            o.ok &= srv_buf_add(&lab, p, 1);
    }
    o.ok &= srv_buf_adds(&lab, "\"}");
    snprintf(o.label, sizeof o.label, "%s", lab.p ? lab.p : "");
    srv_buf_free(&lab);

    weft_srv_engine_stats es;
    srv_engine_stats_unknown(&es);
    if (svc && svc->stats) svc->stats(svc->ctx, &es);
    if (es.requests_running >= 0)
        reading(&o, "num_requests_running", "gauge", "Requests admitted to rounds.", true,
                (double)es.requests_running);
    if (es.requests_waiting >= 0)
        reading(&o, "num_requests_waiting", "gauge", "Requests queued for admission.", true,
                (double)es.requests_waiting);
    if (es.kv_cache_usage >= 0)
        reading(&o, "kv_cache_usage_perc", "gauge", "Fraction of KV cache capacity in use (0-1).", true,
                es.kv_cache_usage);
    if (es.device_memory_bytes >= 0)
        reading(&o, "device_memory_bytes", "gauge", "Device memory used by weights and caches.", false,
                (double)es.device_memory_bytes);
    if (es.prefix_cache_queries >= 0 && es.prefix_cache_hits >= 0) {
        reading(&o, "prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prompt cache.",
                true, (double)es.prefix_cache_queries);
        reading(&o, "prefix_cache_hits_total", "counter", "Prompt tokens resumed from the prompt cache.",
                true, (double)es.prefix_cache_hits);
    }
    if (es.prompt_cache_bytes >= 0 && es.prompt_cache_budget >= 0) {
        reading(&o, "prompt_cache_bytes", "gauge", "Bytes held by the prompt cache.", false,
                (double)es.prompt_cache_bytes);
        reading(&o, "prompt_cache_budget_bytes", "gauge", "Budget of the prompt cache.", false,
                (double)es.prompt_cache_budget);
    }

    pthread_mutex_lock(&m->mu);
    srv_metrics c = *m; /* a consistent snapshot; render outside the lock */
    pthread_mutex_unlock(&m->mu);
    reading(&o, "prompt_tokens_total", "counter", "Prompt tokens of finished requests.", true,
            (double)c.prompt_tokens);
    reading(&o, "generation_tokens_total", "counter", "Generated tokens of finished requests.", true,
            (double)c.generation_tokens);
    reading(&o, "prompt_tokens_cached_total", "counter", "Prompt tokens resumed from the prompt cache.",
            false, (double)c.cached_tokens);
    reading(&o, "client_disconnections_total", "counter", "Requests whose client went away before the end.",
            false, (double)c.disconnections);
    if (c.drafts_counted) {
        reading(&o, "spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed.", true,
                (double)c.drafted);
        reading(&o, "spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", true,
                (double)c.accepted);
    }
    o.ok &= srv_buf_adds(b, "# HELP weft:requests_total HTTP requests by status code.\n"
                            "# TYPE weft:requests_total counter\n");
    for (int i = 0; i < 9; i++)
        if (k_codes[i])
            o.ok &= srv_buf_printf(b, "weft:requests_total{code=\"%d\"} %llu\n", k_codes[i],
                                   (unsigned long long)c.requests_by_status[i]);
        else
            o.ok &= srv_buf_printf(b, "weft:requests_total{code=\"other\"} %llu\n",
                                   (unsigned long long)c.requests_by_status[i]);
    o.ok &= srv_buf_adds(b, "# HELP weft:request_success_total Finished choices by finish_reason.\n"
                            "# TYPE weft:request_success_total counter\n");
    for (int f = 0; f < 4; f++)
        o.ok &= srv_buf_printf(b, "weft:request_success_total{finished_reason=\"%s\"} %llu\n", k_finish[f],
                               (unsigned long long)c.finished[f]);
    o.ok &= srv_buf_adds(b, "# HELP vllm:request_success_total Finished requests by finish reason.\n"
                            "# TYPE vllm:request_success_total counter\n");
    static const char *const vnames[3] = {"stop", "length", "abort"};
    for (int f = 0; f < 3; f++)
        o.ok &= srv_buf_printf(b, "vllm:request_success_total{finished_reason=\"%s\",%s %llu\n", vnames[f],
                               o.label + 1, (unsigned long long)c.finished[f]);
    const char *th = "Time from request arrival to its first generated token.";
    const char *eh = "Time from request arrival to its end.";
    histogram(&o, "weft", "time_to_first_token_seconds", th, c.ttft_counts, k_ttft, SRV_TTFT_BUCKETS,
              c.ttft_sum, c.ttft_n, false);
    histogram(&o, "vllm", "time_to_first_token_seconds", th, c.ttft_counts, k_ttft, SRV_TTFT_BUCKETS,
              c.ttft_sum, c.ttft_n, true);
    histogram(&o, "weft", "e2e_request_latency_seconds", eh, c.e2e_counts, k_e2e, SRV_E2E_BUCKETS, c.e2e_sum,
              c.e2e_n, false);
    histogram(&o, "vllm", "e2e_request_latency_seconds", eh, c.e2e_counts, k_e2e, SRV_E2E_BUCKETS, c.e2e_sum,
              c.e2e_n, true);
    return o.ok;
}
