#!/usr/bin/env python3
"""Count test cases across the passes of scripts/test.sh.

Test binaries print TAP ("ok N - name", "not ok N - name"); meson keeps each
binary's stdout in meson-logs/testlog*.json. This script turns those logs
into case counts, one pass at a time, and keeps a running tally in a state
file (JSON lines) so the final line can cover every pass:

  count_tap.py --state F --label gcc --log build-ci/meson-logs/testlog.json
  count_tap.py --state F --label clang --step "clang --werror build" --ok
  count_tap.py --state F --label asan --step "configure + build" --failed
  count_tap.py --state F --label abi --tap build-ci-logs/abi.log --exit 0
  count_tap.py --state F --final      # table per pass, then "N passed, N failed"

--tap counts the TAP a script printed (scripts/abi.sh, deb.sh, ...) as one
binary whose exit status was --exit.

Rules for a binary:
  - every "ok" case counts as passed, every "not ok" as failed;
    "# SKIP" cases count as skipped, "not ok ... # TODO" as neither;
  - cases the plan ("1..N") promised but that never printed count as failed
    (the binary crashed or was killed part-way);
  - "Bail out!" counts as one failure;
  - a binary that meson marks FAIL/TIMEOUT/ERROR although all its printed
    cases passed adds one failure of its own (e.g. it hung after the last
    case, or a sanitizer report made it exit non-zero), so it cannot vanish;
  - a binary that printed no TAP at all counts as one case: passed if meson
    says OK, skipped if SKIP, failed otherwise.
"""
import argparse
import json
import re
import sys

CASE_RE = re.compile(r'^(not ok|ok)\b\s*(\d+)?\s*(?:-\s*)?([^#]*)(?:#\s*(.*))?$')
PLAN_RE = re.compile(r'^1\.\.(\d+)')
BAD_RESULTS = {'FAIL', 'TIMEOUT', 'ERROR', 'UNEXPECTEDPASS'}


def parse_tap(text):
    """Return (passed, failed, skipped, todo, failed_names, plan, bailed)."""
    passed = failed = skipped = todo = 0
    failed_names = []
    plan = None
    bailed = False
    after_failure = 0  # diagnostic lines kept since the last failed case
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith('#'):
            # diagnostics right after a failed case explain it
            if after_failure:
                if after_failure <= 8:
                    failed_names.append('  ' + line)
                elif after_failure == 9:
                    failed_names.append('  # ... (more in meson-logs/testlog.txt)')
                after_failure += 1
            continue
        after_failure = 0
        m = PLAN_RE.match(line)
        if m:
            plan = int(m.group(1))
            continue
        if line.startswith('Bail out!'):
            bailed = True
            failed_names.append(line)
            continue
        m = CASE_RE.match(line)
        if not m:
            continue
        directive = (m.group(4) or '').strip().upper()
        name = m.group(3).strip() or ('#' + (m.group(2) or '?'))
        if directive.startswith('SKIP'):
            skipped += 1
        elif m.group(1) == 'ok':
            passed += 1
        elif directive.startswith('TODO'):
            todo += 1
        else:
            failed += 1
            failed_names.append('not ok: ' + name)
            after_failure = 1
    return passed, failed, skipped, todo, failed_names, plan, bailed


def count_binary(entry):
    """Counts for one testlog.json entry: dict with passed/failed/skipped/notes."""
    result = entry.get('result', 'ERROR')
    out = entry.get('stdout') or ''
    passed, failed, skipped, todo, names, plan, bailed = parse_tap(out)
    notes = list(names)
    seen = passed + failed + skipped + todo
    has_tap = plan is not None or seen > 0 or bailed
    if result == 'SKIP' and seen == 0:
        return dict(passed=0, failed=0, skipped=1, notes=['skipped'])
    if not has_tap:
        if result in ('OK', 'EXPECTEDFAIL'):
            return dict(passed=1, failed=0, skipped=0, notes=[])
        return dict(passed=0, failed=1, skipped=0,
                    notes=['%s without any TAP output' % result])
    # Cases that were planned but never reported: the binary died part-way.
    if plan is not None and seen < plan:
        missing = plan - seen
        failed += missing
        notes.append('%d planned case(s) never ran (%s)' % (missing, result))
    if bailed:
        failed += 1
    if result in BAD_RESULTS and failed == 0:
        failed += 1
        notes.append('binary result %s although its cases passed' % result)
    return dict(passed=passed, failed=failed, skipped=skipped, notes=notes)


def load_log(path):
    entries = []
    with open(path, encoding='utf-8', errors='replace') as f:
        for line in f:
            line = line.strip()
            if line:
                entries.append(json.loads(line))
    return entries


def record(state, row):
    with open(state, 'a', encoding='utf-8') as f:
        f.write(json.dumps(row) + '\n')


def do_log(args):
    try:
        entries = load_log(args.log)
    except (OSError, ValueError) as e:
        row = dict(label=args.label, what='test log', passed=0, failed=1, skipped=0,
                   notes=['cannot read %s: %s' % (args.log, e)])
        record(args.state, row)
        print('  [%s] FAILED: no usable test log (%s)' % (args.label, e))
        return
    total = dict(passed=0, failed=0, skipped=0)
    print('  [%s] per test binary:' % args.label)
    for e in entries:
        c = count_binary(e)
        for k in total:
            total[k] += c[k]
        print_binary(e, c)
    if not entries:
        total['failed'] += 1
        print('    (no tests ran)')
    record(args.state, dict(label=args.label, what='tests', notes=[], **total))
    print('  [%s] %d passed, %d failed, %d skipped'
          % (args.label, total['passed'], total['failed'], total['skipped']))


def print_binary(entry, c):
    print('    %-28s %-8s %4d passed %4d failed %4d skipped  %6.1fs'
          % (entry.get('name', '?'), entry.get('result', '?'), c['passed'], c['failed'],
             c['skipped'], entry.get('duration', 0.0)))
    for n in c['notes']:
        if n != 'skipped':
            print('        - %s' % n)


def do_tap(args):
    try:
        with open(args.tap, encoding='utf-8', errors='replace') as f:
            text = f.read()
    except OSError as e:
        text = 'Bail out! cannot read %s: %s' % (args.tap, e)
    entry = dict(name=args.label, stdout=text,
                 result='OK' if args.exit == 0 else 'FAIL')
    c = count_binary(entry)
    print_binary(entry, c)
    record(args.state, dict(label=args.label, what='tests', notes=[],
                            **{k: c[k] for k in ('passed', 'failed', 'skipped')}))


def do_step(args):
    ok = args.ok
    row = dict(label=args.label, what=args.step, passed=1 if ok else 0,
               failed=0 if ok else 1, skipped=0, notes=[])
    record(args.state, row)
    print('  [%s] %s: %s' % (args.label, args.step, 'ok' if ok else 'FAILED'))


def do_final(args):
    rows = []
    try:
        with open(args.state, encoding='utf-8') as f:
            rows = [json.loads(l) for l in f if l.strip()]
    except OSError:
        pass
    passed = sum(r['passed'] for r in rows)
    failed = sum(r['failed'] for r in rows)
    skipped = sum(r['skipped'] for r in rows)
    if not rows:
        failed = 1
    print('Summary:')
    for r in rows:
        print('  %-10s %-24s %4d passed %4d failed %4d skipped'
              % (r['label'], r['what'], r['passed'], r['failed'], r['skipped']))
    if skipped:
        print('  (%d skipped)' % skipped)
    print('%d passed, %d failed' % (passed, failed))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--state', required=True, help='tally file (JSON lines)')
    ap.add_argument('--label', help='pass name (gcc, asan, valgrind, clang)')
    ap.add_argument('--log', help='meson testlog.json to count')
    ap.add_argument('--step', help='a build step to record as one case')
    ap.add_argument('--tap', help="a script's TAP output to count")
    ap.add_argument('--exit', type=int, default=0, help="that script's exit status")
    g = ap.add_mutually_exclusive_group()
    g.add_argument('--ok', action='store_true')
    g.add_argument('--failed', action='store_true')
    ap.add_argument('--final', action='store_true', help='print the totals')
    args = ap.parse_args()
    if args.final:
        return do_final(args)
    if not args.label:
        ap.error('--label is required')
    if args.log:
        do_log(args)
    elif args.tap:
        do_tap(args)
    elif args.step:
        if not (args.ok or args.failed):
            ap.error('--step needs --ok or --failed')
        do_step(args)
    else:
        ap.error('one of --log, --tap, --step, --final')
    return 0


if __name__ == '__main__':
    sys.exit(main())
