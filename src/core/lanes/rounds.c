/* rounds.c — admission and one round (SPEC §4.1), on the engine thread.
 *
 * A round: order the admitted streams least recently served first (ties: admission order); give each, while
 * the row budget lasts, either its next prefill chunk (rows with no draw, the prompt's last chunk drawing the
 * first reply token at position n_prompt) or its decode window (the pending token plus 0..max_draft draft
 * rows, every row drawn, row d at position cache_len + 1 + d); one forward over all of them; then for each
 * window accept the longest draft prefix equal to the target's draws, commit those plus the bonus draw one
 * token at a time (EOS, stop hook, max_tokens), and roll the slot back to the rows kept. Cancels are taken
 * before each round, so between prefill chunks too. Nothing here allocates: segments, draws and logprob rows
 * were allocated with the engine, token buffers with the request.
 *
 * With the prompt cache (prompt_cache.c), admission restores the longest cached prefix of the prompt into the
 * new slot, prefill chunks end at the cache's save points and states are saved there and at a finished
 * reply's end. How many drafts a window asks for is the stream's depth rule (depth.c); the windows that draft
 * from the backend's head get their proposals from one batched call per round (head_drafts). */
#include "lanes_internal.h"

#include <stdio.h>
#include <string.h>

int lanes_active(const weft_engine *e) {
    int n = 0;
    for (int i = 0; i < e->parallel; i++) n += e->lanes[i].req != NULL;
    return n;
}

void lanes_publish_occupancy(weft_engine *e) {
    uint64_t rows = 0;
    for (int i = 0; i < e->parallel; i++)
        if (e->lanes[i].req) rows += (uint64_t)e->lanes[i].cache_len;
    pthread_mutex_lock(&e->mu);
    e->totals.kv_rows_used = rows;
    pthread_mutex_unlock(&e->mu);
}

static void lane_stats(const lane *l, double now, weft_request_stats *st) {
    memset(st, 0, sizeof *st);
    st->rounds = l->rounds;
    st->cached_tokens = l->cached;
    st->drafted = l->drafted;
    st->accepted = l->accepted;
    st->queue_seconds = l->t_admit - l->req->t_submit;
    if (l->t_first > 0) {
        st->prefill_seconds = l->t_first - l->t_admit;
        st->decode_seconds = now - l->t_first;
        st->ttft_seconds = l->t_first - l->req->t_submit;
    } else {
        st->prefill_seconds = now - l->t_admit;
    }
}

/* Ends an admitted stream: frees its slot, updates the totals and posts FINISHED. */
static void lane_finish(weft_engine *e, int slot, weft_finish_reason reason, weft_status status,
                        const char *msg) {
    lane *l = &e->lanes[slot];
    weft_request_handle *r = l->req;
    weft_request_stats st;
    lane_stats(l, weft_now(), &st);
    lanes_cache_unpin(l);
    e->be->ops->release(e->be->self, slot);
    l->req = NULL;
    pthread_mutex_lock(&e->mu);
    e->n_running--;
    e->totals.requests_finished_total++;
    pthread_mutex_unlock(&e->mu);
    lanes_post_progress(r, l->prefilled_now, l->cached, l->n_gen);
    lanes_post_finished(r, reason, status, msg, &st);
}

void lanes_admit(weft_engine *e, weft_request_handle *r) {
    int slot = -1;
    for (int i = 0; i < e->parallel && slot < 0; i++)
        if (!e->lanes[i].req) slot = i;
    weft_err err = {0};
    weft_status st = slot < 0 ? weft_err_set(&err, WEFT_EINTERNAL, "no free slot")
                              : e->be->ops->open(e->be->self, slot, e->capacity, &err);
    if (st == WEFT_OK) {
        lane *l = &e->lanes[slot];
        int32_t *draws = l->draws;
        weft_logprobs *lp = l->lp;
        memset(l, 0, sizeof *l);
        l->draws = draws;
        l->lp = lp;
        l->req = r;
        l->t_admit = weft_now(); /* a restore counts as prefill time */
        lanes_depth_init(&l->depth);
        /* The longest cached prefix of the prompt goes into the slot (a failed restore reopens it). */
        st = lanes_cache_resume(e, slot, &err);
        if (st != WEFT_OK) l->req = NULL; /* the slot is closed: refuse below */
    }
    if (st != WEFT_OK) {
        /* Only this request fails; the backend's words go to the client. */
        weft_request_stats rs = {0};
        rs.queue_seconds = weft_now() - r->t_submit;
        pthread_mutex_lock(&e->mu);
        e->n_running--;
        e->totals.requests_finished_total++;
        pthread_mutex_unlock(&e->mu);
        lanes_post_finished(r, WEFT_FINISH_REFUSED, st, err.msg, &rs);
        return;
    }
    lane *l = &e->lanes[slot];
    l->admit_seq = ++e->admit_no;
    if (e->has_drafter && e->drafter.reset) e->drafter.reset(e->drafter.ctx, slot);
}

void lanes_reap_cancelled(weft_engine *e, bool all, const char *why) {
    for (int i = 0; i < e->parallel; i++) {
        lane *l = &e->lanes[i];
        if (!l->req) continue;
        l->prefilled_now = false;
        if (all)
            lane_finish(e, i, WEFT_FINISH_CANCELLED, WEFT_ECANCELLED, why);
        else if (atomic_load(&l->req->cancel))
            lane_finish(e, i, WEFT_FINISH_CANCELLED, WEFT_ECANCELLED, "cancelled");
    }
}

static bool lane_before(const lane *a, const lane *b) {
    if (a->last_served != b->last_served) return a->last_served < b->last_served;
    return a->admit_seq < b->admit_seq;
}

/* Fills e->order with the admitted lanes, least recently served first. Returns their count. */
static int order_lanes(weft_engine *e) {
    int n = 0;
    for (int i = 0; i < e->parallel; i++) {
        if (!e->lanes[i].req) continue;
        int j = n++;
        while (j > 0 && lane_before(&e->lanes[i], &e->lanes[e->order[j - 1]])) {
            e->order[j] = e->order[j - 1];
            j--;
        }
        e->order[j] = i;
    }
    return n;
}

/* Asks the drafter for up to max_n tokens after the pending one and writes them into the stream's buffer
 * right after it. Returns how many are usable. */
static int propose_drafts(weft_engine *e, int slot, lane *l, int max_n) {
    weft_request_handle *r = l->req;
    int32_t *out = r->seq + l->cache_len + 1;
    int n = e->drafter.propose(e->drafter.ctx, slot, r->seq, l->cache_len + 1, r->n_prompt, out, max_n);
    if (n < 0) n = 0;
    if (n > max_n) n = max_n;
    for (int i = 0; i < n; i++)
        if (out[i] < 0 || out[i] >= e->be->vocab_size) return i;
    return n;
}

/* One stream's head drafts as a single `draft` call (no draft_many, or retrying a failed batch to find the
 * stream it failed for). A failing head is logged and not asked again for this stream. */
static void head_one(weft_engine *e, const weft_draft_req *q) {
    lane *l = &e->lanes[q->slot];
    weft_err err = {0};
    weft_status st =
        e->be->ops->draft(e->be->self, q->slot, q->seq, q->n_tokens, q->max_n, q->out, q->n_out, &err);
    if (st != WEFT_OK) {
        *q->n_out = 0;
        l->head_failed = true;
        fprintf(stderr, "weft: draft head failed for a stream (%s); it drafts without it\n", err.msg);
    }
}

/* The windows that wait for the backend's draft head (model drafts, SPEC §4.5 (b)): every such stream's
 * proposals come from one draft_many call when the backend has it (one head forward per chain step for all
 * of them), else one draft call each; the drafts are written right after the pending token. A stream the
 * head gave nothing gets the drafter's; then its segment gets its real row count. Drafts are proposals, so
 * the reply is the same whichever way they came. */
static void head_drafts(weft_engine *e, int nq) {
    const weft_backend_ops *ops = e->be->ops;
    if (nq > 1 && ops->draft_many) {
        weft_err err = {0};
        if (ops->draft_many(e->be->self, e->dreq, nq, &err) != WEFT_OK)
            for (int i = 0; i < nq; i++) head_one(e, &e->dreq[i]); /* names the stream that fails */
    } else {
        for (int i = 0; i < nq; i++) head_one(e, &e->dreq[i]);
    }
    for (int i = 0; i < nq; i++) {
        const weft_draft_req *q = &e->dreq[i];
        lane *l = &e->lanes[q->slot];
        int n = l->head_n < q->max_n ? l->head_n : q->max_n;
        for (int k = 0; k < n; k++)
            if (q->out[k] < 0 || q->out[k] >= e->be->vocab_size) n = k;
        if (n <= 0 && e->has_drafter) n = propose_drafts(e, q->slot, l, l->head_depth);
        l->n_draft = n > 0 ? n : 0;
        weft_segment *s = &e->segs[e->dseg[i]];
        s->n_rows = s->n_draw = l->seg_rows = 1 + l->n_draft;
    }
}

/* Plans this round's segments. Returns how many. A window that drafts from the head reserves 1 + depth rows
 * of the budget (its drafts come after the planning, all streams' at once); it may use fewer. */
static int plan_round(weft_engine *e) {
    int n = order_lanes(e), n_segs = 0, budget = e->max_rows, nq = 0;
    for (int k = 0; k < n && budget > 0; k++) {
        int slot = e->order[k];
        lane *l = &e->lanes[slot];
        weft_request_handle *r = l->req;
        weft_segment *s = &e->segs[n_segs++];
        s->slot = slot;
        s->start = l->cache_len;
        s->seq = r->seq;
        s->n_prompt = r->n_prompt;
        s->sampling = &r->sampling;
        s->draws = l->draws;
        s->logprobs = r->lp ? l->lp : NULL;
        l->n_draft = 0;
        l->head_depth = 0;
        if (l->n_gen == 0) {
            int left = r->n_prompt - l->cache_len;
            int rows = left < e->prefill_chunk ? left : e->prefill_chunk;
            if (rows > budget) rows = budget;
            rows = lanes_cache_cut(e, l, rows); /* end at the next prompt-cache save point */
            s->n_rows = rows;
            s->n_draw = rows == left ? 1 : 0;
        } else {
            /* A window may commit up to 1 + drafts tokens: never ask for more than max_tokens allows, so
             * every row and draw stays inside the request's buffer and the slot's capacity. */
            int max_n = e->max_draft;
            if (max_n > r->max_tokens - l->n_gen - 1) max_n = r->max_tokens - l->n_gen - 1;
            if (max_n > budget - 1) max_n = budget - 1;
            if ((e->has_drafter || e->max_model_draft > 0) && r->draft && max_n > 0) {
                int depth = lanes_depth_choose(&l->depth, max_n, e->row_cost);
                if (depth > 0 && e->max_model_draft > 0 && !l->head_failed) {
                    l->head_depth = l->n_draft = depth; /* reserved; head_drafts sets the real count */
                    l->head_n = 0;
                    e->dseg[nq] = n_segs - 1;
                    e->dreq[nq++] =
                        (weft_draft_req){.slot = slot,
                                         .seq = r->seq,
                                         .n_tokens = l->cache_len + 1,
                                         .max_n = depth < e->max_model_draft ? depth : e->max_model_draft,
                                         .out = r->seq + l->cache_len + 1,
                                         .n_out = &l->head_n};
                } else if (depth > 0 && e->has_drafter) {
                    l->n_draft = propose_drafts(e, slot, l, depth);
                }
            }
            s->n_rows = 1 + l->n_draft;
            s->n_draw = s->n_rows;
        }
        l->seg_rows = s->n_rows;
        l->last_served = e->round_no + 1;
        budget -= s->n_rows;
    }
    if (nq > 0) head_drafts(e, nq);
    return n_segs;
}

static bool is_eos(const weft_engine *e, int32_t t) {
    for (int i = 0; i < e->n_eos; i++)
        if (e->eos[i] == t) return true;
    return false;
}

/* Commits one drawn token. Returns true when the reply ends at it (l->done set with the reason). */
static bool commit_token(weft_engine *e, lane *l, int32_t t, const weft_logprobs *lp) {
    weft_request_handle *r = l->req;
    r->seq[r->n_prompt + l->n_gen] = t;
    if (r->lp && lp) r->lp[l->n_gen] = *lp;
    l->n_gen++;
    if (!r->ignore_eos && is_eos(e, t))
        l->reason = WEFT_FINISH_STOP;
    else if (r->stop && r->stop(r->stop_ctx, r->seq + r->n_prompt, l->n_gen))
        l->reason = WEFT_FINISH_STOP;
    else if (l->n_gen >= r->max_tokens)
        l->reason = WEFT_FINISH_LENGTH;
    else
        return false;
    l->done = true;
    l->status = WEFT_OK;
    l->message[0] = '\0';
    return true;
}

/* Accepts and commits one segment's draws after the forward. Returns the tokens committed; *kept gets the
 * draft rows kept. */
static int conclude(weft_engine *e, const weft_segment *s, int *kept) {
    lane *l = &e->lanes[s->slot];
    weft_request_handle *r = l->req;
    l->rounds++;
    *kept = 0;
    if (l->n_gen == 0) {
        l->cache_len += s->n_rows;
        if (s->n_draw == 0) return 0;
        l->prefilled_now = true;
        l->t_first = weft_now();
        commit_token(e, l, s->draws[0], s->logprobs ? &s->logprobs[0] : NULL);
        return 1;
    }
    /* Decode window: row 0 is the pending token, rows 1..n_draft the drafts; draw d is the target's token at
     * position cache_len + 1 + d. Draft d is kept iff it equals draw d and every draft before it was kept. */
    const int32_t *drafts = r->seq + l->cache_len + 1;
    int acc = 0;
    while (acc < l->n_draft && drafts[acc] == s->draws[acc]) acc++;
    int committed = 0;
    for (int d = 0; d <= acc; d++) {
        committed++;
        if (commit_token(e, l, s->draws[d], s->logprobs ? &s->logprobs[d] : NULL)) break;
    }
    l->drafted += l->n_draft;
    if (l->n_draft > 0) lanes_depth_observe(&l->depth, l->n_draft, acc, e->max_draft, e->row_cost);
    int kept_drafts = committed < acc ? committed : acc;
    l->accepted += kept_drafts;
    *kept = kept_drafts;
    /* Rows fed and kept: the pending token and the accepted drafts; the bonus draw is the new pending. */
    l->cache_len += 1 + acc;
    if (!l->done && acc < l->n_draft) {
        weft_err err = {0};
        weft_status st = e->be->ops->keep(e->be->self, s->slot, l->cache_len, &err);
        if (st != WEFT_OK) {
            l->done = true;
            l->reason = WEFT_FINISH_ERROR;
            l->status = st;
            snprintf(l->message, sizeof l->message, "backend keep failed: %.200s", err.msg);
        }
    }
    return committed;
}

int lanes_round(weft_engine *e) {
    int n_segs = plan_round(e);
    if (n_segs == 0) return lanes_active(e);
    e->round_no++;
    weft_err err = {0};
    weft_status st = e->be->ops->forward(e->be->self, e->segs, n_segs, &err);
    uint64_t prompt_rows = 0, gen = 0, drafted = 0, accepted = 0;
    for (int k = 0; k < n_segs; k++) {
        const weft_segment *s = &e->segs[k];
        lane *l = &e->lanes[s->slot];
        l->done = false;
        l->prefilled_now = false;
        if (st != WEFT_OK) {
            /* The forward failed: every stream in it has caches in an unknown state, so each ends with the
             * backend's words. Streams not in the call are untouched and go on. */
            l->done = true;
            l->reason = WEFT_FINISH_ERROR;
            l->status = st;
            snprintf(l->message, sizeof l->message, "backend forward failed: %.200s", err.msg);
            continue;
        }
        bool prefill = l->n_gen == 0;
        if (prefill) prompt_rows += (uint64_t)s->n_rows;
        int kept = 0;
        drafted += (uint64_t)l->n_draft;
        gen += (uint64_t)conclude(e, s, &kept);
        accepted += (uint64_t)kept;
        if (prefill) lanes_cache_after_prefill(e, s->slot);
        if (l->done && (l->reason == WEFT_FINISH_STOP || l->reason == WEFT_FINISH_LENGTH))
            lanes_cache_after_reply(e, s->slot);
    }
    pthread_mutex_lock(&e->mu);
    e->totals.rounds_total++;
    e->totals.prompt_tokens_total += prompt_rows;
    e->totals.generation_tokens_total += gen;
    e->totals.drafted_total += drafted;
    e->totals.accepted_total += accepted;
    pthread_mutex_unlock(&e->mu);
    for (int k = 0; k < n_segs; k++) {
        int slot = e->segs[k].slot;
        lane *l = &e->lanes[slot];
        if (l->done)
            lane_finish(e, slot, l->reason, l->status, l->message);
        else
            lanes_post_progress(l->req, l->prefilled_now, l->cached, l->n_gen);
    }
    return lanes_active(e);
}
