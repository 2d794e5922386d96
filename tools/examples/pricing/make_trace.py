#!/usr/bin/env python3
"""Writes trace.csv: the paper's pair on one host, as resexd's journal would record it.

vm64k (the reporting VM, 64 KiB buffers) runs throughout: 20% CPU, 64 MTUs per 1 ms interval,
a latency report every 10 intervals (10 us mean, 1 us stddev on a quiet link). vm2m (2 MiB
buffers) arrives at interval 300 and leaves after interval 899: 100% CPU, 600 MTUs per
interval; while it runs, vm64k reports 15 us mean, 1.5 us stddev. Deterministic: no randomness.
"""
rows = ["interval,vm,vcpus,cpu_pct,mtus,bytes,lat_count,lat_mean_ns,lat_stddev_ns,lat_p99_ns"]
for i in range(1200):
    busy = 300 <= i < 900
    lat = ""
    if i % 10 == 9:
        mean, sd = (15000, 1500) if busy else (10000, 1000)
        lat = f"90,{mean},{sd},{mean * 2}"
    else:
        lat = ",,,"
    rows.append(f"{i},vm64k,1,20,64,{64 * 1024},{lat}")
    if busy:
        rows.append(f"{i},vm2m,1,100,600,{600 * 1024},,,,")
open("trace.csv", "w").write("\n".join(rows) + "\n")
