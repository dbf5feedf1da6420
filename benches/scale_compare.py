#!/usr/bin/env python3
"""Cost at scale, greenweave against Go goroutines side by side in one run: the "Cost at scale"
section of BENCHMARKS.md.

    python3 benches/scale_compare.py                 # 100,000 x5, 1,000,000 x3, yield table x5
    python3 benches/scale_compare.py --quick         # 10,000 x3 and a short yield table
    python3 benches/scale_compare.py --compact       # greenweave's runs with --compact too

Builds examples/parked_memory and examples/yield_table in release and, when `go` is on the
PATH (Debian: apt-get install golang-go), benches/go/scale.go into target/scale_go. Then, for
each count, runs greenweave and Go alternately (so drift does not favour one side) and prints
every run and a markdown table of the medians:

- spawn and park N: time from the first spawn until all N have parked, per green thread
  (greenweave: parked_memory's "ns per green thread"; Go: N goroutines blocking on one channel,
  GOMAXPROCS=1, the same single OS thread as one greenweave runtime);
- resident memory per parked green thread: VmRSS added while all N are parked, per one;
- yield round trip among 10 / 32 / 33 / 1,024 / 1,025 / 100,000 runnable green threads (1,024
  and 1,025 straddle the scheduler's prefetch threshold, 32 and 33 its old one): ns per yield
  (greenweave: yield_table; Go: runtime.Gosched).

With `--compact`, greenweave's spawn-and-park runs pass `--compact` to parked_memory (its
runtime compacts green threads parked for 1 s, and they wait in `thread::park()`), and the
table gains the resident memory per green thread once all are compacted (the spawn+park and
parked columns then come from that variant too). Each such run waits
for every green thread to be compacted: at 1,000,000 that takes minutes (the sweep compacts 256
green threads at a time and visits every task each time).

Without `go` the Go columns say "no go" and the script still runs greenweave's side.
The examples are run from `$CARGO_TARGET_DIR` when it is set, else from `target/`.
Times on a shared machine drift; compare the columns of one run, not runs of different days.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))


def run(cmd, env=None):
    merged = dict(os.environ)
    merged.update(env or {})
    out = subprocess.run(cmd, cwd=ROOT, env=merged, check=True, capture_output=True, text=True)
    return out.stdout


def build(go):
    subprocess.run(
        ["cargo", "build", "--quiet", "--release", "--example", "parked_memory", "--example",
         "yield_table"], cwd=ROOT, check=True)
    if not go:
        return None
    out_dir = os.path.join(ROOT, "target", "scale_go")
    os.makedirs(out_dir, exist_ok=True)
    binary = os.path.join(out_dir, "scale")
    env = {"GOCACHE": os.path.join(out_dir, "cache"), "GO111MODULE": "off"}
    subprocess.run([go, "build", "-o", binary, "benches/go/scale.go"], cwd=ROOT, check=True,
                   env={**os.environ, **env})
    return binary


def ours_spawn_park(count, compact):
    """ns per spawn and park, VmRSS per parked green thread, and with `compact` VmRSS per
    green thread once all are compacted (else None)."""
    args = [os.path.join(TARGET, "release/examples/parked_memory"), "--count", str(count)]
    text = run(args + (["--compact"] if compact else []))
    ns = float(re.search(r"\(([\d.]+) ns per green thread\)", text).group(1))
    rss = float(re.search(r"VmRSS:.*?\+[\d.]+ MiB, (\d+) bytes", text).group(1))
    compacted = None
    if compact:
        compacted = float(re.search(r"VmRSS:.*compacted: \d+ -> (\d+) bytes", text).group(1))
    return ns, rss, compacted


def go_spawn_park(binary, count):
    text = run([binary, "spawn-park", str(count)], env={"GOMAXPROCS": "1"})
    ns = float(re.search(r"ns_per_spawn_park=([\d.]+)", text).group(1))
    rss = float(re.search(r"rss_per_parked=([\d.]+)", text).group(1))
    return ns, rss


def ours_yield(count, yields):
    args = [os.path.join(TARGET, "release/examples/yield_table"), "--counts", str(count),
            "--yields", str(yields), "--repeat", "1"]
    text = run(args)
    return float(re.search(r"^\| \d+ \| ([\d.]+) \|", text, re.M).group(1))


def go_yield(binary, count, yields):
    rounds = max(1, yields // count)
    text = run([binary, "yield", str(count), str(rounds)], env={"GOMAXPROCS": "1"})
    return float(re.search(r"ns_per_yield=([\d.]+)", text).group(1))


def median(values):
    return statistics.median(values) if values else float("nan")


def fmt(value, digits=0):
    return "no go" if value is None else f"{value:,.{digits}f}"


def ratio(ours, theirs):
    return "-" if theirs is None else f"{ours / theirs:.2f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for a look")
    parser.add_argument("--compact", action="store_true",
                        help="run parked_memory with --compact: memory once compacted too")
    args = parser.parse_args()

    go = shutil.which("go")
    if not go:
        print("scale_compare: `go` not found (apt-get install golang-go): Go columns skipped",
              file=sys.stderr)
    binary = build(go)
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f} at the start")

    if args.quick:
        spawn_counts = [(10_000, 3)]
        yield_counts, yields, yield_repeats = [10, 32, 33, 1_024, 1_025, 10_000], 200_000, 3
    else:
        spawn_counts = [(100_000, 5), (1_000_000, 3)]
        yield_counts, yields, yield_repeats = [10, 32, 33, 1_024, 1_025, 100_000], 2_000_000, 5

    spawn_rows = []
    for count, repeats in spawn_counts:
        ours, theirs = [], []
        for _ in range(repeats):
            ours.append(ours_spawn_park(count, args.compact))
            print(f"spawn-park {count}: greenweave {ours[-1][0]:.0f} ns, {ours[-1][1]:.0f} B"
                  + (f", {ours[-1][2]:.0f} B compacted" if args.compact else ""))
            if binary:
                theirs.append(go_spawn_park(binary, count))
                print(f"spawn-park {count}: go         {theirs[-1][0]:.0f} ns, "
                      f"{theirs[-1][1]:.0f} B")
        spawn_rows.append((count, repeats, ours, theirs))

    yield_rows = []
    for count in yield_counts:
        ours, theirs = [], []
        for _ in range(yield_repeats):
            ours.append(ours_yield(count, yields))
            if binary:
                theirs.append(go_yield(binary, count, yields))
            print(f"yield {count}: greenweave {ours[-1]:.1f} ns"
                  + (f", go {theirs[-1]:.1f} ns" if binary else ""))
        yield_rows.append((count, ours, theirs))

    load = os.getloadavg()
    print(f"\nload average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end\n")
    compacted_header = (" RSS per parked, greenweave compacted | ratio to Go |"
                        if args.compact else "")
    print("| green threads | runs | spawn+park, greenweave | spawn+park, Go | ratio "
          "| RSS per parked, greenweave | RSS per parked, Go | ratio |" + compacted_header)
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if args.compact else ""))
    for count, repeats, ours, theirs in spawn_rows:
        ns = median([o[0] for o in ours])
        rss = median([o[1] for o in ours])
        go_ns = median([t[0] for t in theirs]) if theirs else None
        go_rss = median([t[1] for t in theirs]) if theirs else None
        compacted_cells = ""
        if args.compact:
            compacted = median([o[2] for o in ours])
            compacted_cells = f" {compacted:,.0f} B | {ratio(compacted, go_rss)} |"
        print(f"| {count:,} | {repeats} | {ns:,.0f} ns | {fmt(go_ns)} ns | {ratio(ns, go_ns)} "
              f"| {rss:,.0f} B | {fmt(go_rss)} B | {ratio(rss, go_rss)} |" + compacted_cells)
    print()
    print("| runnable | ns per yield, greenweave | Go (Gosched) | ratio |")
    print("|---|---|---|---|")
    for count, ours, theirs in yield_rows:
        o = median(ours)
        g = median(theirs) if theirs else None
        print(f"| {count:,} | {o:.1f} | {fmt(g, 1)} | {ratio(o, g)} |")


if __name__ == "__main__":
    main()
