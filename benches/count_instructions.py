#!/usr/bin/env python3
# Usage: python3 benches/count_instructions.py [--arch x86_64|aarch64|both] [--only TEXT]
"""Instructions per iteration of every loop in benches/loops/mod.rs, on x86_64 and aarch64.

Wall time on a shared VM drifts by 10-20% between runs, and under qemu it means nothing at all;
an instruction count is the same on every run of the same binary. For each loop this runs
`benches/instructions.rs` twice, with SHORT and LONG iterations, and reports
(count(LONG) - count(SHORT)) / (LONG - SHORT): the cost of one iteration, with the setup
(starting a coroutine, a runtime, an echo loop) cancelled out.

- x86_64: `valgrind --tool=callgrind`, its "Collected" total (user-space instructions of every
  thread of the process).
- aarch64: `qemu-aarch64 -d in_asm,exec,nochain`. qemu logs each translated block's guest
  instructions once (in_asm) and every execution of a block (exec; nochain makes it log every
  one). The count is the sum, over executions, of the block's length. It counts a block that
  ends early (a fault inside it) as whole, which none of these loops does.

Loops whose cost is mostly in the kernel (the std::thread rows, generator-rs create) are
skipped: neither counter sees kernel instructions.

Then it prints the issue-6 ratios that instruction counts can decide: greenweave against the
comparison crate in the same group, and the higher layers against the coroutine round trip.

Needs valgrind (x86_64) and, for aarch64, qemu-user and the aarch64 target (see README.md).
Python 3 standard library only.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AARCH64 = "aarch64-unknown-linux-gnu"
SHORT, LONG = 1000, 2000

# Loops that spend their time in system calls (generator-rs maps a new stack per generator):
# not counted.
KERNEL_BOUND = {
    "channel_ping_pong/std_thread",
    "spawn_join/std_thread",
    "coroutine_create_run_drop/generator",
}

# (what, numerator loop, denominator loop, target ratio as text, target as a number).
RATIOS = [
    ("coroutine round trip vs corosensei", "coroutine_round_trip/greenweave",
     "coroutine_round_trip/corosensei", "<= 1.0x", 1.0),
    ("coroutine round trip vs generator-rs", "coroutine_round_trip/greenweave",
     "coroutine_round_trip/generator", "", None),
    ("out-of-line round trip vs corosensei", "coroutine_round_trip_out_of_line/greenweave",
     "coroutine_round_trip_out_of_line/corosensei", "", None),
    ("create+run+drop, pooled, vs corosensei", "coroutine_create_run_drop/greenweave_pool",
     "coroutine_create_run_drop/corosensei", "<= 1.0x", 1.0),
    ("create+run+drop, with_stack, vs corosensei",
     "coroutine_create_run_drop/greenweave_with_stack",
     "coroutine_create_run_drop/corosensei", "<= 1.0x", 1.0),
    ("greenlet round trip vs coroutine round trip", "greenlet_round_trip/greenweave",
     "coroutine_round_trip/greenweave", "<= 1.5x", 1.5),
    ("yield_now round trip vs coroutine round trip", "yield_now_round_trip/greenweave",
     "coroutine_round_trip/greenweave", "<= 5x", 5.0),
    ("channel ping-pong vs coroutine round trip", "channel_ping_pong/greenweave",
     "coroutine_round_trip/greenweave", "<= 10x", 10.0),
    ("yield_now round trip vs tokio", "yield_now_round_trip/greenweave",
     "yield_now_round_trip/tokio", "", None),
    ("channel ping-pong vs tokio", "channel_ping_pong/greenweave",
     "channel_ping_pong/tokio", "", None),
    ("spawn+join vs tokio spawn+await", "spawn_join/greenweave", "spawn_join/tokio",
     "<= 0.33x", 1 / 3),
    ("block_on of a ready future vs tokio's Runtime::block_on", "block_on_ready/greenweave",
     "block_on_ready/tokio", "", None),
    ("block_on ping-pong vs tokio tasks", "block_on_ping_pong/greenweave",
     "block_on_ping_pong/tokio", "", None),
]


def build(target):
    """Builds benches/instructions.rs (bench profile) and returns the executable's path."""
    command = ["cargo", "bench", "--no-run", "--bench", "instructions",
               "--message-format=json-render-diagnostics"]
    if target:
        command += ["--target", target]
    output = subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.PIPE,
                            text=True).stdout
    for line in output.splitlines():
        message = json.loads(line)
        if (message.get("reason") == "compiler-artifact"
                and message["target"]["name"] == "instructions" and message.get("executable")):
            return message["executable"]
    sys.exit("count_instructions: cargo built no `instructions` executable")


def callgrind_count(executable, loop_id, iterations):
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            ["valgrind", "--tool=callgrind",
             f"--callgrind-out-file={os.path.join(scratch, 'out')}",
             executable, loop_id, str(iterations)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    match = re.search(r"Collected\s*:\s*(\d+)", result.stderr)
    if not match:
        sys.exit(f"count_instructions: no total in callgrind's output:\n{result.stderr}")
    return int(match.group(1))


def qemu_count(executable, loop_id, iterations):
    with tempfile.TemporaryDirectory() as scratch:
        log = os.path.join(scratch, "log")
        subprocess.run(
            ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-d", "in_asm,exec,nochain",
             "-D", log, executable, loop_id, str(iterations)],
            stdout=subprocess.DEVNULL, check=True)
        return executed_instructions(log)


def executed_instructions(log):
    """Sums the guest instructions of every block execution in a qemu in_asm,exec log."""
    block_length = {}  # guest pc of a block's first instruction -> instructions in it
    block_start = None
    total = 0
    instruction = re.compile(r"0x([0-9a-f]+):\s")
    with open(log, errors="replace") as lines:
        for line in lines:
            if line.startswith("Trace "):
                # "Trace <cpu>: <host ptr> [<flags>/<guest pc>/...] <symbol>"
                block_start = None
                total += block_length[int(line.split("[", 1)[1].split("/")[1], 16)]
            elif line.startswith("IN:"):
                block_start = None
            else:
                match = instruction.match(line)
                if match:
                    if block_start is None:
                        block_start = int(match.group(1), 16)
                        block_length[block_start] = 0
                    block_length[block_start] += 1
    return total


def per_iteration(count, executable, loop_id):
    short = count(executable, loop_id, SHORT)
    long = count(executable, loop_id, LONG)
    return (long - short) / (LONG - SHORT)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=["x86_64", "aarch64", "both"], default="both")
    parser.add_argument("--only", default="", help="count only loops whose id contains this")
    args = parser.parse_args()

    arches = ["x86_64", "aarch64"] if args.arch == "both" else [args.arch]
    tools = {"x86_64": "valgrind", "aarch64": "qemu-aarch64"}
    for arch in arches:
        if not shutil.which(tools[arch]):
            sys.exit(f"count_instructions: {arch} needs {tools[arch]} (see README.md)")

    counts = {}  # arch -> loop id -> instructions per iteration
    for arch in arches:
        executable = build(None if arch == "x86_64" else AARCH64)
        ids = subprocess.run(
            ([executable] if arch == "x86_64"
             else ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", executable]) + ["--list"],
            check=True, stdout=subprocess.PIPE, text=True).stdout.split()
        count = callgrind_count if arch == "x86_64" else qemu_count
        counts[arch] = {}
        for loop_id in ids:
            if loop_id in KERNEL_BOUND or args.only not in loop_id:
                continue
            counts[arch][loop_id] = per_iteration(count, executable, loop_id)
            print(f"{arch} {loop_id}: {counts[arch][loop_id]:.1f}", file=sys.stderr)

    ids = list(dict.fromkeys(i for arch in arches for i in counts[arch]))
    print(f"Instructions per iteration ({LONG} minus {SHORT} iterations, divided by "
          f"{LONG - SHORT}):\n")
    print("| loop | " + " | ".join(arches) + " |")
    print("|---|" + "---:|" * len(arches))
    for loop_id in ids:
        cells = [f"{counts[a][loop_id]:.0f}" if loop_id in counts[a] else "" for a in arches]
        print(f"| `{loop_id}` | " + " | ".join(cells) + " |")

    print("\nRatios of instruction counts (the issue-6 targets are ratios of time; "
          "instructions are the noise-free proxy):\n")
    print("| figure | target | " + " | ".join(arches) + " |")
    print("|---|---|" + "---:|" * len(arches))
    for what, numerator, denominator, target_text, target in RATIOS:
        cells = []
        for arch in arches:
            top, bottom = counts[arch].get(numerator), counts[arch].get(denominator)
            if top is None or not bottom:
                cells.append("")
                continue
            ratio = top / bottom
            verdict = "" if target is None else (" (met)" if ratio <= target else " (missed)")
            cells.append(f"{ratio:.2f}x{verdict}")
        if any(cells):
            print(f"| {what} | {target_text} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
