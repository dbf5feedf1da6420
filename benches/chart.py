#!/usr/bin/env python3
# Usage: cargo bench && python3 benches/chart.py
"""Chart and tabulate the criterion results of benches/{switch,spawn,channel}.rs.

Reads criterion's `<criterion dir>/<group>/<function>/new/estimates.json` for every row below,
writes a horizontal bar chart (log-scale time axis, one bar per implementation, greenweave in
blue and each comparison in its own colour, every bar labelled with its nanoseconds) to
docs/switch-latency.svg, and prints a Markdown table (greenweave, the comparison, and the
ratio greenweave / comparison) for BENCHMARKS.md.

The criterion directory is, in order of preference: --criterion-dir, $CRITERION_HOME,
$CARGO_TARGET_DIR/criterion, <repository>/target/criterion.

Python 3 standard library only.
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import sys
from xml.sax.saxutils import escape

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Implementations other than greenweave: (label in the chart and table, crate in Cargo.lock or
# None, colour).
COMPARISONS = {
    "corosensei": ("corosensei", "corosensei", "#e08214"),
    "generator": ("generator-rs", "generator", "#1b7837"),
    "tokio": ("tokio current_thread", "tokio", "#7b3294"),
    "std_thread": ("std::thread", None, "#8c8c8c"),
}
GREENWEAVE_COLOUR = "#2166ac"

# (operation, criterion group, greenweave's function, [comparison functions in that group]).
ROWS = [
    ("raw switch round trip", "raw_switch_round_trip", "asymmetric", []),
    (
        "raw symmetric switch round trip (greenlet-style)",
        "raw_switch_round_trip",
        "symmetric",
        [],
    ),
    (
        "coroutine resume+suspend round trip",
        "coroutine_round_trip",
        "greenweave",
        ["corosensei", "generator"],
    ),
    (
        "coroutine round trip, resume in a non-inlined fn",
        "coroutine_round_trip_out_of_line",
        "greenweave",
        ["corosensei"],
    ),
    ("greenlet switch round trip", "greenlet_round_trip", "greenweave", []),
    (
        "yield_now round trip (2 green threads / tasks)",
        "yield_now_round_trip",
        "greenweave",
        ["tokio"],
    ),
    (
        "channel ping-pong round trip",
        "channel_ping_pong",
        "greenweave",
        ["tokio", "std_thread"],
    ),
    (
        "coroutine create+run+drop (pooled stack)",
        "coroutine_create_run_drop",
        "greenweave_pool",
        ["corosensei", "generator"],
    ),
    (
        "coroutine create+run+drop (with_stack + into_stack)",
        "coroutine_create_run_drop",
        "greenweave_with_stack",
        ["corosensei"],
    ),
    (
        "green thread spawn+join (trivial body)",
        "spawn_join",
        "greenweave",
        ["tokio", "std_thread"],
    ),
]


def criterion_dir(explicit):
    if explicit:
        return explicit
    if os.environ.get("CRITERION_HOME"):
        return os.environ["CRITERION_HOME"]
    if os.environ.get("CARGO_TARGET_DIR"):
        return os.path.join(os.environ["CARGO_TARGET_DIR"], "criterion")
    return os.path.join(REPO, "target", "criterion")


def estimate(base, group, function, statistic):
    """The point estimate in ns and the file's modification time, or None if not measured."""
    path = os.path.join(base, group, function, "new", "estimates.json")
    try:
        with open(path) as f:
            data = json.load(f)
        return data[statistic]["point_estimate"], os.path.getmtime(path)
    except (OSError, KeyError, TypeError, ValueError):
        return None


def locked_versions():
    """Crate versions from Cargo.lock, by name (first entry wins)."""
    versions = {}
    try:
        with open(os.path.join(REPO, "Cargo.lock")) as f:
            text = f.read()
    except OSError:
        return versions
    for name, version in re.findall(r'name = "([^"]+)"\nversion = "([^"]+)"', text):
        versions.setdefault(name, version)
    return versions


def cpu_model():
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = (
        fields.get("model name")
        or fields.get("Hardware")
        or fields.get("Model")
        or platform.processor()
        or "unknown CPU"
    )
    return "%s, %d CPUs, %s" % (model, os.cpu_count() or 0, platform.machine())


def format_ns(ns):
    if ns >= 1000:
        return "{:,.0f} ns".format(ns)
    if ns >= 100:
        return "%.0f ns" % ns
    if ns >= 10:
        return "%.1f ns" % ns
    return "%.2f ns" % ns


def format_ratio(ratio):
    """`1.54x`; small ratios keep two significant digits and say how many times faster."""
    if ratio >= 0.1:
        return "%.2fx" % ratio
    return "%.2gx (%.0fx faster)" % (ratio, 1 / ratio)


def collect(base, statistic):
    """[(operation, [(label, colour, ns)])] and the newest file time, skipping what is missing."""
    versions = locked_versions()
    rows, newest, missing = [], 0.0, []
    for operation, group, ours, theirs in ROWS:
        bars = []
        for function, is_ours in [(ours, True)] + [(t, False) for t in theirs]:
            found = estimate(base, group, function, statistic)
            if found is None:
                missing.append("%s/%s" % (group, function))
                continue
            ns, mtime = found
            newest = max(newest, mtime)
            if is_ours:
                label, colour = "greenweave", GREENWEAVE_COLOUR
            else:
                label, crate, colour = COMPARISONS[function]
                if crate and crate in versions:
                    label = "%s %s" % (label, versions[crate])
            bars.append((label, colour, ns, is_ours))
        if bars:
            rows.append((operation, bars))
    for name in missing:
        print("chart.py: no estimate for %s (not benchmarked?)" % name, file=sys.stderr)
    return rows, newest


def markdown(rows, statistic):
    lines = [
        "| operation | greenweave | comparison | ratio (greenweave / comparison) |",
        "|---|---|---|---|",
    ]
    for operation, bars in rows:
        ours = next((b for b in bars if b[3]), None)
        others = [b for b in bars if not b[3]]
        ours_text = format_ns(ours[2]) if ours else ""
        if not others:
            lines.append("| %s | %s | | |" % (operation, ours_text))
        for label, _, ns, _ in others:
            ratio = format_ratio(ours[2] / ns) if ours else ""
            lines.append(
                "| %s | %s | %s: %s | %s |" % (operation, ours_text, label, format_ns(ns), ratio)
            )
    lines.append("")
    lines.append(
        "criterion %s per operation; ratio below 1 means greenweave is faster." % statistic
    )
    return "\n".join(lines)


def svg(rows, statistic, title, subtitle):
    values = [bar[2] for _, bars in rows for bar in bars]
    low = 10 ** math.floor(math.log10(min(values)))
    high = 10 ** math.ceil(math.log10(max(values)))
    if high <= low:
        high = low * 10

    bar_height, bar_gap, group_gap = 16, 4, 12
    # Rough text widths (12px sans: ~7.6px a bold character, ~6.6px a plain one), so that an
    # operation's name and its first implementation's label never overlap.
    op_x = 12
    longest_op = max(len(operation) for operation, _ in rows)
    longest_impl = max(len(bar[0]) for _, bars in rows for bar in bars)
    first_impl = max(len(bars[0][0]) for _, bars in rows)
    impl_x = int(op_x + max(7.6 * longest_op + 6.6 * first_impl + 20, 6.6 * longest_impl + 10))
    plot_left = impl_x + 8
    plot_right = plot_left + 560
    width = plot_right + 110
    top = 92  # below the title, subtitle and legend

    def x_of(ns):
        fraction = (math.log10(ns) - math.log10(low)) / (math.log10(high) - math.log10(low))
        return plot_left + fraction * (plot_right - plot_left)

    out = []
    y = top
    group_bands = []
    for operation, bars in rows:
        start = y
        for i, (label, colour, ns, is_ours) in enumerate(bars):
            if i == 0:
                out.append(
                    '<text x="%d" y="%.1f" class="op">%s</text>'
                    % (op_x, y + bar_height - 4, escape(operation))
                )
            out.append(
                '<text x="%d" y="%.1f" class="impl" text-anchor="end">%s</text>'
                % (impl_x, y + bar_height - 4, escape(label))
            )
            end = x_of(ns)
            out.append(
                '<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>'
                % (plot_left, y, max(end - plot_left, 1.0), bar_height, colour)
            )
            out.append(
                '<text x="%.1f" y="%.1f" class="value%s">%s</text>'
                % (end + 5, y + bar_height - 4, " ours" if is_ours else "", format_ns(ns))
            )
            y += bar_height + bar_gap
        group_bands.append((start - bar_gap / 2, y - bar_gap / 2))
        y += group_gap
    plot_bottom = y - group_gap + 4
    height = plot_bottom + 46

    back = []
    for i, (band_top, band_bottom) in enumerate(group_bands):
        if i % 2 == 0:
            back.append(
                '<rect x="4" y="%.1f" width="%d" height="%.1f" fill="#f3f3f3"/>'
                % (band_top, width - 8, band_bottom - band_top)
            )
    decade = low
    while decade <= high * 1.0001:
        x = x_of(decade)
        back.append(
            '<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#c8c8c8" stroke-width="1"/>'
            % (x, top - 6, x, plot_bottom)
        )
        back.append(
            '<text x="%.1f" y="%d" class="tick" text-anchor="middle">%s</text>'
            % (x, plot_bottom + 16, "{:,.0f}".format(decade) if decade >= 1 else "%g" % decade)
        )
        decade *= 10
    back.append(
        '<text x="%d" y="%d" class="tick" text-anchor="middle">'
        "nanoseconds per operation (criterion %s, log scale; shorter is faster)</text>"
        % ((plot_left + plot_right) // 2, plot_bottom + 36, statistic)
    )

    legend, lx = [], plot_left
    legend_items = [("greenweave", GREENWEAVE_COLOUR)]
    seen = set()
    for _, bars in rows:
        for label, colour, _, is_ours in bars:
            if not is_ours and colour not in seen:
                seen.add(colour)
                legend_items.append((label, colour))
    for label, colour in legend_items:
        legend.append('<rect x="%d" y="62" width="12" height="12" fill="%s"/>' % (lx, colour))
        legend.append('<text x="%d" y="72" class="impl">%s</text>' % (lx + 17, escape(label)))
        lx += 30 + 7 * len(label)

    head = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
        'viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">'
        % (width, height, width, height),
        "<style>"
        ".title{font-size:17px;font-weight:bold;fill:#222}"
        ".sub{font-size:12px;fill:#555}"
        ".op{font-size:12px;font-weight:bold;fill:#222}"
        ".impl{font-size:12px;fill:#333}"
        ".value{font-size:11px;fill:#333}"
        ".ours{font-weight:bold}"
        ".tick{font-size:11px;fill:#555}"
        "</style>",
        '<rect width="100%" height="100%" fill="white"/>',
        '<text x="%d" y="26" class="title">%s</text>' % (op_x, escape(title)),
        '<text x="%d" y="46" class="sub">%s</text>' % (op_x, escape(subtitle)),
    ]
    return "\n".join(head + back + legend + out + ["</svg>"]) + "\n"


def main():
    parser = argparse.ArgumentParser(
        description="Chart criterion results of greenweave's benches (run `cargo bench` first)."
    )
    parser.add_argument("--criterion-dir", help="criterion's output directory")
    parser.add_argument(
        "--output",
        default=os.path.join(REPO, "docs", "switch-latency.svg"),
        help="where to write the SVG (default: docs/switch-latency.svg)",
    )
    parser.add_argument(
        "--statistic",
        choices=["median", "mean"],
        default="median",
        help="which criterion point estimate to use (default: median)",
    )
    parser.add_argument("--no-svg", action="store_true", help="only print the table")
    args = parser.parse_args()

    base = criterion_dir(args.criterion_dir)
    rows, newest = collect(base, args.statistic)
    if not rows:
        sys.exit("chart.py: no criterion results under %s; run `cargo bench` first" % base)

    date = datetime.date.fromtimestamp(newest).isoformat()
    cpu = cpu_model()
    if not args.no_svg:
        title = "greenweave latency vs corosensei, generator-rs, tokio and std, %s" % date
        subtitle = "%s; `cargo bench` (benches/switch.rs, spawn.rs, channel.rs)" % cpu
        directory = os.path.dirname(os.path.abspath(args.output))
        os.makedirs(directory, exist_ok=True)
        with open(args.output, "w") as f:
            f.write(svg(rows, args.statistic, title, subtitle))
        print("wrote %s" % args.output, file=sys.stderr, flush=True)

    print("`cargo bench` on %s, %s (from %s)\n" % (cpu, date, base))
    print(markdown(rows, args.statistic))


if __name__ == "__main__":
    main()
