/* test_server_fake.c — the fake model service of the server tests (see test_server_fake.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>
#include "test_server_fake.h"

#define FAKE_VOCAB   300
#define FAKE_BOS     0
#define FAKE_EOS     1
#define FAKE_THINK   258
#define FAKE_UNTHINK 259

typedef struct fake_job {
    struct fake_job *next;
    int32_t *prompt;
    int n_prompt;
    weft_srv_job job;
    int32_t *script; /* the reply the "model" writes */
    int n_script;
    bool slow, fail;
    /* state (under f->mu) */
    int32_t *out;
    weft_logprobs *lps;
    int n_out, n_delivered;
    bool queued, running, prefilled, prefill_delivered, finished, finish_delivered, cancel;
    weft_srv_end end;
    double t_cancel;
    int rounds, cached;
    int drafted, accepted;
    double t_first;
} fake_job;

struct fake_engine {
    fake_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool stop;
    fake_job *jobs; /* every job not yet freed */
    int32_t *last_prompt;
    int n_last_prompt;
    char bytes[256]; /* bytes[b] == b: the pieces of the byte tokens */
    fake_counts counts;
};

static const char *const k_aliases[] = {"fake-alias"};

void fake_config_default(fake_config *c) {
    memset(c, 0, sizeof *c);
    c->parallel = 2;
    c->max_queue = 8;
    c->round_s = 0.001;
    c->context = 256;
    c->has_tokenizer = c->has_template = c->add_bos = c->honour_stop = c->with_stats = c->with_stop = true;
}

int fake_encode(const char *text, int32_t *out, int cap) {
    int n = 0;
    size_t len = strlen(text);
    for (size_t i = 0; i < len && n < cap;) {
        if (!strncmp(text + i, "<think>", 7))
            out[n++] = FAKE_THINK, i += 7;
        else if (!strncmp(text + i, "</think>", 8))
            out[n++] = FAKE_UNTHINK, i += 8;
        else
            out[n++] = 2 + (unsigned char)text[i++];
    }
    return n;
}

static const char *piece(int32_t id, size_t *len, char *tmp) {
    if (id >= 2 && id < 258) {
        tmp[0] = (char)(id - 2);
        *len = 1;
        return tmp;
    }
    const char *s = id == FAKE_THINK ? "<think>" : id == FAKE_UNTHINK ? "</think>" : "";
    *len = strlen(s);
    return s;
}

/* ---- tokenizer, template ---- */

static weft_status f_tokenize(void *ctx, const char *text, size_t len, bool add_special, bool parse_special,
                              int32_t **ids, int *n_ids, weft_err *err) {
    fake_engine *f = ctx;
    int32_t *out = malloc(sizeof *out * (len + 2));
    if (!out) return weft_err_set(err, WEFT_ENOMEM, "oom");
    int n = 0;
    if (add_special && f->cfg.add_bos) out[n++] = FAKE_BOS;
    char *copy = strndup(text, len);
    if (parse_special)
        n += fake_encode(copy, out + n, (int)len);
    else
        for (size_t i = 0; i < len; i++) out[n++] = 2 + (unsigned char)text[i];
    free(copy);
    *ids = out;
    *n_ids = n;
    return WEFT_OK;
}

typedef struct fake_detok {
    char tmp[2];
} fake_detok;

static void *f_detok_new(void *ctx, const int32_t *prompt, int n) {
    return calloc(1, sizeof(fake_detok));
}
static const char *f_detok_feed(void *ctx, void *dt, int32_t id, size_t *len) {
    return piece(id, len, ((fake_detok *)dt)->tmp);
}
static void f_detok_free(void *ctx, void *dt) {
    free(dt);
}

static const char *f_token_piece(void *ctx, int32_t id, size_t *len) {
    fake_engine *f = ctx;
    if (id >= 2 && id < 258) {
        *len = 1;
        return &f->bytes[id - 2];
    }
    char t[2];
    return piece(id, len, t);
}

static weft_status f_render(void *ctx, const char *messages, const char *kwargs, bool add_gen, char **text,
                            weft_err *err) {
    fake_engine *f = ctx;
    json_t *m = json_loads(messages, 0, NULL), *kw = json_loads(kwargs, 0, NULL);
    if (!m || !kw) {
        json_decref(m);
        json_decref(kw);
        return weft_err_set(err, WEFT_EINVAL, "bad JSON from the server");
    }
    size_t cap = strlen(messages) + 64, len = 0;
    char *out = malloc(cap);
    const char *prev = "";
    weft_status st = WEFT_OK;
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *x = json_array_get(m, i);
        const char *role = json_string_value(json_object_get(x, "role"));
        const char *content = json_string_value(json_object_get(x, "content"));
        if (!strcmp(role, "assistant") && !strcmp(prev, "assistant")) {
            st = weft_err_set(err, WEFT_EINVAL,
                              "Conversation roles must alternate user/assistant/user/assistant");
            break;
        }
        len += (size_t)snprintf(out + len, cap - len, "<|%s|>%s\n", role, content ? content : "");
        prev = role;
    }
    if (!st && add_gen) {
        len += (size_t)snprintf(out + len, cap - len, "<|assistant|>");
        if (f->cfg.thinks && !json_is_false(json_object_get(kw, "enable_thinking"))) /* on by default */
            snprintf(out + len, cap - len, "<think>\n");
    }
    json_decref(m);
    json_decref(kw);
    if (st) {
        free(out);
        return st;
    }
    *text = out;
    return WEFT_OK;
}

/* ---- engine ---- */

static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static void make_script(fake_job *j) {
    char *text = malloc((size_t)j->n_prompt * 8 + 1);
    int n = 0;
    for (int i = 0; i < j->n_prompt; i++) {
        size_t l;
        char t[2];
        const char *p = piece(j->prompt[i], &l, t);
        memcpy(text + n, p, l);
        n += (int)l;
    }
    text[n] = 0;
    j->slow = strstr(text, "SLOW") != NULL;
    j->fail = strstr(text, "FAIL") != NULL;
    const char *say = strstr(text, "SAY:");
    j->script = malloc(sizeof *j->script * ((size_t)n + 32));
    if (say) {
        say += 4;
        const char *end = strchr(say, '\n');
        char *s = strndup(say, end ? (size_t)(end - say) : strlen(say));
        j->n_script = fake_encode(s, j->script, n + 32);
        free(s);
    } else {
        uint64_t seed = j->job.sampling.temperature == 0 ? 0 : j->job.sampling.seed;
        for (int i = 0; i < 16; i++) j->script[i] = 2 + 'a' + (int32_t)(mix(seed * 131 + (uint64_t)i) % 26);
        j->n_script = 16;
    }
    free(text);
}

static void finish(fake_engine *f, fake_job *j, weft_srv_end end) {
    j->finished = true;
    j->end = end;
    if (j->running) f->counts.running--;
    if (j->queued) f->counts.waiting--;
    j->running = j->queued = false;
    f->counts.finished++;
    if (end == WEFT_SRV_END_CANCELLED && j->t_cancel > 0) {
        f->counts.cancelled++;
        f->counts.last_cancel_latency = weft_now() - j->t_cancel;
    }
}

static void step(fake_engine *f, fake_job *j) {
    int k = j->job.draft ? 3 : 1;
    j->rounds++;
    if (j->job.draft) j->drafted += 2, j->accepted += 2;
    for (int i = 0; i < k && !j->finished; i++) {
        int p = j->n_out % (j->n_script + 1); /* the script, EOS, the script again (ignore_eos) ... */
        int32_t id = p == j->n_script ? FAKE_EOS : j->script[p];
        if (!j->t_first) j->t_first = weft_now();
        j->out[j->n_out] = id;
        if (j->lps) {
            weft_logprobs *l = &j->lps[j->n_out];
            memset(l, 0, sizeof *l);
            l->token = id;
            l->logprob = -0.25f * (float)(1 + id % 4);
            l->n_top = j->job.sampling.logprobs;
            for (int t = 0; t < l->n_top; t++) {
                l->top_ids[t] = t == 0 ? id : (id + t) % FAKE_VOCAB;
                l->top_logprobs[t] = t == 0 ? l->logprob : l->logprob - (float)t;
            }
        }
        j->n_out++;
        if (j->fail && j->n_out == 3)
            finish(f, j, WEFT_SRV_END_ERROR);
        else if (f->cfg.honour_stop && j->job.stop && j->job.stop(j->job.stop_ctx, j->out, j->n_out)) {
            f->counts.hook_stops++;
            finish(f, j, WEFT_SRV_END_STOP);
        } else if (id == FAKE_EOS && !j->job.ignore_eos)
            finish(f, j, WEFT_SRV_END_STOP);
        else if (j->n_out >= j->job.max_tokens)
            finish(f, j, WEFT_SRV_END_LENGTH);
    }
}

static void *engine_main(void *arg) {
    fake_engine *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        bool slow = false;
        for (fake_job *j = f->jobs; j; j = j->next) {
            if (j->finished) continue;
            if (j->cancel) {
                finish(f, j, WEFT_SRV_END_CANCELLED);
                continue;
            }
            if (j->queued && f->counts.running < f->cfg.parallel) {
                j->queued = false;
                j->running = true;
                f->counts.waiting--;
                f->counts.running++;
                if (f->counts.running > f->counts.max_running) f->counts.max_running = f->counts.running;
                int c = 0;
                while (c < j->n_prompt && c < f->n_last_prompt && j->prompt[c] == f->last_prompt[c]) c++;
                j->prefilled = true;
                j->cached = c;
                free(f->last_prompt);
                f->last_prompt = malloc(sizeof(int32_t) * (size_t)j->n_prompt);
                memcpy(f->last_prompt, j->prompt, sizeof(int32_t) * (size_t)j->n_prompt);
                f->n_last_prompt = j->n_prompt;
                continue;
            }
            if (j->running) {
                step(f, j);
                slow |= j->slow;
            }
        }
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        double s = slow ? 0.02 : f->cfg.round_s;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&f->mu);
    }
    for (fake_job *j = f->jobs; j; j = j->next)
        if (!j->finished) {
            bool queued = j->queued;
            finish(f, j, queued ? WEFT_SRV_END_REFUSED : WEFT_SRV_END_CANCELLED);
        }
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static weft_status f_submit(void *ctx, const weft_srv_job *job, void **handle, weft_err *err) {
    fake_engine *f = ctx;
    pthread_mutex_lock(&f->mu);
    if (f->stop) {
        pthread_mutex_unlock(&f->mu);
        return weft_err_set(err, WEFT_ECANCELLED, "engine stopping");
    }
    if (f->counts.waiting + f->counts.running >= f->cfg.parallel + f->cfg.max_queue) {
        pthread_mutex_unlock(&f->mu);
        return weft_err_set(err, WEFT_EBUSY, "%d requests already waiting", f->counts.waiting);
    }
    fake_job *j = calloc(1, sizeof *j);
    j->job = *job;
    j->n_prompt = job->n_prompt;
    j->prompt = malloc(sizeof(int32_t) * (size_t)job->n_prompt);
    memcpy(j->prompt, job->prompt, sizeof(int32_t) * (size_t)job->n_prompt);
    j->out = malloc(sizeof(int32_t) * (size_t)job->max_tokens);
    if (job->sampling.logprobs >= 0) j->lps = malloc(sizeof(weft_logprobs) * (size_t)job->max_tokens);
    make_script(j);
    j->queued = true;
    j->next = f->jobs;
    f->jobs = j;
    f->counts.waiting++;
    f->counts.submitted++;
    f->counts.live++;
    *handle = j;
    pthread_mutex_unlock(&f->mu);
    return WEFT_OK;
}

static void cond_wait(fake_engine *f, double s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)(s * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_cond_timedwait(&f->cv, &f->mu, &ts);
}

static bool f_next(void *ctx, void *h, weft_srv_event *ev, double timeout_s) {
    fake_engine *f = ctx;
    fake_job *j = h;
    memset(ev, 0, sizeof *ev);
    pthread_mutex_lock(&f->mu);
    double end = weft_now() + timeout_s;
    for (;;) {
        if (j->prefilled && !j->prefill_delivered) {
            j->prefill_delivered = true;
            ev->kind = WEFT_SRV_EV_PREFILLED;
            ev->cached_tokens = j->cached;
            break;
        }
        if (j->n_out > j->n_delivered) {
            ev->kind = WEFT_SRV_EV_TOKENS;
            ev->ids = j->out + j->n_delivered;
            ev->logprobs = j->lps ? j->lps + j->n_delivered : NULL;
            ev->n_ids = j->n_out - j->n_delivered;
            j->n_delivered = j->n_out;
            break;
        }
        if (j->finished) {
            j->finish_delivered = true;
            ev->kind = WEFT_SRV_EV_FINISHED;
            ev->end = j->end;
            ev->message = j->end == WEFT_SRV_END_CANCELLED ? "cancelled"
                          : j->end == WEFT_SRV_END_ERROR   ? "fake backend failure"
                                                           : NULL;
            ev->stats = (weft_srv_gen_stats){j->rounds, j->drafted, j->accepted, 0.001, 0.002};
            break;
        }
        double now = weft_now();
        if (now >= end) break;
        cond_wait(f, end - now);
    }
    pthread_mutex_unlock(&f->mu);
    return ev->kind != WEFT_SRV_EV_NONE;
}

static void f_cancel(void *ctx, void *h) {
    fake_engine *f = ctx;
    fake_job *j = h;
    pthread_mutex_lock(&f->mu);
    if (!j->finished && !j->cancel) {
        j->cancel = true;
        j->t_cancel = weft_now();
    }
    pthread_mutex_unlock(&f->mu);
}

static void free_job(fake_job *j) {
    free(j->prompt);
    free(j->script);
    free(j->out);
    free(j->lps);
    free(j);
}

static void f_release(void *ctx, void *h) {
    fake_engine *f = ctx;
    fake_job *j = h;
    pthread_mutex_lock(&f->mu);
    if (!j->finished) fprintf(stderr, "fake: release before FINISHED (server contract violated)\n");
    for (fake_job **p = &f->jobs; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            break;
        }
    f->counts.released++;
    f->counts.live--;
    pthread_mutex_unlock(&f->mu);
    free_job(j);
}

static void f_stats(void *ctx, weft_srv_engine_stats *out) {
    fake_engine *f = ctx;
    pthread_mutex_lock(&f->mu);
    out->requests_running = f->counts.running;
    out->requests_waiting = f->counts.waiting;
    out->kv_cache_usage = (double)f->counts.running / f->cfg.parallel;
    out->device_memory_bytes = -1;
    out->prefix_cache_queries = -1;
    out->prefix_cache_hits = -1;
    out->prompt_cache_bytes = -1;
    out->prompt_cache_budget = -1;
    pthread_mutex_unlock(&f->mu);
}

fake_engine *fake_new(const fake_config *c) {
    fake_engine *f = calloc(1, sizeof *f);
    f->cfg = *c;
    for (int b = 0; b < 256; b++) f->bytes[b] = (char)b;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    pthread_create(&f->thread, NULL, engine_main, f);
    return f;
}

void fake_stop(fake_engine *f) {
    pthread_mutex_lock(&f->mu);
    bool was = f->stop;
    f->stop = true;
    pthread_mutex_unlock(&f->mu);
    if (!was) pthread_join(f->thread, NULL);
}

void fake_free(fake_engine *f) {
    fake_stop(f);
    while (f->jobs) {
        fake_job *j = f->jobs;
        f->jobs = j->next;
        free_job(j);
    }
    free(f->last_prompt);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

void fake_get_counts(fake_engine *f, fake_counts *out) {
    pthread_mutex_lock(&f->mu);
    *out = f->counts;
    pthread_mutex_unlock(&f->mu);
}

static void f_stop(void *ctx) {
    fake_stop(ctx);
}

weft_model_service fake_service(fake_engine *f) {
    weft_model_service s = {0};
    s.ctx = f;
    s.model_id = "fake-model";
    s.aliases = k_aliases;
    s.n_aliases = 1;
    s.created = 1700000000;
    s.context_length = f->cfg.context;
    s.vocab_size = FAKE_VOCAB;
    s.has_tokenizer = f->cfg.has_tokenizer;
    s.has_chat_template = f->cfg.has_template;
    s.add_bos = f->cfg.add_bos;
    s.thinks = f->cfg.thinks;
    if (s.has_tokenizer) {
        s.tokenize = f_tokenize;
        s.detok_new = f_detok_new;
        s.detok_feed = f_detok_feed;
        s.detok_free = f_detok_free;
        s.token_piece = f_token_piece;
    }
    if (s.has_chat_template) s.render_chat = f_render;
    s.submit = f_submit;
    s.next_event = f_next;
    s.cancel = f_cancel;
    s.release = f_release;
    if (f->cfg.with_stats) s.stats = f_stats;
    if (f->cfg.with_stop) s.stop = f_stop;
    return s;
}
