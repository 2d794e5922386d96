#!/usr/bin/env bash
# trace-freeze.sh: explain the host freezes of `resex demo` with ftrace (issue 30 item 2).
#
# Starts two wake-up probes per CPU (pinned python processes sleeping 1 ms in a loop: one at
# SCHED_OTHER nice 0, one at SCHED_FIFO 90), records scheduler and interrupt events in a private
# ftrace instance while a command runs, then tools/trace-freeze.py finds every probe gap of
# 100 ms or more and says, for each, what the trace shows: no event on any CPU (the VM was not
# running), one silent vCPU, or a CPU busy with a named task while the probe waited. It also
# lists every wait to run of 20 ms or more of the watched tasks (softhca, the daemon's loop).
set -euo pipefail

usage() {
  cat <<EOF
usage: $0 [-o DIR] [-b KB] [-t MS] [-w COMMS] [-h] [-- COMMAND [ARGS...]]

Traces the scheduler while COMMAND runs and explains every wake-up gap of the probes.
  -o DIR   output directory (default \${TMPDIR:-/tmp}/resex-freeze-DATE); it gets probe-*.log,
           trace.txt.gz, command.out, meta, threads-*.txt (ps), report.txt and
           freeze-K.trace (one per freeze)
  -b KB    ftrace buffer per CPU in KiB (default 786432 = 768 MiB: a 40 s demo on 2 CPUs
           wrote up to 5.8 million events, 350 MiB, on one CPU; report.txt says if the
           trace does not reach back far enough)
  -t MS    report gaps of at least MS milliseconds (default 100)
  -w COMMS task names whose waits to run are reported too (default "softhca resexd-loop")
  -h       this help
COMMAND defaults to: target/release/resex demo --headless --duration 40 (of this checkout)

Needs root (tracefs, SCHED_FIFO) and a kernel with tracefs and the sched events. It uses its own
ftrace instance (instances/trace-freeze-PID), removed on exit or Ctrl-C; the global trace
settings are left as they were.
EOF
}

die() { echo "trace-freeze: $*" >&2; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
out=${TMPDIR:-/tmp}/resex-freeze-$(date +%Y%m%d-%H%M%S)
buf_kb=786432
min_ms=100
watch="softhca resexd-loop"
while getopts "o:b:t:w:h" opt; do
  case $opt in
    o) out=$OPTARG ;;
    b) buf_kb=$OPTARG ;;
    t) min_ms=$OPTARG ;;
    w) watch=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
cmd=("$@")
[[ ${#cmd[@]} -gt 0 ]] || cmd=("$here/../target/release/resex" demo --headless --duration 40)

[[ $EUID -eq 0 ]] || die "needs root (tracefs and SCHED_FIFO)"
command -v python3 >/dev/null || die "needs python3"
T=/sys/kernel/tracing
if [[ ! -e $T/tracing_on ]]; then
  mount -t tracefs nodev "$T" 2>/dev/null \
    || die "tracefs missing at $T and 'mount -t tracefs nodev $T' failed (kernel without CONFIG_FTRACE?)"
fi
[[ -d $T/events/sched/sched_switch ]] || die "no sched:sched_switch event in $T/events"
grep -qw mono "$T/trace_clock" || die "trace_clock has no 'mono' (CLOCK_MONOTONIC) option: $(cat "$T/trace_clock")"
mkdir -p "$out"

inst=$T/instances/trace-freeze-$$
probes=()
cmd_pid=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # Our own children only: the command's process group (it runs under setsid) and the probes.
  if [[ -n $cmd_pid ]] && kill -0 "$cmd_pid" 2>/dev/null; then
    kill -TERM -- "-$cmd_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$cmd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$cmd_pid" 2>/dev/null || true
  fi
  for p in "${probes[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -d $inst ]]; then              # tracing off, events off, then the instance goes
    echo 0 > "$inst/tracing_on" || true
    echo 0 > "$inst/events/enable" || true
    rmdir "$inst" 2>/dev/null || echo "trace-freeze: could not remove $inst" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. A private ftrace instance: its own buffer, clock and events.
mkdir "$inst"
echo 0 > "$inst/tracing_on"
echo "$buf_kb" > "$inst/buffer_size_kb" || die "cannot allocate $buf_kb KiB per CPU (try a smaller -b)"
echo mono > "$inst/trace_clock"            # CLOCK_MONOTONIC, the probes' clock
events=(sched/sched_switch sched/sched_waking sched/sched_wakeup sched/sched_migrate_task
        irq_vectors/local_timer_entry irq/irq_handler_entry irq/softirq_entry)
for e in "${events[@]}"; do
  if [[ -d $inst/events/$e ]]; then
    echo 1 > "$inst/events/$e/enable"
  else
    echo "trace-freeze: no event $e, going on without it" >&2
  fi
done
# Wake-ups and migrations of the probes and the watched tasks only (the switches show every task).
filter='comm ~ "fzprobe*"'
for w in $watch; do filter+=" || comm == \"$w\""; done
for e in sched_waking sched_wakeup sched_migrate_task; do
  echo "$filter" > "$inst/events/sched/$e/filter" || die "bad filter $filter"
done
echo > "$inst/trace"

# 2. Pressure and steal before; the probes (two per CPU).
ncpu=$(nproc)
{ echo "== before"; cat /proc/pressure/cpu; grep '^cpu' /proc/stat; } > "$out/pressure-steal.txt"
steal0=$(awk '/^cpu /{print $9}' /proc/stat)
psi0=$(sed -n 's/^some .*total=//p' /proc/pressure/cpu)
echo 1 > "$inst/tracing_on"
for ((c = 0; c < ncpu; c++)); do
  for pol in other fifo; do
    python3 "$here/trace-freeze.py" probe --cpu "$c" --policy "$pol" --out "$out/probe-$pol$c.log" &
    probes+=($!)
  done
done
sleep 0.5
# A marker with the probes' clock: the analyser checks that the trace's clock is the same.
python3 -c 'import sys, time; f = open(sys.argv[1], "w"); f.write("fzsync %d" % time.monotonic_ns()); f.flush()' \
  "$inst/trace_marker"

# 3. The command, in its own process group so that cleanup can stop all of it; two ps snapshots
#    to name its threads.
echo "trace-freeze: running ${cmd[*]} (output in $out/command.out)" >&2
start_ns=$(python3 -c 'import time; print(time.monotonic_ns())')
t_start=$SECONDS
setsid "${cmd[@]}" > "$out/command.out" 2>&1 &
cmd_pid=$!
# (command lines only of the command's own processes: others may hold anything)
threads() {
  ps -eLo pid,tid,cls,ni,rtprio,comm,args \
    | awk -v exe="${cmd[0]}" 'index($7, exe) != 1 { $7 = "-"; NF = 7 } { print }' > "$out/threads-$1.txt"
}
( trap 'kill ${s:-} 2>/dev/null; exit' TERM
  sleep 3 & s=$!; wait $s; threads 3s; sleep 15 & s=$!; wait $s; threads 18s ) &
probes+=($!)
cmd_rc=0
wait "$cmd_pid" || cmd_rc=$?
cmd_pid=
end_ns=$(python3 -c 'import time; print(time.monotonic_ns())')
sleep 0.5
echo 0 > "$inst/tracing_on"
for p in "${probes[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
wait "${probes[@]}" 2>/dev/null || true
probes=()

# 4. Pressure and steal after; the trace and its per-CPU statistics (overruns = lost events).
{ echo "== after"; cat /proc/pressure/cpu; grep '^cpu' /proc/stat; } >> "$out/pressure-steal.txt"
steal1=$(awk '/^cpu /{print $9}' /proc/stat)
psi1=$(sed -n 's/^some .*total=//p' /proc/pressure/cpu)
for ((c = 0; c < ncpu; c++)); do
  { echo "== cpu$c"; cat "$inst/per_cpu/cpu$c/stats"; } >> "$out/ftrace-stats.txt"
done
cat "$inst/trace" > "$out/trace.txt"
{
  echo "cmd=${cmd[*]}"
  echo "cmd_rc=$cmd_rc"
  echo "cmd_start_ns=$start_ns"
  echo "cmd_end_ns=$end_ns"
  echo "ncpu=$ncpu"
  echo "trace_clock=mono"
  echo "buffer_size_kb=$buf_kb"
  echo "watch=$watch"
  echo "steal=$((steal1 - steal0)) ticks of $(getconf CLK_TCK)/s over all CPUs"
  echo "psi_cpu=some total grew $(((psi1 - psi0) / 1000)) ms"
} > "$out/meta"
echo 0 > "$inst/events/enable"
rmdir "$inst" && inst=                     # frees the buffer before the analysis

# 5. The analysis, then the full trace compressed.
python3 "$here/trace-freeze.py" analyse "$out" --min-ms "$min_ms"
gzip -1 -f "$out/trace.txt"
echo "trace-freeze: $((SECONDS - t_start)) s; command rc $cmd_rc; report in $out/report.txt" >&2
