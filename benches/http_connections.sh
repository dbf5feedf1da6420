#!/usr/bin/env bash
# HTTP at many connections on one worker (issue 33, item 3): wrk's timeouts, p50, p99 and
# requests/s against greenweave's `http_server` and tokio's `tokio_http_server`, each on one
# worker pinned to SERVER_CPU, wrk pinned to LOAD_CPUS, the servers run alternately (the order
# reversed every other round) under the same load. Produces the "HTTP at 10,000 connections on
# one worker" section of BENCHMARKS.md:
#
#   bash benches/http_connections.sh                       # builds, then runs the defaults
#   bash benches/http_connections.sh --server NAME=DIR ... # binaries from DIR: NAME is a label,
#                                                          # DIR holds http_server and/or
#                                                          # tokio_http_server (A/B of two builds)
#
# Environment: CONNS (default 10000), DUR seconds per run (10), ROUNDS (3), THREADS wrk's
# threads (2), TIMEOUT wrk's --timeout (2s, its default), SERVER_CPU (0), LOAD_CPUS (1), OUT
# (raw logs; default a temporary folder).
#
# Both servers ask for the hard open-file limit; wrk gets it from this script. The listen
# backlog is the servers' own: greenweave's listener takes net.core.somaxconn, tokio's std's
# 128; a connect beyond it waits for a SYN retry, inside wrk's interval, for both alike.
set -u
cd "$(dirname "$0")/.."
servers=()
while (( $# )); do
  case $1 in
    --server) servers+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//; $d'; exit 0 ;;
    *) echo "http_connections.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
CONNS=${CONNS:-10000}; DUR=${DUR:-10}; ROUNDS=${ROUNDS:-3}; THREADS=${THREADS:-2}
TIMEOUT=${TIMEOUT:-2s}; SERVER_CPU=${SERVER_CPU:-0}; LOAD_CPUS=${LOAD_CPUS:-1}
command -v wrk >/dev/null || { echo "http_connections.sh: no wrk (Debian package wrk)" >&2; exit 1; }
if (( ${#servers[@]} == 0 )); then
  echo "http_connections.sh: building the servers in release" >&2
  cargo build --quiet --release --example http_server --example tokio_http_server || exit 1
  dir=$PWD/${CARGO_TARGET_DIR:-target}/release/examples
  servers=("greenweave=$dir" "tokio=$dir")
fi
hard=$(ulimit -Hn); ulimit -Sn "$hard"
for c in $CONNS; do
  [[ $hard == unlimited ]] || (( hard >= c + 64 )) \
    || { echo "http_connections.sh: $c connections need about $(( c + 64 )) open files; the hard limit is $hard (ulimit -Hn)" >&2; exit 1; }
done
wait_line() { local i; for i in $(seq 3000); do grep -q -- "$2" "$1" && return 0; kill -0 "$3" 2>/dev/null || return 1; sleep 0.01; done; return 1; }

echo "HTTP at many connections on one worker: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "server on CPU $SERVER_CPU, wrk -t$THREADS --timeout $TIMEOUT on CPUs $LOAD_CPUS; $DUR s per run, $ROUNDS round(s); somaxconn $(cat /proc/sys/net/core/somaxconn); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| round | connections | server | req/s | p50 | p99 | max | timeouts | other socket errors |"
echo "|---|---|---|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  order=("${servers[@]}")
  if (( round % 2 == 0 )); then
    order=(); for ((i=${#servers[@]}-1; i>=0; i--)); do order+=("${servers[i]}"); done
  fi
  for conns in $CONNS; do
    for entry in "${order[@]}"; do
      name=${entry%%=*}; dir=${entry#*=}
      case $name in
        tokio*) bin=$dir/tokio_http_server ;;
        *) bin=$dir/http_server ;;
      esac
      [ -x "$bin" ] || { echo "http_connections.sh: no $bin" >&2; continue; }
      log=$OUT/server.$name.$round.$conns.log; : > "$log"
      taskset -c "$SERVER_CPU" "$bin" --addr 127.0.0.1:0 --workers 1 --pin "$SERVER_CPU" > "$log" 2>&1 & spid=$!
      wait_line "$log" "listening on" $spid
      addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$log" | head -1)
      [ -n "$addr" ] || { echo "| $round | $conns | $name | did not start: $(head -c 200 "$log") |"; kill $spid 2>/dev/null; continue; }
      wlog=$OUT/wrk.$name.$round.$conns.log
      taskset -c "$LOAD_CPUS" wrk -t "$THREADS" -c "$conns" -d "${DUR}s" --timeout "$TIMEOUT" --latency "http://$addr/" > "$wlog" 2>&1
      kill $spid 2>/dev/null; wait $spid 2>/dev/null
      awk -v round="$round" -v conns="$conns" -v name="$name" '
        $1 == "50%" { p50 = $2 } $1 == "99%" { p99 = $2 }
        $1 == "Latency" && max == "" { max = $4 }
        /Requests\/sec/ { rps = $2 }
        /Socket errors/ { gsub(",", ""); for (i = 1; i <= NF; i++) { if ($i == "timeout") t = $(i + 1); if (($i == "connect" || $i == "read" || $i == "write") && $(i + 1) != 0) e = e $i " " $(i + 1) " " } }
        END { printf "| %d | %d | %s | %.0f | %s | %s | %s | %d | %s |\n", round, conns, name, rps, p50, p99, max, t, (e == "" ? "none" : e) }' "$wlog"
    done
  done
done
echo
echo "raw logs: $OUT"
