#!/usr/bin/env python3
"""Check one partition-harness run: read every process's event log and the
runner's fault log (all lines "<unix us> <process> <event> <fields...>",
written by test/partition/driver.c and scripts/partition.sh) and report:

  no_overlap    no two holders whose holds overlap in time
  fence_guards  no overlap in which both holders' writes passed the fence
                (each had a fenced write accepted during its hold; the
                summary also counts the pairs where both were accepted
                inside the overlap itself)
  fence_order   the fenced file accepted tokens in non-decreasing order
  no_lost       every acknowledged push was delivered
  no_dup        no message was delivered more than once
  regrant_1s    after each heal, each client that was cut off (all clients
                when none was) is granted within 1 s
  stall_3s      the permit never went ungranted for more than 3 s while
                someone wanted it
  clean_exit    every client that started logged its exit, and no client's
                output (--output FILE, its stdout and stderr) holds a
                sanitizer's or valgrind's report

  check.py [--scenario NAME] [--assert P,P,...] [--tap-first N]
           [--output FILE]... LOG...

Prints a summary; with --tap-first, one TAP case per property numbered from
N ("# TODO not yet asserted" on those not in --assert). Exits 1 if an
asserted property fails.
"""
import argparse
import collections
import re
import sys

PROPS = ['no_overlap', 'fence_guards', 'fence_order', 'no_lost', 'no_dup', 'regrant_1s',
         'stall_3s', 'clean_exit']
# What ASan, LSan, UBSan and valgrind print when they find something.
REPORT = re.compile(r'ERROR: (Address|Leak)Sanitizer|runtime error:|'
                    r'==\d+== (Invalid|Conditional jump|Use of uninitialised)|'
                    r'ERROR SUMMARY: [1-9]')
REGRANT_US = 1_000_000
STALL_US = 3_000_000


def read_events(paths):
    events = []
    for path in paths:
        with open(path, errors='replace') as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[0].isdigit():
                    events.append((int(parts[0]), parts[1], parts[2], parts[3:]))
    events.sort(key=lambda e: e[0])
    return events


class Hold:
    def __init__(self, proc, pid, token, start, left_ms):
        self.proc, self.id, self.token, self.start = proc, pid, token, start
        self.left_ms = left_ms  # lease left when granted (None: not logged)
        self.end = None
        self.accepted = []  # times of this holder's accepted fenced writes


def holds_of(events):
    """Each grant until its release or lost callback (or the process's end)."""
    holds, open_by_id, last_seen = [], {}, {}
    for t, proc, ev, f in events:
        last_seen[proc] = t
        if ev == 'grant':
            h = Hold(proc, f[0], int(f[1]), t, int(f[2]) if len(f) > 2 else None)
            holds.append(h)
            open_by_id[f[0]] = h
        elif ev in ('release', 'lost') and f and f[0] in open_by_id:
            open_by_id.pop(f[0]).end = t
        elif ev == 'fence' and len(f) >= 3 and f[2] == 'accepted' and f[0] in open_by_id:
            open_by_id[f[0]].accepted.append(t)
    for h in open_by_id.values():
        h.end = last_seen[h.proc]
    return holds


def overlaps(holds):
    """(pairs overlapping, pairs where both holders' writes passed the
    fence, pairs where both passed while both held)."""
    pairs = both = inside = 0
    by_start = sorted(holds, key=lambda h: h.start)
    for i, a in enumerate(by_start):
        for b in by_start[i + 1:]:
            if b.start >= a.end:
                break
            if a.proc == b.proc:
                continue
            lo, hi = b.start, min(a.end, b.end)
            if hi <= lo:
                continue
            pairs += 1
            both += bool(a.accepted and b.accepted)
            if any(lo <= w <= hi for w in a.accepted) and any(lo <= w <= hi for w in b.accepted):
                inside += 1
    return pairs, both, inside


def fence_out_of_order(events):
    bad, top = 0, 0
    for _, _, ev, f in events:
        if ev == 'fence' and len(f) >= 3 and f[2] == 'accepted':
            token = int(f[1])
            bad += token < top
            top = max(top, token)
    return bad


def queue_figures(events):
    acked, deliveries = set(), collections.Counter()
    for _, _, ev, f in events:
        if ev == 'push_ok':
            acked.add(f[0])
        elif ev == 'deliver':
            deliveries[f[0]] += 1
    lost = sorted(acked - set(deliveries))
    dups = sum(n - 1 for n in deliveries.values() if n > 1)
    return len(acked), sum(deliveries.values()), lost, dups


def longest_stall(events, holds):
    """Longest time with no holder while some acquire was pending, from the
    first grant on; (length us, when it started)."""
    changes = []
    for h in holds:
        changes += [(h.start, 'hold', 1), (h.end, 'hold', -1)]
    pending = collections.Counter()
    for t, proc, ev, _ in events:
        if ev == 'want':
            pending[proc] = 1
            changes.append((t, 'want', (proc, 1)))
        elif ev in ('grant', 'acq_fail', 'exit', 'stop'):
            changes.append((t, 'want', (proc, 0)))
    changes.sort(key=lambda c: c[0])
    held, wanting, since, worst, worst_at, started = 0, {}, None, 0, None, False
    for t, kind, v in changes:
        if kind == 'hold':
            held += v
            started = True
        else:
            wanting[v[0]] = v[1]
        stalled = started and held == 0 and any(wanting.values())
        if stalled and since is None:
            since = t
        elif not stalled and since is not None:
            if t - since > worst:
                worst, worst_at = t - since, since
            since = None
    return worst, worst_at


def regrants(events, holds):
    """Per heal: {client: µs from the heal to its first grant (None: none)}."""
    clients = sorted({h.proc for h in holds} | {p for _, p, ev, _ in events if ev == 'want'})
    out, cut = [], []
    for t, proc, ev, f in events:
        if proc != 'runner':
            continue
        if ev == 'cut':
            cut = [n for n in f[0].split(',') if n in clients]
        elif ev == 'heal':
            who = cut or clients
            firsts = {}
            for c in who:
                later = [h.start for h in holds if h.proc == c and h.start >= t]
                firsts[c] = min(later) - t if later else None
            anyone = [h.start for h in holds if h.start >= t]
            out.append((t, firsts, min(anyone) - t if anyone else None))
            cut = []
    return out


def exits(events, outputs):
    """(clients that started but logged no exit, outputs with a report)."""
    started = {p for _, p, ev, _ in events if ev == 'start'}
    ended = {p for _, p, ev, _ in events if ev == 'exit'}
    reported = []
    for path in outputs:
        with open(path, errors='replace') as f:
            if any(REPORT.search(line) for line in f):
                reported.append(path)
    return sorted(started - ended), reported


def ms(us):
    return 'none' if us is None else '%.0f ms' % (us / 1000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--scenario', default='run')
    ap.add_argument('--assert', dest='asserted', default='')
    ap.add_argument('--tap-first', type=int)
    ap.add_argument('--output', action='append', default=[])
    ap.add_argument('logs', nargs='+')
    args = ap.parse_args()
    asserted = [p for p in args.asserted.split(',') if p]
    unknown = [p for p in asserted if p not in PROPS]
    if unknown:
        sys.exit('check.py: unknown property: ' + ', '.join(unknown))

    events = read_events(args.logs)
    holds = holds_of(events)
    pairs, both, inside = overlaps(holds)
    disorder = fence_out_of_order(events)
    npushed, ndelivered, lost, dups = queue_figures(events)
    stall, stall_at = longest_stall(events, holds)
    heals = regrants(events, holds)
    unended, reported = exits(events, args.output)
    t0 = events[0][0] if events else 0
    refused = sum(1 for e in events if e[2] == 'fence' and len(e[3]) >= 3 and e[3][2] == 'refused')
    lost_cbs = sum(1 for e in events if e[2] == 'lost')
    late = sum(1 for h in holds if h.left_ms == 0)
    worst_regrant = 0
    for _, firsts, _ in heals:
        for v in firsts.values():
            worst_regrant = max(worst_regrant, v if v is not None else float('inf'))

    s = args.scenario
    print('# %s: %d grants (%d answered with no lease left), %d lost callbacks, '
          '%d fenced writes refused' % (s, len(holds), late, lost_cbs, refused))
    print('# %s: %d overlapping holds, %d with both writes past the fence (%d both inside '
          'the overlap), %d fenced writes accepted out of order' %
          (s, pairs, both, inside, disorder))
    print('# %s: %d pushes acknowledged, %d deliveries, %d lost, %d duplicates' %
          (s, npushed, ndelivered, len(lost), dups))
    if lost:
        print('# %s: lost (first): %s' % (s, ' '.join(lost[:5])))
    for t, firsts, anyone in heals:
        print('# %s: heal at +%.1f s: first grant %s after (anyone); %s' %
              (s, (t - t0) / 1e6, ms(anyone),
               ', '.join('%s %s' % (c, ms(v)) for c, v in sorted(firsts.items()))))
    print('# %s: longest ungranted while wanted: %s%s' %
          (s, ms(stall), ' at +%.1f s' % ((stall_at - t0) / 1e6) if stall_at else ''))
    for path in reported:
        print('# %s: a report in %s' % (s, path))

    results = {
        'no_overlap': (pairs == 0, '%d overlapping holds' % pairs),
        'fence_guards': (both == 0, '%d overlaps with both writes past the fence' % both),
        'fence_order': (disorder == 0, '%d fenced writes accepted out of order' % disorder),
        'no_lost': (not lost and npushed > 0,
                    '%d of %d acknowledged pushes lost' % (len(lost), npushed)),
        'no_dup': (dups == 0, '%d duplicate deliveries' % dups),
        'regrant_1s': (bool(heals) and worst_regrant <= REGRANT_US,
                       'slowest first grant after a heal: %s' %
                       ms(worst_regrant if worst_regrant != float('inf') else None)),
        'stall_3s': (stall <= STALL_US and bool(holds),
                     'longest ungranted while wanted: %s' % ms(stall)),
        'clean_exit': (not unended and not reported,
                       '%d clients without an exit (%s), %d outputs with a report' %
                       (len(unended), ' '.join(unended) or 'none', len(reported))),
    }
    failed = False
    if args.tap_first is not None:
        for i, p in enumerate(PROPS):
            ok, figure = results[p]
            line = '%s %d - %s %s: %s' % ('ok' if ok else 'not ok', args.tap_first + i, s, p,
                                          figure)
            if p not in asserted:
                line += ' # TODO not yet asserted'
            print(line)
    for p in asserted:
        failed |= not results[p][0]
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
