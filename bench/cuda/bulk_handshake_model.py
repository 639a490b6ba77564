#!/usr/bin/env python3
# Exhaustive interleaving check of the wgmma GEMM's bulk-copy handshake (src/backend/cuda/gemm_q4w.cu:
# w_producer_bulk and the consumers' mbarrier wait / EMPTY arrive; written for session 18's review, c899728): producer warpgroup (bar.sync EMPTY+st with 128 threads, then thread 0: mbarrier.arrive.expect_tx +
# cp.async.bulk), two consumer warpgroups (try_wait.parity (i/NS)&1 on full[st], wgmma reads of stage st
# until wgmma.wait_group 0, then bar.arrive EMPTY+st with 256 threads when i + NS < nblk). Bulk copies land
# asynchronously, in any order. Named barriers: count 384 = P(128) + C0(128) + C1(128).
import sys
from functools import lru_cache
sys.setrecursionlimit(100000)

def check(nblk, NS, bulk_consumer_arrive_cond=lambda i, NS, n: i + NS < n, prod_sync_cond=lambda i, NS: i >= NS):
    # state: (pp, pphase, c0, c1, mbar, stage, inflight, nb)
    #  pp: producer's i; pphase: 0 = before sync, 1 = synced (may issue)  ; producer done when pp == nblk
    #  c = (i, phase): 0 = wait, 1 = reading, 2 = arrive/next
    #  mbar: tuple per stage (completed, pending_arrivals, tx)
    #  stage: tuple per stage: block id landed, or -1 (empty), or -2 (being written)
    #  inflight: frozenset of (stage, block)
    #  nb: per stage named barrier EMPTY+st: frozenset of units arrived in current generation
    errors = []
    seen = set()
    init = (0, 0, (0, 0), (0, 0), tuple((0, 1, 0) for _ in range(NS)), tuple(-1 for _ in range(NS)), frozenset(),
            tuple(frozenset() for _ in range(NS)))
    stack = [init]
    terminal_ok = 0
    while stack:
        s = stack.pop()
        if s in seen: continue
        seen.add(s)
        pp, pph, c0, c1, mbar, stage, inflight, nb = s
        succ = []
        # producer
        if pp < nblk:
            st = pp % NS
            if pph == 0:
                if prod_sync_cond(pp, NS):
                    if 'P' in nb[st]: errors.append(('double P arrival', s))
                    arrived = nb[st] | {'P'}
                    if len(arrived) == 3:  # generation completes: producer passes
                        nb2 = list(nb); nb2[st] = frozenset(); succ.append((pp, 1, c0, c1, mbar, stage, inflight, tuple(nb2)))
                    else:
                        # producer blocked in bar.sync: model as arrived-and-waiting (pph = 0.5)
                        nb2 = list(nb); nb2[st] = arrived; succ.append((pp, 0.5, c0, c1, mbar, stage, inflight, tuple(nb2)))
                else:
                    succ.append((pp, 1, c0, c1, mbar, stage, inflight, nb))
            elif pph == 0.5:
                pass  # released by consumers' arrival (below)
            elif pph == 1:
                # readers still on this stage?
                for ci, c in ((0, c0), (1, c1)):
                    if c[1] == 1 and c[0] % NS == st:
                        errors.append(('copy issued over a stage being read', s))
                comp, pend, tx = mbar[st]
                if pend != 1 or tx != 0: errors.append(('expect_tx on a barrier mid-phase', s))
                m2 = list(mbar); m2[st] = (comp, 0, tx + 1)
                sg = list(stage); sg[st] = -2
                succ.append((pp + 1, 0, c0, c1, tuple(m2), tuple(sg), inflight | {(st, pp)}, nb))
        # copy completions
        for (st, blk) in inflight:
            comp, pend, tx = mbar[st]
            tx -= 1
            if pend == 0 and tx == 0: comp, pend = comp + 1, 1
            m2 = list(mbar); m2[st] = (comp, pend, tx)
            sg = list(stage); sg[st] = blk
            succ.append((pp, pph, c0, c1, tuple(m2), tuple(sg), inflight - {(st, blk)}, nb))
        # consumers
        for ci in (0, 1):
            c = (c0, c1)[ci]
            i, ph = c
            if i >= nblk: continue
            st = i % NS
            def put(newc, mbar=mbar, stage=stage, nb=nb, pph=pph):
                cs = [c0, c1]; cs[ci] = newc
                return (pp, pph, cs[0], cs[1], mbar, stage, inflight, nb)
            if ph == 0:
                comp = mbar[st][0]
                P = (i // NS) & 1
                if comp % 2 != P:  # try_wait.parity succeeds
                    if stage[st] != i: errors.append(('consumer passed wait but stage holds %s not block %d' % (stage[st], i), s))
                    succ.append(put((i, 1)))
            elif ph == 1:
                if stage[st] != i: errors.append(('stage changed under read', s))
                succ.append(put((i, 2)))
            elif ph == 2:
                if bulk_consumer_arrive_cond(i, NS, nblk):
                    u = 'C%d' % ci
                    if u in nb[st]: errors.append(('double consumer arrival', s))
                    arrived = nb[st] | {u}
                    nb2 = list(nb)
                    npph = pph
                    if len(arrived) == 3:
                        nb2[st] = frozenset()
                        # the producer was waiting at bar.sync of this stage
                        assert pph == 0.5 and pp % NS == st, s
                        npph = 1
                    else:
                        nb2[st] = arrived
                    succ.append(put((i + 1, 0), nb=tuple(nb2), pph=npph))
                else:
                    succ.append(put((i + 1, 0)))
        if not succ:
            done = pp == nblk and c0[0] == nblk and c1[0] == nblk
            if not done: errors.append(('DEADLOCK', s))
            else:
                terminal_ok += 1
                if inflight: errors.append(('copies in flight at exit', s))
                if any(nb): errors.append(('named barrier left with arrivals at exit', s))
        stack.extend(succ)
        if len(errors) > 5: break
    return len(seen), terminal_ok, errors

ok = True
for NS in (2, 3, 4, 6):  # 2 / 3: the bulk copies; 4 / 6: deeper rings (session 18's, removed in session 20)
    for nblk in range(0, 9):
        n, t, e = check(nblk, NS)
        print('NS=%d nblk=%d states=%d terminal=%d errors=%d' % (NS, nblk, n, t, len(e)))
        if e: ok = False; print('  ', e[:2])
# mutations (the checker must catch them)
print('mutation: consumers arrive on every block')
n, t, e = check(5, 3, bulk_consumer_arrive_cond=lambda i, NS, n: True); print('  errors', len(e), e[:1] and e[0][0])
print('mutation: producer skips EMPTY sync')
n, t, e = check(5, 3, prod_sync_cond=lambda i, NS: False); print('  errors', len(e), e[:1] and e[0][0])
print('ALL OK' if ok else 'FAIL')
