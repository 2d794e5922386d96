#!/usr/bin/env python3
"""Daemon cost at scale: runs the embedded host with N guests (each a BenchEx server answering
its clients at RATE orders/s with BUFFER-byte replies) and a separate resexd under a policy,
then reports resexd's CPU use and its control loop's tick lateness.

    tools/bench/daemon_scale.py [--guests 2,8,32] [--seconds 10] [--bin target/release]

Build first: cargo build --release. Needs /dev/shm and, for cgroup caps, root."""
import argparse, json, os, shutil, signal, socket, subprocess, sys, tempfile, time

def scenario(n, rate, buffer):
    out = ['name = "scale-%d"' % n, 'duration_s = 3600.0']
    for i in range(n):
        out += ['[[guest]]', 'name = "g%02d"' % i, 'ram = "16MiB"',
                '[guest.benchex]', 'buffer = %d' % buffer, 'rate = %s' % rate,
                # Dozens of guests share this host's CPUs: sleep-poll, not busy-poll.
                'polling = "adaptive"']
    return "\n".join(out) + "\n"

def status(sock):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(b'{"cmd":"status"}\n')
    data = b""
    while not data.endswith(b"\n"):
        data += s.recv(1 << 20)
    s.close()
    return json.loads(data)

def cpu_ticks(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])  # utime + stime, clock ticks

def host_died(host, host_log, logs):
    host_log.seek(0)
    print("the embedded host exited with status %s:\n%s" % (host.returncode, host_log.read()[-2000:]), file=sys.stderr)
    time.sleep(1)
    for f in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
        tail = open(os.path.join(logs, f)).read()[-600:]
        if "ERROR" in tail or "rror" in tail:
            print("--- %s:\n%s" % (f, tail), file=sys.stderr)
    raise SystemExit(1)

def run(n, seconds, bins, rate, buffer, policy):
    d = tempfile.mkdtemp(prefix="resex-scale-")
    sc = os.path.join(d, "s.toml")
    open(sc, "w").write(scenario(n, rate, buffer))
    run_dir = os.path.join(d, "run")
    api = os.path.join(d, "api.sock")
    logs = os.path.join(d, "logs")
    host_log = open(os.path.join(d, "host.log"), "w+")
    host = subprocess.Popen([os.path.join(bins, "resex"), "host", "--scenario", sc, "--run-dir", run_dir,
                             "--keep-logs", logs], stdout=host_log, stderr=subprocess.STDOUT)
    err = open(os.path.join(d, "resexd.log"), "w+")
    daemon = subprocess.Popen([os.path.join(bins, "resexd"), "--run-dir", run_dir, "--state-dir",
                               os.path.join(d, "state"), "--api", api, "--policy", policy],
                              stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.time() + 180
        while True:
            time.sleep(0.5)
            if host.poll() is not None:
                host_died(host, host_log, logs)
            try:
                st = status(api)
            except OSError:
                continue
            reg = [v for v in st["vms"] if v["state"] == "registered" and v["qps"] >= 2]
            if len(reg) == n:
                break
            if time.time() > deadline:
                raise SystemExit("only %d of %d guests registered in 180 s" % (len(reg), n))
        hz = os.sysconf("SC_CLK_TCK")
        t0, c0 = time.time(), cpu_ticks(daemon.pid)
        time.sleep(seconds)
        if host.poll() is not None:
            host_died(host, host_log, logs)
        t1, c1 = time.time(), cpu_ticks(daemon.pid)
        st = status(api)
        mtus = sum(v["mtus_per_s"] for v in st["vms"])
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
        err.seek(0)
        log = err.read()
        line = [l for l in log.splitlines() if "lateness" in l]
        return {
            "guests": n,
            "daemon_cpu_pct": 100.0 * (c1 - c0) / hz / (t1 - t0),
            "mtus_per_s": mtus,
            "scan_us_per_tick": st["host"]["scan_us"],
            "late_last_s_us": [st["host"]["tick_late_p50_us"], st["host"]["tick_late_p99_us"], st["host"]["tick_late_max_us"]],
            "run_summary": line[-1].split("stopped after", 1)[-1].strip() if line else "",
        }
    finally:
        for p in (daemon, host):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(d, ignore_errors=True)

def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--guests", default="2,8,32")
    a.add_argument("--seconds", type=float, default=10)
    a.add_argument("--rate", default="100.0")
    a.add_argument("--buffer", type=int, default=16384)
    a.add_argument("--bin", default="target/release")
    a.add_argument("--policy", default="policies/ioshares.toml")
    o = a.parse_args()
    print("guests  daemon CPU %  MTU/s total  scan us/tick  run: ticks, lateness p50/p99/max")
    for n in [int(x) for x in o.guests.split(",")]:
        r = run(n, o.seconds, o.bin, o.rate, o.buffer, o.policy)
        print("%6d  %11.1f  %11.0f  %12.1f  %s" % (r["guests"], r["daemon_cpu_pct"], r["mtus_per_s"],
                                                  r["scan_us_per_tick"], r["run_summary"]), flush=True)

if __name__ == "__main__":
    main()
