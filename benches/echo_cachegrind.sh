#!/usr/bin/env bash
# The user-space cache footprint of one echo request as connections grow (issue 23): each echo
# server (greenweave, tokio current_thread, the raw epoll server on mio) runs under cachegrind
# with a last-level cache the size of an L2 (2 MiB, 16-way: the cache a request's state must
# stay in to be cheap), while one echo_load process sends a fixed number of requests; the
# figures per request are the difference between a run of 6 requests per connection and a run
# of 2, over the 4 requests per connection between them, so connecting, accepting and exiting
# cancel out. Deterministic: instructions and simulated misses do not depend on what else the
# machine runs. The kernel's share (the system calls' own misses) is not seen by cachegrind.
#
#   bash benches/echo_cachegrind.sh                    # 100, 1,000 and 10,000 connections
#   CONNS="100 1000" SERVERS="greenweave mio" bash benches/echo_cachegrind.sh
#
# Needs valgrind (Debian package valgrind). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${CONNS:-"100 1000 10000"}
SERVERS=${SERVERS:-"greenweave tokio mio"}
LL=${LL:-2097152,16,64}
command -v valgrind >/dev/null || { echo "echo_cachegrind: valgrind not found (Debian package valgrind)" >&2; exit 1; }
hard=$(ulimit -Hn); ulimit -Sn "$hard"
cargo build --quiet --release --example echo_server --example tokio_echo_server \
  --example mio_echo_server --example echo_load
bin=${CARGO_TARGET_DIR:-target}/release/examples
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# Runs `server` under cachegrind for `conns` connections making `requests` requests in all;
# prints "instructions D1-misses LL-misses".
measure() {
  local server=$1 conns=$2 requests=$3 cmd
  case $server in
    greenweave) cmd=("$bin/echo_server" --workers 1) ;;
    tokio) cmd=("$bin/tokio_echo_server" --workers 1) ;;
    mio) cmd=("$bin/mio_echo_server") ;;
  esac
  : >"$work/server.log"
  valgrind --tool=cachegrind --cache-sim=yes --LL="$LL" --cachegrind-out-file=/dev/null \
    "${cmd[@]}" --addr 127.0.0.1:0 --max-connections "$conns" >"$work/server.log" 2>"$work/cachegrind.log" &
  local pid=$! i addr=""
  for (( i = 0; i < 6000; i++ )); do
    addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/server.log" | head -1)
    [[ -n $addr ]] && break
    sleep 0.01
  done
  [[ -n $addr ]] || { echo "echo_cachegrind: $server did not start: $(cat "$work/cachegrind.log")" >&2; exit 1; }
  "$bin/echo_load" --addr "$addr" --connections "$conns" --requests "$requests" --duration 600 >"$work/load.log"
  wait "$pid"
  awk '/I *refs:/ { gsub(",", "", $4); i = $4 } /D1  *misses:/ { gsub(",", "", $4); d = $4 }
       /LLd misses:/ { gsub(",", "", $4); l = $4 } END { print i, d, l }' "$work/cachegrind.log"
}

echo "user-space cache footprint per echo request under cachegrind (LL $LL): $(date -u '+%Y-%m-%d %H:%M UTC'), $(valgrind --version)"
echo
echo "| connections | server | instructions/request | D1 misses/request | LL misses/request |"
echo "|---|---|---|---|---|"
for conns in $CONNS; do
  for server in $SERVERS; do
    read -r i2 d2 l2 < <(measure "$server" "$conns" $(( 2 * conns )))
    read -r i6 d6 l6 < <(measure "$server" "$conns" $(( 6 * conns )))
    awk -v c="$conns" -v s="$server" -v i=$(( i6 - i2 )) -v d=$(( d6 - d2 )) -v l=$(( l6 - l2 )) \
      'BEGIN { n = 4 * c; printf "| %d | %s | %.0f | %.1f | %.1f |\n", c, s, i / n, d / n, l / n }'
  done
done
