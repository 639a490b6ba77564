/* depth.c — how many draft rows a stream asks for (SPEC §4.5: draft depth adapts to measured acceptance; a
 * stream whose drafts do not pay runs plain rounds). After the reference design (reference-server.md §2.3):
 *
 * - `rate` is an EMA (weight 0.15) of whether a draft position was kept, given that the ones before it were:
 *   a window of n drafts with k kept gives k "kept" observations and, when k < n, one "rejected".
 * - With acceptance a, a window of d drafts is expected to commit E(d) = 1 + a + a^2 + ... + a^d tokens and
 *   to cost 1 + c·d one-row rounds (c = the engine's draft_row_cost). The depth maximising E(d)/cost(d) is
 *   chosen; depth 0 (a plain round) scores 1.05, so drafting has to win by 5% to go on.
 * - When no depth pays, the stream runs plain rounds, then probes PROBE_DEPTH drafts; the wait doubles from
 *   8 to 128 rounds while probes keep failing and resets once drafting pays again.
 * Drafts never change a reply (rounds.c keeps only drafts equal to the target's draws), so this rule only
 * moves speed. It is a function of the stream's own history, so replies stay deterministic whatever runs
 * beside them. */
#include "lanes_internal.h"

#define DEPTH_PRIOR    0.8  /* acceptance assumed before the first window */
#define DEPTH_EMA      0.15 /* weight of one observation */
#define DEPTH_GUARD    1.05 /* score of a plain round */
#define PLAIN_WAIT_MIN 8
#define PLAIN_WAIT_MAX 128
#define PROBE_DEPTH    2

void lanes_depth_init(lane_depth *d) {
    d->rate = DEPTH_PRIOR;
    d->plain_left = 0;
    d->wait = PLAIN_WAIT_MIN;
    d->probing = false;
}

/* The depth in 0..max_n with the most expected tokens per unit of cost. */
static int best_depth(double a, int max_n, double c) {
    double best = DEPTH_GUARD, e = 1.0, term = 1.0;
    int best_d = 0;
    for (int d = 1; d <= max_n; d++) {
        term *= a;
        e += term;
        double score = e / (1.0 + c * d);
        if (score > best) {
            best = score;
            best_d = d;
        }
    }
    return best_d;
}

int lanes_depth_choose(lane_depth *d, int max_n, double row_cost) {
    if (max_n < 1) return 0;
    if (d->plain_left > 0) {
        d->plain_left--;
        return 0;
    }
    if (d->probing) return max_n < PROBE_DEPTH ? max_n : PROBE_DEPTH;
    return best_depth(d->rate, max_n, row_cost);
}

void lanes_depth_observe(lane_depth *d, int n_draft, int n_accepted, int max_draft, double row_cost) {
    if (n_draft < 1) return;
    for (int i = 0; i < n_accepted; i++) d->rate += DEPTH_EMA * (1.0 - d->rate);
    if (n_accepted < n_draft) d->rate -= DEPTH_EMA * d->rate;
    if (best_depth(d->rate, max_draft, row_cost) > 0) {
        d->probing = false;
        d->wait = PLAIN_WAIT_MIN;
        return;
    }
    /* Drafts do not pay: plain rounds, then a probe; each failed probe doubles the wait. */
    d->plain_left = d->wait;
    d->wait = d->wait * 2 > PLAIN_WAIT_MAX ? PLAIN_WAIT_MAX : d->wait * 2;
    d->probing = true;
}
