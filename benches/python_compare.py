#!/usr/bin/env python3
# Usage: pip install greenlet gevent && python3 benches/python_compare.py [--quick]
"""greenweave's latency table next to Python's greenlet and gevent, from one run.

greenlet and gevent are the model greenweave's greenlets and green threads follow, so each row
here is the same operation in both, shaped the same way as the switch_latency row it sits
beside:

- greenlet switch round trip: the main greenlet switches a value to a started greenlet that
  switches every value straight back to its parent;
- yield round trip: two greenlets that both loop on `gevent.sleep(0)` (gevent's yield); one
  iteration is one yield by each;
- channel ping-pong: a value put on one `gevent.queue.Queue` for an echo greenlet that puts it
  on another; one iteration is a put and a get on each side;
- spawn+join: `gevent.spawn` of a trivial function, then `get()` its result.

The script first runs `cargo run --release --example switch_latency -- --json` for greenweave's
figures, then times the Python side (the median of 5 samples, each a timed loop), and prints
a Markdown table with both and the ratio Python / greenweave. Python 3 with the greenlet and
gevent packages from PyPI.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = 5

try:
    import gevent
    import gevent.queue
    import greenlet
except ImportError as missing:
    sys.exit(f"python_compare: {missing.name} is not installed; run "
             "`pip install greenlet gevent` first")


def greenlet_round_trips(iterations):
    def echo(value):
        parent = greenlet.getcurrent().parent
        while True:
            value = parent.switch(value)

    peer = greenlet.greenlet(echo)
    peer.switch(0)  # started: every timed switch goes into a suspended greenlet
    switch = peer.switch
    start = time.perf_counter_ns()
    for i in range(iterations):
        switch(i)
    elapsed = time.perf_counter_ns() - start
    peer.throw(greenlet.GreenletExit)
    return elapsed


def gevent_yield_round_trips(iterations):
    def yielder():
        for _ in range(iterations):
            gevent.sleep(0)

    start = time.perf_counter_ns()
    gevent.joinall([gevent.spawn(yielder), gevent.spawn(yielder)])
    return time.perf_counter_ns() - start


def gevent_ping_pongs(iterations):
    to_echo, to_main = gevent.queue.Queue(), gevent.queue.Queue()

    def echo():
        while True:
            value = to_echo.get()
            if value is None:
                return
            to_main.put(value)

    peer = gevent.spawn(echo)
    to_echo.put(0)
    to_main.get()
    start = time.perf_counter_ns()
    for i in range(1, iterations + 1):
        to_echo.put(i)
        to_main.get()
    elapsed = time.perf_counter_ns() - start
    to_echo.put(None)
    peer.join()
    return elapsed


def gevent_spawn_joins(iterations):
    def body(value):
        return value

    start = time.perf_counter_ns()
    for i in range(iterations):
        gevent.spawn(body, i).get()
    return time.perf_counter_ns() - start


# (switch_latency row name, Python peer's label, timed loop, iterations per sample).
ROWS = [
    ("greenlet switch round trip (main <-> greenlet)", "greenlet switch round trip",
     greenlet_round_trips, 200_000),
    ("scheduler yield_now round trip (2 green threads)", "gevent.sleep(0) round trip",
     gevent_yield_round_trips, 50_000),
    ("channel ping-pong round trip (2 green threads)", "gevent.queue.Queue ping-pong",
     gevent_ping_pongs, 50_000),
    ("green thread spawn+join (trivial body)", "gevent.spawn + get",
     gevent_spawn_joins, 20_000),
]


def python_ns_per_iteration(loop, iterations):
    loop(max(1, iterations // 10))  # warm-up
    return statistics.median(loop(iterations) / iterations for _ in range(SAMPLES))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny counts on both sides (a check that it runs, not a figure)")
    args = parser.parse_args()

    command = ["cargo", "run", "--quiet", "--release", "--example", "switch_latency", "--",
               "--json"]
    if args.quick:
        command.append("--quick")
    table = json.loads(subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.PIPE,
                                      text=True).stdout)
    ours = {row["name"]: row["median_ns"] for row in table["rows"]}

    scale = 100 if args.quick else 1
    print(f"Python {sys.version.split()[0]}, greenlet {greenlet.__version__}, "
          f"gevent {gevent.__version__}; greenweave from `{' '.join(command)}`\n")
    print("| operation | greenweave | Python peer | Python | Python / greenweave |")
    print("|---|---:|---|---:|---:|")
    for name, label, loop, iterations in ROWS:
        theirs = python_ns_per_iteration(loop, max(10, iterations // scale))
        mine = ours[name]
        print(f"| {name} | {mine:.1f} ns | {label} | {theirs:.1f} ns | {theirs / mine:.1f}x |")


if __name__ == "__main__":
    main()
