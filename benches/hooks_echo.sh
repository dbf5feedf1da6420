#!/usr/bin/env bash
# The hooks' cost on an echo server: std::net made green by the `hooks` feature against
# greenweave::net, server CPU per request and system calls per request, side by side in one
# run. Produces the echo part of "The hooks (issue 13)" in BENCHMARKS.md:
#
#   bash benches/hooks_echo.sh
#   DURATION=3 ROUNDS=1 CONNECTIONS="100" bash benches/hooks_echo.sh   # a quick look
#
# The servers, one green thread per connection on one OS thread each:
#   green         examples/echo_server, greenweave::net, built without the feature (the baseline)
#   green+hooks   the same source built with --features hooks (its std calls reach the hooks,
#                 which see non-blocking fds and pass them to libc): what the feature costs
#                 code that does not need it
#   hooked        examples/hooks_echo_server, std::net, built with --features hooks
# The load is examples/echo_load (greenweave::net, built without the feature) for all three.
#
# Part 1, ROUNDS times, for each connection count and each server (in rotating order from
# round to round, so drift does not favour one): starts the server pinned to SERVER_CPU, runs
# echo_load pinned to LOAD_CPU against it for DURATION seconds of SIZE-byte request/response,
# and reads the server's CPU time (utime + stime from /proc/<pid>/stat) over the interval in
# which echo_load sends; CPU µs per request is that over the requests completed. A run during
# which other processes used more than DISTURBED_PCT% of the machine is repeated (up to
# MAX_TRIES tries). Prints every run, then the medians with the ratios to `green`.
#
# Part 2: system calls per request. With perf (syscall tracepoints, at full speed): `perf stat`
# attached to each server while echo_load runs PERF_DURATION s with PERF_CONNECTIONS
# connections. With strace (every call by name, the server slowed many times over):
# `strace -c -f`, STRACE_DURATION s, STRACE_CONNECTIONS connections. Each counts every call the
# server made, connection setup included, over the requests completed.
#
# Loopback only (127.0.0.1, ephemeral ports). Needs taskset (util-linux) for pinning.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-"100 1000"}
SIZE=${SIZE:-64}
DISTURBED_PCT=${DISTURBED_PCT:-5}
MAX_TRIES=${MAX_TRIES:-4}
QUIET_WAIT=${QUIET_WAIT:-120}
PERF_DURATION=${PERF_DURATION:-3}
PERF_CONNECTIONS=${PERF_CONNECTIONS:-100}
STRACE_DURATION=${STRACE_DURATION:-5}
STRACE_CONNECTIONS=${STRACE_CONNECTIONS:-10}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
SERVERS=(green green+hooks hooked)

cpus=$(nproc)
say() { printf 'hooks_echo: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

pin_server=()
pin_load=()
pinning="server on CPU $SERVER_CPU, echo_load on CPU $LOAD_CPU (taskset)"
if command -v taskset >/dev/null && taskset -c "$SERVER_CPU" true 2>/dev/null \
   && taskset -c "$LOAD_CPU" true 2>/dev/null; then
  pin_server=(taskset -c "$SERVER_CPU")
  pin_load=(taskset -c "$LOAD_CPU")
  taskset -cp "$LOAD_CPU" $$ >/dev/null
else
  pinning="UNPINNED (no taskset, or CPUs $SERVER_CPU and $LOAD_CPU not both available)"
  say "WARNING: running $pinning"
fi

max_connections=0
for c in $CONNECTIONS $PERF_CONNECTIONS $STRACE_CONNECTIONS; do
  [[ $c =~ ^[1-9][0-9]*$ ]] || die "not a positive whole number of connections: $c"
  (( c > max_connections )) && max_connections=$c
done
soft=$(ulimit -Sn)
if [[ $soft != unlimited ]] && (( soft < max_connections + 64 )); then
  ulimit -Sn "$(ulimit -Hn)" 2>/dev/null || true
fi
fd_limit=$(ulimit -Sn)
[[ $fd_limit == unlimited ]] || (( max_connections + 64 <= fd_limit )) \
  || die "$max_connections connections need about $(( max_connections + 64 )) open files; the limit is $fd_limit"

# --- build: each binary is copied aside at once, since the feature changes what cargo puts at
# target/release/examples/echo_server ------------------------------------------------------------
work=$(mktemp -d)
server_pid=""
load_pid=""
strace_pid=""
cleanup() {
  [[ -n $load_pid ]] && kill "$load_pid" 2>/dev/null
  [[ -n $strace_pid ]] && kill "$strace_pid" 2>/dev/null
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

bin_dir=${CARGO_TARGET_DIR:-target}/release/examples
say "building the examples in release, without and with the hooks feature"
cargo build --quiet --release --example echo_server --example echo_load
cp "$bin_dir/echo_server" "$work/green"
cp "$bin_dir/echo_load" "$work/echo_load"
cargo build --quiet --release --features hooks --example echo_server --example hooks_echo_server
cp "$bin_dir/echo_server" "$work/green+hooks"
cp "$bin_dir/hooks_echo_server" "$work/hooked"
load_bin=$work/echo_load
clk_tck=$(getconf CLK_TCK)

cpu_ns() { # CPU time of process $1, all its threads, in ns (/proc/<pid>/task/*/schedstat)
  cat /proc/"$1"/task/*/schedstat | awk '{ ns += $1 } END { printf "%d\n", ns }'
}
machine_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
wait_for_line() { # file, pattern, pid: up to 30 s
  local i
  for (( i = 0; i < 3000; i++ )); do
    grep -q -- "$2" "$1" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}
wait_for_quiet() { # a second in which the machine's CPUs were less than 10% busy
  local waited b0 b1
  for (( waited = 0; waited < QUIET_WAIT; waited++ )); do
    b0=$(machine_ticks); sleep 1; b1=$(machine_ticks)
    (( (b1 - b0) * 10 < clk_tck )) && return 0
  done
  say "the machine did not go quiet within $QUIET_WAIT s; running anyway"
}

# Starts server $1 on an ephemeral port; sets server_pid and server_addr.
start_server() {
  local log=$work/server.log
  "${pin_server[@]}" "$work/$1" --addr 127.0.0.1:0 >"$log" 2>&1 &
  server_pid=$!
  # The whole address and the space after it: never a line caught half written.
  wait_for_line "$log" "listening on [0-9.]*:[0-9][0-9]* " "$server_pid" \
    || die "$1 did not start: $(cat "$log")"
  server_addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$log" | head -1)
}
stop_server() {
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
# Runs echo_load (connections $1, seconds $2) against server_addr in the background; returns
# once it is sending.
start_load() {
  "${pin_load[@]}" "$load_bin" --addr "$server_addr" --connections "$1" --duration "$2" \
    --size "$SIZE" >"$work/load.log" 2>&1 &
  load_pid=$!
  wait_for_line "$work/load.log" "; sending" "$load_pid" \
    || die "echo_load did not start sending: $(cat "$work/load.log")"
}
finish_load() { # waits for echo_load; sets requests to its request count
  local status=0
  wait "$load_pid" || status=$?
  load_pid=""
  (( status == 0 )) || die "echo_load failed (exit $status): $(cat "$work/load.log")"
  requests=$(awk '/^requests:/ { print $2 }' "$work/load.log")
}

# One measured run: sets run_row, run_disturbed and run_figure[rps|us|p50].
declare -A run_figure
run_one() {
  local connections=$1 server=$2
  start_server "$server"
  local b0 b1 c0 c1 t0 t1 requests
  start_load "$connections" "$DURATION"
  b0=$(machine_ticks); c0=$(cpu_ns "$server_pid"); t0=$(date +%s%N)
  finish_load
  c1=$(cpu_ns "$server_pid"); t1=$(date +%s%N); b1=$(machine_ticks)
  stop_server
  local rps p50
  rps=$(awk '/^requests:/ { print $7 }' "$work/load.log")
  p50=$(awk '/^latency:/ { print $3 }' "$work/load.log")
  local cpu wall us other
  read -r cpu wall us other < <(awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" \
    -v hz="$clk_tck" -v n="$requests" -v b0="$b0" -v b1="$b1" 'BEGIN {
      cpu = (c1 - c0) / 1e9; wall = (t1 - t0) / 1e9
      printf "%.3f %.3f %.3f %.0f\n", cpu, wall, cpu * 1e6 / n, 1000 * ((b1 - b0) / hz - cpu) }')
  # echo_load itself keeps one CPU busy: "other" is what is left beyond the server and it.
  run_disturbed=$(awk -v other="$other" -v wall="$wall" -v cpus="$cpus" -v pct="$DISTURBED_PCT" \
    'BEGIN { print (other / 1000 - wall > pct / 100 * wall * cpus) ? 1 : 0 }')
  run_figure=([rps]=$rps [us]=$us [p50]=$p50)
  run_row="| $connections | $server | $requests | $rps | $p50 | $cpu of $wall s | $us | $other |"
}

declare -A result
echo "hooks echo benchmark: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "commit $(git rev-parse --short HEAD)$([[ -z $(git status --porcelain -- src asm examples Cargo.toml) ]] || echo ' (uncommitted changes)'), $(rustc --version)"
echo "$(uname -sr), $cpus CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "$pinning; $DURATION s per run, $SIZE-byte messages, $ROUNDS round(s)"
echo
echo "| round | connections | server | requests | requests/s | p50 µs | server CPU | server CPU µs/request | machine CPU ms besides the server |"
echo "|---|---|---|---|---|---|---|---|---|"
for (( round = 1; round <= ROUNDS; round++ )); do
  shift_by=$(( (round - 1) % ${#SERVERS[@]} ))
  order=("${SERVERS[@]:shift_by}" "${SERVERS[@]:0:shift_by}")
  for connections in $CONNECTIONS; do
    for server in "${order[@]}"; do
      for (( try = 1; ; try++ )); do
        wait_for_quiet
        run_one "$connections" "$server"
        (( run_disturbed && try < MAX_TRIES )) || break
        echo "| $round, discarded (disturbed) $run_row"
      done
      echo "| $round $run_row"
      for figure in "${!run_figure[@]}"; do
        result["$connections $server $round $figure"]=${run_figure[$figure]}
      done
    done
  done
done

median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
echo "Median of $ROUNDS round(s); the ratios are to green (below 1: less than green)."
echo
echo "| connections | figure | green | green+hooks | hooked | green+hooks / green | hooked / green |"
echo "|---|---|---|---|---|---|---|"
for connections in $CONNECTIONS; do
  for figure in "us:server CPU µs/request" "rps:requests/s" "p50:p50 latency, µs"; do
    key=${figure%%:*}
    declare -A m=()
    for server in "${SERVERS[@]}"; do
      values=""
      for (( round = 1; round <= ROUNDS; round++ )); do
        values+="${result["$connections $server $round $key"]} "
      done
      m[$server]=$(echo "${values% }" | median)
    done
    awk -v c="$connections" -v f="${figure#*:}" -v g="${m[green]}" -v gh="${m[green+hooks]}" \
      -v h="${m[hooked]}" 'BEGIN { printf "| %s | %s | %s | %s | %s | %.3f | %.3f |\n",
        c, f, g, gh, h, gh / g, h / g }'
  done
done

# --- part 2: system calls per request ------------------------------------------------------------
# perf's syscall tracepoints count at full speed (a few % overhead); strace -c names every call
# but slows the server many times over. Each counts from before the load starts, so connection
# setup is included (a few calls per connection, against thousands of requests).
count_calls() { # tool, connections, seconds: fills calls["$server $name"], calls["$server requests"]
  local tool=$1 connections=$2 seconds=$3 server name count
  for server in "${SERVERS[@]}"; do
    start_server "$server"
    if [[ $tool == perf ]]; then
      perf stat -x, -o "$work/count.$server" -e raw_syscalls:sys_enter \
        -e "$(printf 'syscalls:sys_enter_%s,' $perf_calls | sed 's/,$//')" -p "$server_pid" &
    else
      strace -c -f -o "$work/count.$server" -p "$server_pid" 2>/dev/null &
    fi
    strace_pid=$!
    sleep 1 # attached
    start_load "$connections" "$seconds"
    finish_load
    kill -INT "$strace_pid"
    wait "$strace_pid" 2>/dev/null || true
    strace_pid=""
    stop_server
    calls["$server requests"]=$requests
    while read -r name count; do
      calls["$server $name"]=$count
      [[ " $syscalls " == *" $name "* ]] || syscalls+="$name "
    done < <(if [[ $tool == perf ]]; then
               # CSV: count,unit,event,...
               awk -F, '$3 ~ /sys_enter/ { n = $3; sub(/.*sys_enter_?/, "", n); print (n == "" ? "total" : n), $1 }' \
                 "$work/count.$server"
             else
               # % time, seconds, usecs/call, calls, [errors,] syscall; then "total".
               awk '$1 ~ /^[0-9.]+$/ && NF >= 5 { print $NF, $4 }' "$work/count.$server"
             fi)
  done
  printf '| system call | %s |\n' "$(printf '%s | ' "${SERVERS[@]}" | sed 's/ | $//')"
  printf '|---|%s\n' "$(printf '%.0s---|' "${SERVERS[@]}")"
  printf '| requests | %s |\n' \
    "$(for s in "${SERVERS[@]}"; do printf '%s | ' "${calls["$s requests"]}"; done | sed 's/ | $//')"
  for name in $syscalls; do
    row="| $name per request |"
    for server in "${SERVERS[@]}"; do
      row+=$(awk -v n="${calls["$server $name"]:-0}" -v r="${calls["$server requests"]}" \
        'BEGIN { printf " %.3f |", n / r }')
    done
    echo "$row"
  done
}

perf_calls="recvfrom sendto read write epoll_wait epoll_pwait epoll_ctl fcntl ioctl poll"
if command -v perf >/dev/null && perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1; then
  echo
  echo "System calls per request at full speed: perf stat on the server's syscall tracepoints, $PERF_CONNECTIONS connections, $PERF_DURATION s of load."
  echo
  declare -A calls=()
  syscalls=""
  count_calls perf "$PERF_CONNECTIONS" "$PERF_DURATION"
else
  say "perf cannot count syscall tracepoints here: no full-speed system call counts"
fi
if command -v strace >/dev/null; then
  echo
  echo "Every system call by name: strace -c -f on the server, $STRACE_CONNECTIONS connections, $STRACE_DURATION s of load."
  echo
  declare -A calls=()
  syscalls=""
  count_calls strace "$STRACE_CONNECTIONS" "$STRACE_DURATION"
else
  say "strace not found (Debian package strace): no system call names"
fi
