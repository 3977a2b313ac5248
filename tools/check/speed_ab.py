#!/usr/bin/env python3
# Two builds timed on the same plans under the same conditions: this VM's speed drifts by a third
# over an hour, so a survey run today and one run yesterday do not compare; alternating the two
# binaries plan by plan does. Reads the plan list that speed_survey.py printed (its scenario
# files and networks), runs each plan through OLD and NEW alternately N times (fresh processes,
# as speed_survey.py does) and keeps the fastest of each; prints one line per plan, then the
# share under 50 ms, the median and the worst for both, by network and fault.
#
#   python3 tools/check/speed_ab.py OLD/scaleout NEW/scaleout SURVEY_OUTPUT N
#
# Each run's CPU time (user + system, from wait4) is kept beside its wall time, fastest of N too,
# and the summary prints both: a gap between them is time the process waited (for the CPU, for
# I/O). On this VM they moved together in session 16's runs: its noise slows the CPU itself, in
# bursts of seconds that alternation does not always cancel (one whole run had the newer build
# at 0.6x on plans it had not changed), so compare several runs, and instruction counts.
import os, re, subprocess, sys, time

old, new, listing, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = []
for line in open(listing):
    m = re.match(r'\s*([\d.]+) s\s+ranks \S+ events \S+\s+(.*?)\s+(/tmp/survey/\S+\.json)', line)
    if not m: continue
    desc, path = m.group(2), m.group(3)
    words = desc.split()
    net, fault = words[-2], words[-1]
    best = {old: float('inf'), new: float('inf')}
    cpu = {old: float('inf'), new: float('inf')}
    for _ in range(n):
        for b in (old, new):
            t0 = time.perf_counter()
            p = subprocess.Popen([b, 'run', path, '--format', 'json', '--set', 'simulation.network=' + net],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, _, use = os.wait4(p.pid, 0)
            best[b] = min(best[b], time.perf_counter() - t0)
            cpu[b] = min(cpu[b], use.ru_utime + use.ru_stime)
    rows.append((net + ', ' + fault, best[old], best[new], cpu[old], cpu[new]))
    print('%.3f -> %.3f s  x%.2f  (cpu %.3f -> %.3f s)  %s' % (best[old], best[new], best[old] / best[new], cpu[old], cpu[new], desc),
          flush=True)


def summary(name, rs):
    if not rs: return
    o, w = sorted(r[1] for r in rs), sorted(r[2] for r in rs)
    co, cw = sorted(r[3] for r in rs), sorted(r[4] for r in rs)
    print('%-22s %2d plans: under 50 ms %2d -> %2d, median %.3f -> %.3f s, worst %.2f -> %.2f s | cpu: under 50 ms %2d -> %2d, median %.3f -> %.3f s' %
          (name, len(rs), sum(t < 0.05 for t in o), sum(t < 0.05 for t in w), o[len(o) // 2], w[len(w) // 2], o[-1], w[-1],
           sum(t < 0.05 for t in co), sum(t < 0.05 for t in cw), co[len(co) // 2], cw[len(cw) // 2]))


summary('all', rows)
for c in sorted(set(r[0] for r in rows)): summary(c, [r for r in rows if r[0] == c])
