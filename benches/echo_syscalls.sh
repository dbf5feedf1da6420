#!/usr/bin/env bash
# System calls per request of the three echo servers of benches/echo_compare.sh (greenweave,
# tokio current_thread, and the raw epoll state machine on mio), over a fixed number of
# requests. Produces the "System calls per request" table of BENCHMARKS.md's echo section:
#
#   bash benches/echo_syscalls.sh
#   REQUESTS=20000 CONNECTIONS="100" bash benches/echo_syscalls.sh   # a quick look
#   TOOL=strace bash benches/echo_syscalls.sh                        # every call by name
#   GREENWEAVE_BIN=/tmp/echo_server_old bash benches/echo_syscalls.sh  # another build's server
#
# For each connection count and each server: starts the server pinned to SERVER_CPU, attaches
# the counter to it, runs examples/echo_load pinned to LOAD_CPU with --requests REQUESTS
# (SIZE-byte request/response), detaches, and divides each count by REQUESTS.
#
# TOOL=perf (the default when perf can read the syscall tracepoints): `perf stat` on the
# server's `raw_syscalls`/`syscalls` tracepoints, at full speed; it also counts the calls that
# returned EAGAIN (a `raw_syscalls:sys_exit` with a filter), the calls that found nothing to do.
# TOOL=strace: `strace -c -f`, every call by name, with its errors, the server slowed many
# times over (the counts per request do not depend on speed, except epoll_wait's: a slower
# server finds more events per wait).
#
# Counted from before the first connection, so connection setup is included: an accept, an
# epoll_ctl, a setsockopt and a line printed (a write) per connection, and its close; at 1,000
# connections and 100,000 requests that is about 0.05 calls per request in all.
#
# Loopback only (127.0.0.1, ephemeral ports). Needs taskset (util-linux) for pinning.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=${REQUESTS:-200000}        # requests per run, in all (echo_load --requests)
CONNECTIONS=${CONNECTIONS:-"100 1000"}
SIZE=${SIZE:-64}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
SERVERS=(greenweave tokio mio)
CALLS="recvfrom sendto read write epoll_wait epoll_pwait epoll_ctl accept4 setsockopt close
       mmap munmap mprotect madvise"

say() { printf 'echo_syscalls: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

if [[ -z ${TOOL:-} ]]; then
  if command -v perf >/dev/null && perf stat -e raw_syscalls:sys_enter true >/dev/null 2>&1; then
    TOOL=perf
  elif command -v strace >/dev/null; then
    TOOL=strace
  else
    die "neither perf (with the syscall tracepoints readable) nor strace is available"
  fi
fi
[[ $TOOL == perf || $TOOL == strace ]] || die "TOOL: perf or strace, not $TOOL"

pin_server=()
pin_load=()
pinning="server on CPU $SERVER_CPU, echo_load on CPU $LOAD_CPU (taskset)"
if command -v taskset >/dev/null && taskset -c "$SERVER_CPU" true 2>/dev/null \
   && taskset -c "$LOAD_CPU" true 2>/dev/null; then
  pin_server=(taskset -c "$SERVER_CPU")
  pin_load=(taskset -c "$LOAD_CPU")
else
  pinning="UNPINNED (taskset missing, or CPU $SERVER_CPU or $LOAD_CPU absent)"
  say "WARNING: running unpinned; epoll_wait per request depends on it"
fi

ulimit -Sn "$(ulimit -Hn)" 2>/dev/null || true

say "building the examples in release"
cargo build --quiet --release --example echo_server --example tokio_echo_server \
  --example mio_echo_server --example echo_load
bin_dir=${CARGO_TARGET_DIR:-target}/release/examples
declare -A server_bin=([greenweave]=${GREENWEAVE_BIN:-$bin_dir/echo_server}
                       [tokio]=$bin_dir/tokio_echo_server
                       [mio]=$bin_dir/mio_echo_server)
load_bin=$bin_dir/echo_load

work=$(mktemp -d)
server_pid=""
counter_pid=""
cleanup() {
  [[ -n $counter_pid ]] && kill "$counter_pid" 2>/dev/null
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

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

# One run: fills count["$connections $server $name"] (name: a call, "total" or "EAGAIN").
declare -A count
run_one() {
  local connections=$1 server=$2
  local server_log=$work/server.log load_log=$work/load.log out=$work/count
  # The last run's log goes first: its "listening on" line would name a server now gone.
  rm -f "$server_log" "$load_log"
  "${pin_server[@]}" "${server_bin[$server]}" --addr 127.0.0.1:0 >"$server_log" 2>&1 &
  server_pid=$!
  wait_for_line "$server_log" "listening on" "$server_pid" \
    || die "$server server did not start: $(cat "$server_log")"
  local addr
  addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$server_log" | head -1)
  if [[ $TOOL == perf ]]; then
    local events="raw_syscalls:sys_enter" call
    for call in $CALLS; do events+=",syscalls:sys_enter_$call"; done
    perf stat -x, -o "$out" -e "$events" -e raw_syscalls:sys_exit --filter 'ret == -11' \
      -p "$server_pid" &
  else
    strace -c -f -o "$out" -p "$server_pid" 2>/dev/null &
  fi
  counter_pid=$!
  sleep 1 # attached
  "${pin_load[@]}" "$load_bin" --addr "$addr" --connections "$connections" --size "$SIZE" \
    --requests "$REQUESTS" --duration 3600 >"$load_log" 2>&1 \
    || die "echo_load failed against $server: $(cat "$load_log")"
  local done_requests
  done_requests=$(awk '/^requests:/ { print $2 }' "$load_log")
  [[ $done_requests == "$REQUESTS" ]] \
    || die "echo_load completed $done_requests requests of $REQUESTS against $server"
  sleep 0.5 # the server sees every close
  kill -INT "$counter_pid"
  wait "$counter_pid" 2>/dev/null || true
  counter_pid=""
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  local name value
  while read -r name value; do
    count["$connections $server $name"]=$value
  done < <(if [[ $TOOL == perf ]]; then
             # CSV: count,unit,event,...; the filtered sys_exit counts the EAGAIN returns.
             awk -F, '$3 == "raw_syscalls:sys_exit" { print "EAGAIN", $1; next }
                      $3 ~ /sys_enter/ { n = $3; sub(/.*sys_enter_?/, "", n);
                                         print (n == "" ? "total" : n), $1 }' "$out"
           else
             # % time, seconds, usecs/call, calls, [errors,] syscall; then the total line.
             awk '$1 ~ /^[0-9.]+$/ && NF >= 5 { print $NF, $4
                                                 if ($NF == "total" && NF == 6) print "errors", $5 }' \
               "$out"
           fi)
}

echo "echo servers, system calls per request: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "commit $(git rev-parse --short HEAD)$([[ -z $(git status --porcelain -- src examples Cargo.toml) ]] || echo ' (with uncommitted changes)'), $(rustc --version)"
echo "$(uname -sr), $(nproc) CPUs; $pinning; $REQUESTS requests of $SIZE bytes per run; counted by $TOOL"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for connections in $CONNECTIONS; do
  for server in "${SERVERS[@]}"; do
    say "$connections connections, $server"
    run_one "$connections" "$server"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
if [[ $TOOL == perf ]]; then
  rows="total recvfrom sendto epoll_wait EAGAIN $CALLS"
else
  rows="total errors $CALLS"
fi
echo "| connections | per request | $(printf '%s | ' "${SERVERS[@]}" | sed 's/ $//')"
echo "|---|---|$(printf '%.0s---|' "${SERVERS[@]}")"
for connections in $CONNECTIONS; do
  shown=""
  for name in $rows; do
    [[ " $shown " == *" $name "* ]] && continue
    shown+=" $name"
    row="| $connections | $name |"
    any=0
    for server in "${SERVERS[@]}"; do
      value=${count["$connections $server $name"]:-0}
      [[ $value =~ ^[0-9]+$ ]] || value=0
      (( value > 0 )) && any=1
      row+=$(awk -v n="$value" -v r="$REQUESTS" 'BEGIN { printf " %.3f |", n / r }')
    done
    (( any )) && echo "$row"
  done
done
