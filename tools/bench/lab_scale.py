#!/usr/bin/env python3
"""The lab at scale: wall time and peak memory of `resex lab run` on N generated guests.

Usage: tools/bench/lab_scale.py [--guests 1024] [--duration 10] [--resex target/release/resex]

Generates tools/scenarios/scale/gen.py's scenario for N guests (into a temporary file), runs it
in virtual time, and prints the virtual seconds, the wall seconds, the peak resident memory of
the run, orders answered and the link's utilisation. Build first: cargo build --release.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--guests", type=int, default=1024)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--resex", default=os.path.join(ROOT, "target/release/resex"))
    a = ap.parse_args()
    if not os.access(a.resex, os.X_OK):
        sys.exit(f"{a.resex} not found: run `cargo build --release` first")
    gen = os.path.join(ROOT, "tools/scenarios/scale/gen.py")
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(subprocess.run([sys.executable, gen, str(a.guests)], check=True,
                               capture_output=True, text=True).stdout)
        path = f.name
    try:
        t0 = time.monotonic()
        p = subprocess.run([a.resex, "lab", "run", path, "--duration", str(a.duration), "--json"],
                           cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - t0
    finally:
        os.unlink(path)
    if p.returncode != 0:
        sys.exit(f"resex lab run failed:\n{p.stderr}")
    r = json.loads(p.stdout)
    rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    orders = sum(v["requests"] for v in r["vms"])
    print(f"guests {a.guests}  virtual {a.duration} s  wall {wall:.1f} s  "
          f"({wall / a.duration:.2f} s per virtual s)  peak RSS {rss_mib:.0f} MiB  "
          f"orders {orders}  link {r['host']['link_util'] * 100:.0f}%")


if __name__ == "__main__":
    main()
