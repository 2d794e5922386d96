#!/usr/bin/env python3
"""Helper of tools/trace-freeze.sh (issue 30 item 2): a per-CPU wake-up probe and the analyser.

  trace-freeze.py probe --cpu N --policy other|fifo --out FILE [--period-ms 1] [--log-ms 10]
      Pinned to CPU N, sleeps PERIOD in a loop and logs every wake-up gap (CLOCK_MONOTONIC)
      of at least LOG ms as "cpu policy prev_ns now_ns gap_ms steal_ms=S" (S: the CPU's steal
      time in /proc/stat across the gap, read 20-70 ms after it). Its comm is fzprobe-<o|f><N>.
  trace-freeze.py analyse DIR [--min-ms 100] [--wait-ms 20]
      Reads DIR/probe-*.log, DIR/trace.txt (ftrace text, trace_clock mono), DIR/meta and
      DIR/threads-*.txt, and writes DIR/report.txt (also printed) and DIR/freeze-K.trace (freeze
      K's trace lines near its edges, and the runs and silences of 5 ms or more inside it).
      It also lists every wait to run of WAIT ms or more of the tasks named in meta's watch=
      (softhca, resexd-loop: their wake-ups are traced too), with what ran meanwhile.

The probes also keep every CPU's trace busy: each wakes every PERIOD, so a CPU that is running
at all logs a timer interrupt and a wake-up about every millisecond. A window with no event on
any CPU therefore means the virtual CPUs were not running guest code at all.

A freeze is a set of overlapping probe gaps; its verdict, for its longest gap:
  - no event on any CPU for half the gap or more: the VM was not run by the hypervisor;
  - no event on the gap's CPU for half of it while the others had events: that vCPU was not
    run (or its kernel had interrupts off, which the trace cannot tell apart);
  - the probe runnable, not running, for half of it: its CPU was busy (with the task named);
  - the probe asleep for half of it: its 1 ms timer fired late although the CPU had events.
Only windows (and watched tasks' waits) that every CPU's trace reaches back to are judged.
"""
import argparse, bisect, collections, glob, os, re, signal, sys, time


# ---------------------------------------------------------------- probe

def steal_ms(cpu):
    """This CPU's steal time from /proc/stat (what the hypervisor says it kept the vCPU from
    running), in ms; accounted at the CPU's next tick, in steps of 1/CLK_TCK s."""
    with open('/proc/stat') as f:
        for line in f:
            if line.startswith(f'cpu{cpu} '):
                return int(line.split()[8]) * 1000 // os.sysconf('SC_CLK_TCK')
    return 0


def probe(a):
    os.sched_setaffinity(0, {a.cpu})
    name = f"fzprobe-{a.policy[0]}{a.cpu}"
    with open('/proc/self/comm', 'w') as f:
        f.write(name)
    if a.policy == 'fifo':
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(a.prio))
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    out = open(a.out, 'w', buffering=1)
    out.write(f"# probe cpu={a.cpu} policy={a.policy} pid={os.getpid()} comm={name} "
              f"period_ms={a.period_ms}\n")
    period, min_ns, every = a.period_ms / 1e3, int(a.log_ms * 1e6), 50_000_000
    n, worst, prev = 0, 0, time.monotonic_ns()
    sampled, steal = prev, steal_ms(a.cpu)      # steal sampled every 50 ms
    pending = []                                 # gaps waiting for the steal after them
    while not stop:
        time.sleep(period)                       # clock_nanosleep(CLOCK_MONOTONIC)
        now = time.monotonic_ns()
        gap = now - prev
        if gap >= min_ns:
            pending.append((prev, now, steal))   # steal: sampled before the gap began
        if now - sampled >= every or stop:
            sampled, steal = now, steal_ms(a.cpu)
            # A gap's steal is accounted at the next tick: wait 20 ms before reading it.
            for g in [g for g in pending if now - g[1] >= 20_000_000 or stop]:
                out.write(f"{a.cpu} {a.policy} {g[0]} {g[1]} {(g[1] - g[0]) / 1e6:.3f} steal_ms={steal - g[2]}\n")
                pending.remove(g)
        n, worst, prev = n + 1, max(worst, gap), now
    for g in pending:
        out.write(f"{a.cpu} {a.policy} {g[0]} {g[1]} {(g[1] - g[0]) / 1e6:.3f} steal_ms={steal_ms(a.cpu) - g[2]}\n")
    out.write(f"# end wakeups={n} worst_ms={worst / 1e6:.3f}\n")


# ---------------------------------------------------------------- analyser

# "  comm-pid  [001] d..2. 1234.567890: sched_switch: prev_comm=..."; the comm may hold anything,
# so the line is anchored on the CPU field.
HEAD = re.compile(r' \[(\d+)\] \S+ +(\d+\.\d+): (\w+): ')
WAKE = re.compile(r'comm=(.*) pid=(\d+) prio=(\d+) target_cpu=(\d+)')
MARGIN = 0.002      # seconds of trace kept on each side of a freeze's edges in its excerpt
LONG = 0.005        # a run or a silence this long goes into the excerpt


class Gap:
    """One probe's wake-up gap [a, b] (seconds, CLOCK_MONOTONIC)."""
    def __init__(s, cpu, policy, a, b):
        s.cpu, s.policy, s.a, s.b = cpu, policy, a, b
        s.runnable = s.asleep = 0.0        # from the trace: the probe waited to run, or slept
        s.how = ''                         # how its longest wait to run began: preempted or woken

    ms = property(lambda s: (s.b - s.a) * 1e3)
    name = property(lambda s: f"{s.policy}{s.cpu}")


class Window:
    """A freeze: overlapping probe gaps; filled from the history when the trace passes its end."""
    def __init__(s, gaps, k, d):
        s.gaps, s.k, s.d = gaps, k, d
        s.a, s.b = min(g.a for g in gaps), max(g.b for g in gaps)
        s.excerpt = None

    def keep(s, line, ts, long):
        """Into the excerpt: everything near the edges, the long runs and silences inside."""
        if s.excerpt is None:
            s.excerpt = open(os.path.join(s.d, f'freeze-{s.k}.trace'), 'w')
        if ts <= s.a + MARGIN or ts >= s.b - MARGIN or long:
            s.excerpt.write(line)

    def close(s, hist):
        if s.excerpt:
            s.excerpt.close()
        n = len(hist.events)
        s.events = [hist.count(c, s.a, s.b) for c in range(n)]
        s.silence = [hist.silence([c], s.a, s.b) for c in range(n)]    # (length, start)
        s.gsilence = hist.silence(range(n), s.a, s.b)
        s.ran = [hist.ran(c, s.a, s.b) for c in range(n)]
        s.task_at = [hist.task_at(c, s.silence[c][1]) for c in range(n)]
        s.covered = all(hist.first[c] is not None and hist.first[c] <= s.a for c in range(n))


class History:
    """The last `keep` seconds of every CPU: event times and (switch time, task switched in)."""
    def __init__(s, ncpu, keep):
        s.keep, s.first = keep, [None] * ncpu
        s.events = [collections.deque() for _ in range(ncpu)]
        s.switches = [collections.deque() for _ in range(ncpu)]

    def event(s, cpu, ts):
        if s.first[cpu] is None:
            s.first[cpu] = ts
        e = s.events[cpu]
        e.append(ts)
        while e[0] < ts - s.keep:
            e.popleft()

    def switch(s, cpu, ts, task):
        w = s.switches[cpu]
        w.append((ts, task))
        while len(w) > 1 and w[1][0] < ts - s.keep:
            w.popleft()

    def count(s, cpu, a, b):
        e = s.events[cpu]
        return bisect.bisect_right(e, b) - bisect.bisect_left(e, a)

    def silence(s, cpus, a, b):
        """The longest time in [a, b] with no event on any of `cpus`: (length, start)."""
        ts = sorted(t for c in cpus for t in s.events[c] if a <= t <= b)
        edges = [a] + ts + [b]
        return max((y - x, x) for x, y in zip(edges, edges[1:]))

    def ran(s, cpu, a, b):
        """Seconds each task ran on `cpu` in [a, b] (None: the trace does not go back to a)."""
        if s.first[cpu] is None or s.first[cpu] > a:
            return None
        out, w = collections.Counter(), s.switches[cpu]
        end = b
        for ts, task in reversed(w):
            lo = max(ts, a)
            if end > lo:
                out[task] += end - lo
            if ts <= a:
                break
            end = min(end, ts)
        return out

    def task_at(s, cpu, t):
        for ts, task in reversed(s.switches[cpu]):
            if ts <= t:
                return task
        return None


def read_probes(d):
    gaps, probes = [], {}
    for path in sorted(glob.glob(os.path.join(d, 'probe-*.log'))):
        for line in open(path):
            if line.startswith('# probe'):
                kv = dict(x.split('=', 1) for x in line.split()[2:])
                probes[int(kv['pid'])] = (int(kv['cpu']), kv['policy'])
            elif not line.startswith('#'):
                f = line.split()
                g = Gap(int(f[0]), f[1], int(f[2]) / 1e9, int(f[3]) / 1e9)
                g.steal = int(f[5].split('=')[1]) if len(f) > 5 else None
                gaps.append(g)
    return gaps, probes


def read_threads(d, exe):
    """tid -> 'comm of pid PID (policy, nice)', from the ps snapshots, with the command line
    for the traced command's own processes (those running `exe`)."""
    names = {}
    for path in sorted(glob.glob(os.path.join(d, 'threads-*.txt'))):
        for line in open(path):
            f = line.split(None, 6)
            if len(f) == 7 and f[1].isdigit():
                args = f": {f[6].strip()[:100]}" if exe and f[6].startswith(exe) else ""
                names.setdefault(int(f[1]), f"{f[5]} of pid {f[0]} ({f[2]}, nice {f[3]}){args}")
    return names


class Scan:
    """One pass over the trace."""
    def __init__(s, d, wins, probes, watch, ncpu, keep, wait_ms):
        s.d, s.wins, s.probes, s.watch, s.ncpu = d, wins, probes, watch, ncpu
        s.hist = History(ncpu, keep)
        s.running, s.since = [None] * ncpu, [0.0] * ncpu
        s.woken = collections.defaultdict(list)       # probe pid -> wake-up times
        s.switched = collections.defaultdict(list)    # probe pid -> switch-in times
        s.pout = collections.defaultdict(list)        # probe pid -> (switch-out time, preempted)
        s.wstate = {}                                  # watched pid -> [out_ts, runnable_since, how, line]
        s.waits = collections.defaultdict(list)        # watched (comm, pid) -> [(wait, ts, cpu, how, ran)]
        s.sleeps = collections.defaultdict(list)       # watched (comm, pid) -> [(off-CPU, ts)]
        s.min_wait = wait_ms / 1e3
        s.sync, s.lost, s.nev, s.partial = None, [], 0, 0

    def run(s, path):
        active, wi, wins = [], 0, s.wins
        for line in open(path, errors='replace'):
            m = HEAD.search(line)
            if not m:
                if 'LOST' in line:
                    s.lost.append(line.strip())
                continue
            cpu, ts, ev = int(m.group(1)), float(m.group(2)), m.group(3)
            rest = line[m.end():]
            s.nev += 1
            e = s.hist.events[cpu]
            long = bool(e) and ts - e[-1] >= LONG
            s.hist.event(cpu, ts)
            while wi < len(wins) and wins[wi].a - MARGIN <= ts:
                active.append(wins[wi])
                wi += 1
            if ev == 'sched_switch':
                long |= ts - s.since[cpu] >= LONG
                s.switch(cpu, ts, rest, line)
            elif ev in ('sched_waking', 'sched_wakeup'):
                s.wake(ts, rest, line)
            elif ev == 'sched_migrate_task':
                s.migrate(rest)
            elif ev == 'tracing_mark_write' and rest.startswith('fzsync '):
                s.sync = ts - int(rest.split()[1]) / 1e9
            if active:
                for w in active:
                    w.keep(line, ts, long)
                for w in [w for w in active if ts > w.b + MARGIN]:
                    w.close(s.hist)
                    active.remove(w)
        for w in active + wins[wi:]:                   # the trace ended inside or before them
            w.close(s.hist)

    def switch(s, cpu, ts, rest, line):
        # "prev_comm=A prev_pid=1 prev_prio=120 prev_state=R ==> next_comm=B next_pid=2 next_prio=120"
        left, _, right = rest.rstrip('\n').partition(' ==> ')
        pcomm, ppid, _, pstate = left.rsplit(' ', 3)
        ncomm, npid, nprio = right.rsplit(' ', 2)
        prev, state = int(ppid[9:]), pstate[11:]
        task = (ncomm[10:], int(npid[9:]), int(nprio[10:]))
        s.running[cpu], s.since[cpu] = task, ts
        s.hist.switch(cpu, ts, task)
        if task[1] in s.probes:
            s.switched[task[1]].append(ts)
        if prev in s.probes:
            s.pout[prev].append((ts, state.startswith('R')))
        if pcomm[10:] in s.watch and prev:             # a watched task leaves the CPU
            preempted = state.startswith('R')
            s.wstate[prev] = [ts, ts if preempted else None, 'preempted' if preempted else 'woken', line, [cpu]]
        if task[0] in s.watch and task[1] in s.wstate:  # ... and comes back
            out, since, how, wline, queues = s.wstate.pop(task[1])
            key = (task[0], task[1])
            if not all(f is not None and f <= out for f in s.hist.first):
                s.partial += 1       # it may have run on a CPU whose trace begins later
                return
            if since is not None and ts - since >= s.min_wait:
                ran = {c: s.hist.ran(c, since, ts) for c in range(s.ncpu)}
                s.waits[key].append((ts - since, since, queues, how, ran, wline.strip(), line.strip()))
            elif since is None and ts - out >= s.min_wait:
                s.sleeps[key].append((ts - out, out))

    def wake(s, ts, rest, line):
        m = WAKE.match(rest)
        if not m:
            return
        pid = int(m.group(2))
        if pid in s.probes:
            s.woken[pid].append(ts)
        st = s.wstate.get(pid)
        if st and st[1] is None:
            st[1], st[3] = ts, line
            if int(m.group(4)) != st[4][-1]:
                st[4].append(int(m.group(4)))

    def migrate(s, rest):
        # "comm=softhca pid=12 prio=110 orig_cpu=1 dest_cpu=0"
        f = rest.split()
        pid, dest = int(f[-4][4:]), int(f[-1][9:])
        st = s.wstate.get(pid)
        if st and st[4][-1] != dest:
            st[4].append(dest)


def after(xs, t, until):
    """The first of the sorted timestamps xs in (t, until], or None."""
    i = bisect.bisect_right(xs, t)
    return xs[i] if i < len(xs) and xs[i] <= until else None


def top(counter, n=5):
    if counter is None:
        return "(not in the trace)"
    return ", ".join(f"{comm}/{pid} (prio {pr}) {t * 1e3:.1f}" for (comm, pid, pr), t in counter.most_common(n)) or "-"


def analyse(a):
    d = a.dir
    meta = dict(l.rstrip('\n').split('=', 1) for l in open(os.path.join(d, 'meta')) if '=' in l)
    t0, ncpu = int(meta['cmd_start_ns']) / 1e9, int(meta['ncpu'])
    watch = set(meta.get('watch', '').split())
    gaps, probes = read_probes(d)
    big = sorted((g for g in gaps if g.ms >= a.min_ms), key=lambda g: g.a)
    groups = []                      # overlapping gaps: one freeze seen by several probes
    for g in big:
        if groups and g.a <= max(x.b for x in groups[-1]):
            groups[-1].append(g)
        else:
            groups.append([g])
    wins = [Window(g, k, d) for k, g in enumerate(groups, 1)]
    keep = max([3.0] + [w.b - w.a + 1 for w in wins])
    for f in glob.glob(os.path.join(d, 'freeze-*.trace')):
        os.remove(f)
    sc = Scan(d, wins, probes, watch, ncpu, keep, a.wait_ms)
    sc.run(os.path.join(d, 'trace.txt'))
    pid_of = {v: k for k, v in probes.items()}
    for g in big:                    # how each probe spent its gap: asleep, or waiting to run
        pid = pid_of.get((g.cpu, g.policy))
        woken, switched, outs = sc.woken.get(pid, []), sc.switched.get(pid, []), sc.pout.get(pid, [])
        longest = 0.0
        for t, preempted in outs[bisect.bisect_left(outs, (g.a, False)):bisect.bisect_right(outs, (g.b, True))]:
            ready = t if preempted else after(woken, t, g.b)
            back = after(switched, t, g.b + MARGIN) if ready else None
            if ready is None or back is None:
                continue
            g.asleep += ready - t
            g.runnable += back - ready
            if back - ready > longest:
                longest, g.how = back - ready, 'preempted' if preempted else 'woken'

    out, named = [], set()
    p = out.append
    p(f"command: {meta.get('cmd', '?')}")
    p(f"command ran {(int(meta['cmd_end_ns']) - int(meta['cmd_start_ns'])) / 1e9:.1f} s, rc {meta.get('cmd_rc', '?')}; "
      f"trace: {sc.nev} events, trace_clock {meta.get('trace_clock', '?')}, trace minus probe clock "
      + (f"{sc.sync * 1e6:.0f} us" if sc.sync is not None else "unknown (marker not in the trace)"))
    first = sc.hist.first
    p("trace covers: " + ", ".join(f"cpu{c} from {first[c] - t0:+.2f} s" if first[c] else f"cpu{c} nothing"
                                   for c in range(ncpu)) + (f"; LOST events: {sc.lost}" if sc.lost else "; nothing lost"))
    for k in ('steal', 'psi_cpu'):
        if k in meta:
            p(f"{k}: {meta[k]}")
    worst = collections.defaultdict(float)
    for g in gaps:
        worst[g.name] = max(worst[g.name], g.ms)
    p("probes' worst gap (fifo: SCHED_FIFO 90, other: nice 0): "
      + ", ".join(f"{n} {ms:.1f} ms" for n, ms in sorted(worst.items()))
      + f"; gaps >= {a.min_ms:g} ms: {len(big)} in {len(wins)} freeze(s)")

    # The watched tasks (softhca, the daemon's loop): every wait to run of wait_ms or more.
    if sc.partial:
        p(f"watched tasks: {sc.partial} times off a CPU before every CPU's trace begins: not counted")
    for (comm, pid), ws in sorted(sc.waits.items()):
        named.add(pid)
        sl = sc.sleeps.get((comm, pid), [])
        p(f"\n== {comm}/{pid}: {len(ws)} waits to run >= {a.wait_ms:g} ms (longest {max(w[0] for w in ws) * 1e3:.1f} ms, "
          f"{sum(w[0] for w in ws):.2f} s in all); {len(sl)} sleeps >= {a.wait_ms:g} ms"
          + (f" (longest {max(x[0] for x in sl) * 1e3:.1f} ms)" if sl else ""))
        for wait, since, queues, how, ran, l1, l2 in sorted(ws, reverse=True)[:5]:
            q = " -> ".join(f"cpu{c}" for c in queues)
            p(f"  +{since - t0:.3f} s: runnable {wait * 1e3:.1f} ms ({how}), queued on {q}; meanwhile")
            for c in range(ncpu):
                p(f"    cpu{c} ran (ms): {top(ran[c])}")
                named.update(pid for (_, pid, _), _ in (ran[c] or collections.Counter()).most_common(2))
            p(f"    | {l1}\n    | {l2}")
    for (comm, pid), sl in sorted(sc.sleeps.items()):
        if (comm, pid) not in sc.waits:
            p(f"\n== {comm}/{pid}: no wait to run >= {a.wait_ms:g} ms; {len(sl)} sleeps >= {a.wait_ms:g} ms")

    verdicts = []
    for w in wins:
        span = (w.b - w.a) * 1e3
        p(f"\n== freeze {w.k}: +{w.a - t0:.3f} s .. +{w.b - t0:.3f} s ({span:.0f} ms)")
        for g in w.gaps[:8]:
            p(f"  probe {g.name}: gap {g.ms:.1f} ms from +{g.a - t0:.3f} s: asleep {g.asleep * 1e3:.1f} ms, "
              f"runnable {g.runnable * 1e3:.1f} ms" + (f" (longest wait after being {g.how})" if g.how else "")
              + (f"; steal on cpu{g.cpu} across it {g.steal} ms" if g.steal is not None else ""))
        if len(w.gaps) > 8:
            p(f"  ... and {len(w.gaps) - 8} more gaps")
        p(f"  no event on any CPU for {w.gsilence[0] * 1e3:.1f} ms (from +{w.gsilence[1] - t0:.3f} s)")
        for c in range(ncpu):
            p(f"  cpu{c}: {w.events[c]} events, longest silence {w.silence[c][0] * 1e3:.1f} ms "
              f"(from +{w.silence[c][1] - t0:.3f} s); ran (ms): {top(w.ran[c])}")
            named.update(pid for (_, pid, _), _ in (w.ran[c] or collections.Counter()).most_common(2))
        v = verdict(w, ncpu) if w.covered else "not covered by the trace (buffer overwritten; use a larger -b)"
        verdicts.append(f"freeze {w.k} at +{w.a - t0:.2f} s, {span:.0f} ms: {v}")
    p("\n== verdicts (a freeze is a probe's wake-up gap; fifo probes see only what stops real-time tasks)")
    out += verdicts or [f"no freeze: no probe gap of {a.min_ms:g} ms or more"]
    names = read_threads(d, meta.get('cmd', '').split(' ')[0])
    known = [f"  {pid}: {names[pid]}" for pid in sorted(named) if pid in names]
    if known:
        p("\n== threads named above (from the ps snapshots)")
        out += known
    text = "\n".join(out) + "\n"
    open(os.path.join(d, 'report.txt'), 'w').write(text)
    sys.stdout.write(text)


def verdict(w, ncpu):
    """One line: the whole VM stopped, one vCPU stopped, or the probe waited behind tasks."""
    g = max(w.gaps, key=lambda g: g.ms)
    span = (w.b - w.a) * 1e3
    gs = w.gsilence[0] * 1e3
    steal = {x.cpu: x.steal for x in w.gaps if x.steal is not None}
    said = "; steal across it: " + ", ".join(f"cpu{k} {v} ms" for k, v in sorted(steal.items())) if steal else ""
    if gs >= 0.5 * g.ms:
        return (f"VM not scheduled by the hypervisor (no event on any CPU for {gs:.0f} ms; "
                f"the probe {g.name} was stopped {g.ms:.0f} ms{said})")
    c = g.cpu
    cs = w.silence[c][0] * 1e3
    if cs >= 0.5 * g.ms:
        others = ", ".join(f"cpu{k} had {w.events[k]} events" for k in range(ncpu) if k != c)
        task = w.task_at[c]
        return (f"vCPU {c} silent for {cs:.0f} ms while {others}: that vCPU not run by the "
                f"hypervisor, or its kernel had interrupts off"
                + (f" (it was running {task[0]}/{task[1]})" if task else "") + said)
    t = w.ran[c].most_common(1)
    busy = f"{t[0][0][0]} ({t[0][0][1]}, prio {t[0][0][2]}) for {t[0][1] * 1e3:.0f} ms of the {span:.0f} ms" if t else "?"
    if g.runnable * 1e3 >= 0.5 * g.ms:
        return f"CPU {c} busy with {busy} (probe {g.name} runnable, not run, for {g.runnable * 1e3:.0f} ms)"
    if g.asleep * 1e3 >= 0.5 * g.ms:
        return (f"the probe {g.name} slept {g.asleep * 1e3:.0f} ms for a 1 ms timer on CPU {c}, "
                f"which had events (longest silence {cs:.0f} ms); it ran {busy}")
    return "unexplained by the trace (see the per-CPU table)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest='cmd', required=True)
    pr = sub.add_parser('probe')
    pr.add_argument('--cpu', type=int, required=True)
    pr.add_argument('--policy', choices=('other', 'fifo'), default='other')
    pr.add_argument('--prio', type=int, default=90, help='SCHED_FIFO priority (fifo policy)')
    pr.add_argument('--period-ms', type=float, default=1.0)
    pr.add_argument('--log-ms', type=float, default=10.0)
    pr.add_argument('--out', required=True)
    an = sub.add_parser('analyse')
    an.add_argument('dir')
    an.add_argument('--min-ms', type=float, default=100.0, help='probe gaps reported')
    an.add_argument('--wait-ms', type=float, default=20.0, help="watched tasks' waits reported")
    a = ap.parse_args()
    probe(a) if a.cmd == 'probe' else analyse(a)


if __name__ == '__main__':
    main()
