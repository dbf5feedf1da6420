#!/usr/bin/env bash
# Echo server throughput and server CPU per request, greenweave against tokio current_thread
# and against a raw epoll state machine on mio, side by side in one run. Produces the "Echo
# server vs tokio current_thread and raw epoll" section of BENCHMARKS.md:
#
#   bash benches/echo_compare.sh
#   DURATION=5 ROUNDS=1 CONNECTIONS="100" bash benches/echo_compare.sh   # a quick look
#
# Builds examples/echo_server (greenweave), examples/tokio_echo_server and
# examples/mio_echo_server (the comparisons) and examples/echo_load (the load generator, itself
# greenweave) in release. Then, ROUNDS times, for each connection count and each server (in
# rotating order from round to round, so drift does not favour one): starts the server pinned
# to SERVER_CPU, runs echo_load
# pinned to LOAD_CPU against it for DURATION seconds of SIZE-byte request/response, reads
# requests/s and p50/p99 from echo_load's output, and reads the server's CPU time
# (utime + stime from /proc/<pid>/stat) from the moment echo_load starts sending to the moment
# it exits; CPU µs per request is that over the requests completed. Prints every run, with
# echo_load's own CPU use (near 100% means the load generator, not the server, set the pace),
# the CPU time everything else on the machine used meanwhile, and the hypervisor's steal time
# (a disturbed run shows in those two), then a markdown table of the medians with the ratios
# greenweave / tokio, greenweave / mio and greenweave / the lower of the two (the issue's
# target for CPU per request).
#
# System calls per request: benches/echo_syscalls.sh.
#
# Loopback only (127.0.0.1, ephemeral ports). Needs taskset (util-linux) for pinning: without
# it, or with fewer than two CPUs, it runs unpinned and says so in its output.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10}            # seconds of load per run
ROUNDS=${ROUNDS:-4}                 # each round runs every (connections, server) pair once
CONNECTIONS=${CONNECTIONS:-"100 1000"}
SIZE=${SIZE:-64}                    # bytes per request (echo_load --size)
DISTURBED_PCT=${DISTURBED_PCT:-5}     # a run is disturbed if other processes used more than this
                                    # percentage of the machine's CPU time during it
MAX_TRIES=${MAX_TRIES:-4}           # a disturbed run is repeated, up to this many tries in all
QUIET_WAIT=${QUIET_WAIT:-120}       # seconds to wait for the machine to go quiet before a run
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
SERVERS=(greenweave tokio mio)

cpus=$(nproc) # before this script pins itself to one CPU
say() { printf 'echo_compare: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# --- pinning ---------------------------------------------------------------------------------
pin_server=()
pin_load=()
pinning="server on CPU $SERVER_CPU, echo_load on CPU $LOAD_CPU (taskset)"
if ! command -v taskset >/dev/null; then
  pinning="UNPINNED: taskset not found"
  say "WARNING: taskset not found (Debian/Ubuntu package util-linux); running UNPINNED."
  say "WARNING: server and load generator may share a CPU; figures are not comparable to pinned ones."
elif ! taskset -c "$SERVER_CPU" true 2>/dev/null || ! taskset -c "$LOAD_CPU" true 2>/dev/null; then
  pinning="UNPINNED: cannot pin to CPUs $SERVER_CPU and $LOAD_CPU (nproc $cpus)"
  say "WARNING: cannot pin to CPU $SERVER_CPU and CPU $LOAD_CPU (nproc says $cpus); running UNPINNED."
  say "WARNING: figures are not comparable to pinned ones."
else
  pin_server=(taskset -c "$SERVER_CPU")
  pin_load=(taskset -c "$LOAD_CPU")
  # This script's own polling and arithmetic stay off the server's CPU.
  taskset -cp "$LOAD_CPU" $$ >/dev/null
fi

# --- open files: each side needs one descriptor per connection, plus a few ---------------------
max_connections=0
for c in $CONNECTIONS; do
  [[ $c =~ ^[1-9][0-9]*$ ]] || die "CONNECTIONS: not a positive whole number: $c"
  (( c > max_connections )) && max_connections=$c
done
fds_needed=$(( max_connections + 64 ))
soft=$(ulimit -Sn)
hard=$(ulimit -Hn)
if [[ $soft != unlimited ]] && (( soft < fds_needed )) \
   && { [[ $hard == unlimited ]] || (( soft < hard )); }; then
  if [[ $hard == unlimited ]]; then target=$fds_needed; else target=$hard; fi
  if ulimit -Sn "$target" 2>/dev/null; then
    say "raised the soft open-file limit from $soft to $target (hard limit $hard) for $max_connections connections"
  else
    say "could not raise the soft open-file limit from $soft to $target"
  fi
fi
fd_limit=$(ulimit -Sn)
runnable=""
for c in $CONNECTIONS; do
  if [[ $fd_limit == unlimited ]] || (( c + 64 <= fd_limit )); then
    runnable+="$c "
  else
    say "SKIPPING $c connections: they need about $(( c + 64 )) open files per process, the limit is $fd_limit (hard $hard; raise it with \`ulimit -Hn\` as root)"
  fi
done
[[ -n $runnable ]] || die "no connection count fits the open-file limit ($fd_limit)"
CONNECTIONS=$runnable

# --- build -------------------------------------------------------------------------------------
say "building the examples in release"
cargo build --quiet --release --example echo_server --example tokio_echo_server \
  --example mio_echo_server --example echo_load
bin_dir=${CARGO_TARGET_DIR:-target}/release/examples
# GREENWEAVE_BIN: another build's echo_server in greenweave's place (a before/after comparison).
declare -A server_bin=([greenweave]=${GREENWEAVE_BIN:-$bin_dir/echo_server}
                       [tokio]=$bin_dir/tokio_echo_server
                       [mio]=$bin_dir/mio_echo_server)
load_bin=$bin_dir/echo_load
clk_tck=$(getconf CLK_TCK)

# --- one run -----------------------------------------------------------------------------------
work=$(mktemp -d)
server_pid=""
load_pid=""
cleanup() {
  [[ -n $load_pid ]] && kill "$load_pid" 2>/dev/null
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# utime + stime of a process (all its threads), in clock ticks. The command name in field 2
# may hold spaces, so fields are counted from after its closing parenthesis.
cpu_ticks() {
  local stat
  stat=$(<"/proc/$1/stat")
  stat=${stat##*) }
  # shellcheck disable=SC2086 # split into fields on purpose
  set -- $stat
  echo $(( ${12} + ${13} ))
}

# CPU time of this shell's waited-for children (cutime + cstime), in clock ticks: how the load
# generator's CPU is read, since its /proc entry is gone by the time it can be read at exit.
children_ticks() {
  local stat
  stat=$(<"/proc/$$/stat")
  stat=${stat##*) }
  # shellcheck disable=SC2086 # split into fields on purpose
  set -- $stat
  echo $(( ${14} + ${15} ))
}

# Busy ticks (user, nice, system, irq, softirq) and steal ticks (time the hypervisor gave this
# VM's CPUs to someone else), summed over all CPUs.
machine_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $9 }' /proc/stat; }

# Waits up to 30 s for a line matching $2 in file $1 while process $3 lives.
wait_for_line() {
  local i
  for (( i = 0; i < 3000; i++ )); do
    grep -qs -- "$2" "$1" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

# Waits up to QUIET_WAIT seconds for a second in which the machine's CPUs were less than 10%
# busy in all (other people's builds and tests share this machine).
wait_for_quiet() {
  local waited b0 b1 _
  for (( waited = 0; waited < QUIET_WAIT; waited++ )); do
    read -r b0 _ < <(machine_ticks)
    sleep 1
    read -r b1 _ < <(machine_ticks)
    (( (b1 - b0) * 10 < clk_tck )) && return 0
  done
  say "the machine did not go quiet within $QUIET_WAIT s; running anyway"
}

# One run of echo_load against a fresh server. Sets run_row (the table row after the round
# cell), run_disturbed (0 or 1), and run_figure[rps|p50|p99|us|busy|load].
declare -A run_figure
run_one() {
  local connections=$1 server=$2
  local server_log=$work/server.log load_log=$work/load.log
  # The last run's log goes first: its "listening on" line would name a server now gone.
  rm -f "$server_log" "$load_log"
  "${pin_server[@]}" "${server_bin[$server]}" --addr 127.0.0.1:0 >"$server_log" 2>&1 &
  server_pid=$!
  wait_for_line "$server_log" "listening on" "$server_pid" \
    || die "$server server did not start: $(cat "$server_log")"
  local addr
  addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$server_log" | head -1)

  local l0 lt0 l1 lt1 b0 b1 s0 s1 cs0
  read -r b0 s0 < <(machine_ticks)
  cs0=$(cpu_ticks "$server_pid")
  l0=$(children_ticks)
  lt0=$(date +%s%N)
  "${pin_load[@]}" "$load_bin" --addr "$addr" --connections "$connections" \
    --duration "$DURATION" --size "$SIZE" >"$load_log" 2>&1 &
  load_pid=$!
  wait_for_line "$load_log" "; sending" "$load_pid" \
    || die "echo_load did not start sending to $server: $(cat "$load_log")"
  local t0 c0 t1 c1
  t0=$(date +%s%N)
  c0=$(cpu_ticks "$server_pid")
  local status=0
  wait "$load_pid" || status=$?
  load_pid=""
  c1=$(cpu_ticks "$server_pid")
  t1=$(date +%s%N)
  lt1=$t1
  read -r b1 s1 < <(machine_ticks)
  l1=$(children_ticks)
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  (( status == 0 )) || die "echo_load failed against $server (exit $status): $(cat "$load_log")"

  local requests rps p50 p99
  read -r requests rps < <(awk '/^requests:/ { print $2, $7 }' "$load_log")
  read -r p50 p99 < <(awk '/^latency:/ { gsub(",", ""); print $3, $6 }' "$load_log")
  [[ -n $requests && -n $p50 ]] || die "cannot parse echo_load's output: $(cat "$load_log")"
  local figures
  figures=$(awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$clk_tck" -v n="$requests" \
    -v l0="$l0" -v l1="$l1" -v lt0="$lt0" -v lt1="$lt1" -v s0="$s0" -v s1="$s1" \
    -v b0="$b0" -v b1="$b1" -v cs0="$cs0" \
    'BEGIN { cpu = (c1 - c0) / hz; wall = (t1 - t0) / 1e9;
             printf "%.3f %.3f %.1f %.2f %.1f %.0f %.0f", cpu, wall, 100 * cpu / wall, cpu * 1e6 / n,
                    100 * (l1 - l0) / hz / ((lt1 - lt0) / 1e9), 1000 * (s1 - s0) / hz,
                    1000 * ((b1 - b0) - (c1 - cs0) - (l1 - l0)) / hz }')
  local cpu wall busy us_per_request load_busy steal_ms other_ms
  read -r cpu wall busy us_per_request load_busy steal_ms other_ms <<<"$figures"
  run_figure=([rps]=$rps [p50]=$p50 [p99]=$p99 [us]=$us_per_request [busy]=$busy [load]=$load_busy)
  run_row=$(printf '| %s | %s | %s | %s | %s | %s | %s of %s s (%s%%) | %s | %s%% | %s | %s |' \
    "$connections" "$server" "$requests" "$rps" "$p50" "$p99" "$cpu" "$wall" "$busy" \
    "$us_per_request" "$load_busy" "$other_ms" "$steal_ms")
  run_disturbed=$(awk -v other="$other_ms" -v wall="$wall" -v cpus="$cpus" -v pct="$DISTURBED_PCT" \
    'BEGIN { print (other / 1000 > pct / 100 * wall * cpus) ? 1 : 0 }')
}

# Runs until a run is not disturbed (at most MAX_TRIES times), prints every try, and keeps the
# last one's figures for the medians.
declare -A result # "$connections $server $round $figure" -> value
disturbed_kept=0
discarded=0
run_kept() {
  local round=$1 connections=$2 server=$3 try figure
  for (( try = 1; ; try++ )); do
    wait_for_quiet
    run_one "$connections" "$server"
    (( run_disturbed && try < MAX_TRIES )) || break
    printf '| %s, discarded (disturbed) %s\n' "$round" "$run_row"
    discarded=$(( discarded + 1 ))
  done
  if (( run_disturbed )); then
    printf '| %s, kept though disturbed (%s tries) %s\n' "$round" "$MAX_TRIES" "$run_row"
    disturbed_kept=$(( disturbed_kept + 1 ))
  else
    printf '| %s %s\n' "$round" "$run_row"
  fi
  for figure in "${!run_figure[@]}"; do
    result["$connections $server $round $figure"]=${run_figure[$figure]}
  done
}

median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# --- the runs ----------------------------------------------------------------------------------
echo "echo server, greenweave vs tokio current_thread and mio: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "commit $(git rev-parse --short HEAD)$([[ -z $(git status --porcelain -- src asm build.rs examples Cargo.toml) ]] || echo ' (with uncommitted changes in src, asm, build.rs, examples or Cargo.toml)'), $(rustc --version)"
echo "$(uname -sr), $cpus CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "$pinning; open-file limit $fd_limit; $DURATION s per run, $SIZE-byte messages, $ROUNDS round(s)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| round | connections | server | requests | requests/s | p50 µs | p99 µs | server CPU | server CPU µs/request | echo_load CPU | other CPU ms | steal ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for (( round = 1; round <= ROUNDS; round++ )); do
  first=$(( (round - 1) % ${#SERVERS[@]} ))
  order=("${SERVERS[@]:first}" "${SERVERS[@]:0:first}")
  for connections in $CONNECTIONS; do
    for server in "${order[@]}"; do
      run_kept "$round" "$connections" "$server"
    done
  done
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "$discarded disturbed run(s) repeated; $disturbed_kept kept though still disturbed after $MAX_TRIES tries."
echo "(Disturbed: other processes used more than $DISTURBED_PCT% of the machine's CPU time during the run.)"
echo
echo "Median of $ROUNDS round(s); ratios are greenweave's figure over the other's (above 1:"
echo "greenweave higher); the last is over the lower of tokio's and mio's."
echo
echo "| connections | figure | greenweave | tokio | mio | / tokio | / mio | / the lower |"
echo "|---|---|---|---|---|---|---|---|"
for connections in $CONNECTIONS; do
  for figure in "rps:requests/s" "p50:p50 latency, µs" "p99:p99 latency, µs" \
                "us:server CPU per request, µs" "busy:server CPU busy, %" "load:echo_load CPU busy, %"; do
    key=${figure%%:*}
    declare -A m=()
    for server in "${SERVERS[@]}"; do
      values=""
      for (( round = 1; round <= ROUNDS; round++ )); do
        values+="${result["$connections $server $round $key"]} "
      done
      m[$server]=$(echo "${values% }" | median)
    done
    awk -v c="$connections" -v f="${figure#*:}" -v g="${m[greenweave]}" -v t="${m[tokio]}" \
      -v r="${m[mio]}" 'function ratio(a, b) { return (b > 0) ? a / b : 0 }
      BEGIN { low = (t < r) ? t : r
              printf "| %s | %s | %s | %s | %s | %.3fx | %.3fx | %.3fx |\n", c, f, g, t, r,
                     ratio(g, t), ratio(g, r), ratio(g, low) }'
  done
done
