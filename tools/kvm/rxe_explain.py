#!/usr/bin/env python3
"""Whether resexd's own log accounts, exactly, for a short count in one run of tools/kvm/rxe.sh.

Two losses a count at 1 ms cannot close are accepted, and only as resexd reports them:
  - laps: the guest posted a whole ring's worth between two scans (a stalled host). resexd logs
    each (`lapped L time(s) between two scans; G requests were not counted`) and counts it as an
    overrun. The lap lines stamped within the run (after the last run's totals were read, before
    this run's) must number the run's new overruns (none thinned out of the log); their G are
    taken off the shortfall;
  - the tail: a request posted after the host's last read of its queue and freed with its
    process at exit. At most one per sending queue, and for each a queue whose last request read
    is one short of perftest's last (#1998 of #1999). A queue explains one run only (the runs are
    checked in order, each taking the earliest unused ones).
Whole messages only: bytes and packets short by exactly the missing requests' share.

Usage: rxe_explain.py LOG USED MARKS RUN SENDERS GOT WANT OVERRUNS
  GOT and WANT are "WQEs bytes packets"; USED is the file of queues already used (appended to).
Prints one line and exits 0 when the log accounts for the shortfall, else exits 1.
"""
import datetime
import os
import re
import sys

LAP = re.compile(r"(\S+Z)\s.*lapped \d+ time\(s\) between two scans; (\d+) requests")
LAST_READ = re.compile(r"qp (\d+)\b.*?last request read (?:on it was )?#(\d+)")


def marks_of(text):
    """Run number -> the host's time (epoch s) its totals were read ("mark T run N end")."""
    marks = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] == "mark":
            marks[int(f[3])] = float(f[1])
    return marks


def laps_in(log_lines, since, until):
    """(lap lines, requests they say were not counted) stamped in (since, until]."""
    laps = lapped = 0
    for line in log_lines:
        m = LAP.match(line)
        if m:
            t = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
            if since < t <= until:
                laps += 1
                lapped += int(m.group(2))
    return laps, lapped


def explain(log_text, used, marks, run, senders, got, want, overruns):
    """(the explanation, the queues it used) or (None, set()) when the log does not account."""
    short = want[0] - got[0]
    whole = all(want[i] - got[i] == short * want[i] // want[0] for i in (1, 2))
    if short <= 0 or not whole:
        return None, set()
    lines = log_text.splitlines()
    since, until = marks.get(run - 1, 0.0), marks.get(run, float("inf"))
    laps, lapped = laps_in(lines, since, until)
    if laps != overruns or lapped > short:
        return None, set()
    why = [f"{lapped} lost in {laps} lap(s) of a stalled host, counted as overruns"] if laps else []
    k = short - lapped
    if k == 0:
        return "; ".join(why), set()
    if k > senders:
        return None, set()
    last = want[0] // senders - 1  # perftest's last request on each queue, as numbered
    read = {}
    for line in lines:
        m = LAST_READ.search(line)
        if m:
            read[int(m.group(1))] = int(m.group(2))
    tail = sorted(qp for qp, n in read.items() if n == last - 1 and qp not in used)[:k]
    if len(tail) < k:
        return None, set()
    why.append(f"{k} posted after the host's last read and freed at perftest's exit ("
               + ", ".join(f"qp {qp} read to #{last - 1}" for qp in tail) + f" of #{last})")
    return "; ".join(why), set(tail)


def main(argv):
    log, used_path, marks_path = argv[1:4]
    run, senders = int(argv[4]), int(argv[5])
    got, want = ([int(x) for x in a.split()] for a in argv[6:8])
    overruns = int(argv[8])
    used = set()
    if os.path.exists(used_path):
        used = {int(x) for x in open(used_path).read().split()}
    why, tail = explain(open(log).read(), used, marks_of(open(marks_path).read()), run, senders,
                        got, want, overruns)
    if why is None:
        return 1
    with open(used_path, "a") as f:
        f.write("".join(f"{qp}\n" for qp in sorted(tail)))
    print(why)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
