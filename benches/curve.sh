#!/usr/bin/env bash
# Cost per request as connections grow (issue 23): one server worker on one CPU, the load on
# other CPUs, greenweave against tokio (current_thread), a raw epoll server on mio (echo only)
# and Go (GOMAXPROCS=1), side by side in one run, with the kernel counters that explain the
# figures. Produces the "Connections per core" section of BENCHMARKS.md:
#
#   bash benches/curve.sh                                     # builds, then runs the defaults
#   bash benches/curve.sh --prebuilt DIR                      # binaries from DIR, no cargo, no go
#   CONNS="1000 10000" PROTOCOLS=echo SERVER_CPU=0 LOAD_CPUS=1,1,1,1,1,1,1,1 bash benches/curve.sh
#
# The last line is the recipe for a 2-core machine: eight load processes sharing CPU 1 (one
# load process on a CPU of its own is slower per request than any of these servers, so every
# server waits for it and the curve does not show).
#
# --prebuilt DIR: DIR holds echo_server, tokio_echo_server, mio_echo_server, echo_load,
# http_server, tokio_http_server, go_echo_server, go_http_server, go_http_raw_server and wrk
# (any missing server is skipped); ../shared/device/bundle.sh makes such a folder
# (.device-bundle/bin) for a machine that reaches no package registry.
#
# Environment: CONNS (default "100 1000 10000"), PROTOCOLS ("echo http"), SERVERS (a subset of
# greenweave, tokio, mio, go, go-raw; default all), DUR seconds per run
# (3), ROUNDS (2; the server order is reversed every other round), SERVER_CPU (0), LOAD_CPUS (a
# taskset list, one echo_load process per entry, repeats allowed; default every allowed CPU but
# the server's, at most 8), OUT (raw logs; default a temporary folder).
#
# One measured interval for everything: the echo_load processes connect, say so, and wait for a
# file; the counters are read, the file is created, and all start sending within a millisecond.
# (Reading the counters "once every process is sending" instead, as this script once did, left
# out a different share of each server's requests: 10,000 connections take seconds to open,
# not the same for each process.) wrk connects inside its own interval, for every server alike.
#
# Columns: requests/s; the server's CPU per request (utime+stime of its threads, /proc/PID/stat);
# the whole machine's busy CPU per request (server, load, softirq, everything); softirq per
# request; the server's sleeps (voluntary context switches) per request; machine context
# switches and rescheduling/function-call IPIs per request; TCP segments (in + out, loopback
# counts each twice) and delayed ACKs per request (/proc/net/snmp, /proc/net/netstat); the first
# load process's p50 and p99 latency; errors.
set -u
cd "$(dirname "$0")/.."
prebuilt=""
while (( $# )); do
  case $1 in
    --prebuilt) prebuilt=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//; $d'; exit 0 ;;
    *) echo "curve.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
CONNS=${CONNS:-"100 1000 10000"}; PROTOCOLS=${PROTOCOLS:-"echo http"}; DUR=${DUR:-3}; ROUNDS=${ROUNDS:-2}
SERVER_CPU=${SERVER_CPU:-0}

if [ -n "$prebuilt" ]; then
  B=$prebuilt
else
  B=$OUT/bin; mkdir -p "$B"
  echo "curve.sh: building the servers and echo_load in release" >&2
  cargo build --quiet --release --example echo_server --example tokio_echo_server \
    --example mio_echo_server --example echo_load --example http_server \
    --example tokio_http_server || exit 1
  for e in echo_server tokio_echo_server mio_echo_server echo_load http_server tokio_http_server; do
    ln -sf "$PWD/${CARGO_TARGET_DIR:-target}/release/examples/$e" "$B/$e"
  done
  if command -v go >/dev/null; then
    for g in echo_server http_server http_raw_server; do
      GOCACHE=${GOCACHE:-$OUT/go-cache} go build -o "$B/go_$g" "benches/go/$g.go" || exit 1
    done
  else
    echo "curve.sh: no go (Debian package golang-go): the Go servers are skipped" >&2
  fi
  command -v wrk >/dev/null && ln -sf "$(command -v wrk)" "$B/wrk"
fi
[ -x "$B/wrk" ] || echo "curve.sh: no wrk (Debian package wrk): the HTTP runs are skipped" >&2

hard=$(ulimit -Hn); ulimit -Sn "$hard"
for c in $CONNS; do
  [[ $hard == unlimited ]] || (( hard >= c + 64 )) \
    || { echo "curve.sh: $c connections need about $(( c + 64 )) open files; the hard limit is $hard (ulimit -Hn)" >&2; exit 1; }
done
expand() { local p c; for p in ${1//,/ }; do if [[ $p == *-* ]]; then for ((c=${p%-*}; c<=${p#*-}; c++)); do echo "$c"; done; else echo "$p"; fi; done; }
if [ -z "${LOAD_CPUS:-}" ]; then
  mapfile -t allowed < <(expand "$(taskset -pc $$ | sed 's/.*: //')")
  loads=(); for c in "${allowed[@]}"; do [ "$c" != "$SERVER_CPU" ] && (( ${#loads[@]} < 8 )) && loads+=("$c"); done
else
  mapfile -t loads < <(expand "$LOAD_CPUS")
fi
(( ${#loads[@]} )) || { echo "curve.sh: no CPU left for the load (LOAD_CPUS)" >&2; exit 1; }
hz=$(getconf CLK_TCK)
ticks() { local s; s=$(<"/proc/$1/stat"); s=${s##*) }; set -- $s; echo $(( ${12} + ${13} )); }
sleeps() { awk '/^voluntary_ctxt_switches/ {print $2}' "/proc/$1/status"; }
machine() { awk '/^cpu / { b = $2+$3+$4+$7+$8; s = $7+$8 } /^ctxt/ { x = $2 } END { print b, s, x }' /proc/stat; }
ipis() { awk '$1 == "RES:" || $1 == "CAL:" { s = 0; for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i; v[$1] = s } END { print v["RES:"] + 0, v["CAL:"] + 0 }' /proc/interrupts; }
# TCP segments in + out, and delayed ACKs sent, machine-wide.
tcp() {
  awk '$1 == "Tcp:" && $2 ~ /^[0-9]+$/ { s = $11 + $12 } END { printf "%d ", s }' /proc/net/snmp
  awk '$1 == "TcpExt:" { if (!h) { for (k = 2; k <= NF; k++) n[k] = $k; h = 1 } else for (k = 2; k <= NF; k++) if (n[k] == "DelayedACKs") d = $k } END { print d + 0 }' /proc/net/netstat
}
wait_line() { local i; for i in $(seq 3000); do grep -q -- "$2" "$1" && return 0; kill -0 "$3" 2>/dev/null || return 1; sleep 0.01; done; return 1; }

echo "cost per request as connections grow: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "server on CPU $SERVER_CPU, load on CPUs ${loads[*]}; $DUR s per run, $ROUNDS round(s); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| round | protocol | connections | server | req/s | server µs/req | machine µs/req | softirq µs/req | server sleeps/req | ctx sw/req | IPIs/req | TCP segments/req | delayed ACKs/req | p50 / p99 µs | errors |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
for protocol in $PROTOCOLS; do
  case $protocol in
    echo) servers="greenweave tokio mio go" ;;
    http) servers="greenweave tokio go-raw go"; [ -x "$B/wrk" ] || continue ;;
    *) echo "curve.sh: PROTOCOLS: echo or http, not $protocol" >&2; exit 2 ;;
  esac
  if [ -n "${SERVERS:-}" ]; then
    servers=$(for s in $servers; do [[ " $SERVERS " == *" $s "* ]] && echo "$s"; done)
  fi
  (( round % 2 )) || servers=$(echo $servers | tr ' ' '\n' | tac | tr '\n' ' ')
for conns in $CONNS; do
for server in $servers; do
  case $protocol/$server in
    echo/greenweave) cmd=("$B/echo_server" --addr 127.0.0.1:0 --workers 1 --pin "$SERVER_CPU") ;;
    echo/tokio) cmd=("$B/tokio_echo_server" --addr 127.0.0.1:0 --workers 1 --pin "$SERVER_CPU") ;;
    echo/mio) cmd=("$B/mio_echo_server" --addr 127.0.0.1:0) ;;
    echo/go) cmd=("$B/go_echo_server" --addr 127.0.0.1:0) ;;
    http/greenweave) cmd=("$B/http_server" --addr 127.0.0.1:0 --workers 1 --pin "$SERVER_CPU") ;;
    http/tokio) cmd=("$B/tokio_http_server" --addr 127.0.0.1:0 --workers 1 --pin "$SERVER_CPU") ;;
    http/go) cmd=("$B/go_http_server" --addr 127.0.0.1:0) ;;
    http/go-raw) cmd=("$B/go_http_raw_server" --addr 127.0.0.1:0) ;;
  esac
  [ -x "${cmd[0]}" ] || continue
  log=$OUT/server.log; : > "$log"
  GOMAXPROCS=1 taskset -c "$SERVER_CPU" "${cmd[@]}" > "$log" 2>&1 & spid=$!
  wait_line "$log" "listening on" $spid
  addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$log" | head -1)
  [ -n "$addr" ] || { echo "| $round | $protocol | $conns | $server | did not start: $(head -c 200 "$log") |"; kill $spid 2>/dev/null; continue; }
  n=${#loads[@]}; pids=(); rm -f "$OUT"/load.* "$OUT/go"
  if [ "$protocol" = echo ]; then
    for ((i=0;i<n;i++)); do share=$(( conns / n + (i < conns % n ? 1 : 0) )); : > "$OUT/load.$i"
      taskset -c "${loads[i]}" "$B/echo_load" --addr "$addr" --connections $share --duration "$DUR" \
        --start-when "$OUT/go" > "$OUT/load.$i" 2>&1 & pids+=($!); done
    for ((i=0;i<n;i++)); do wait_line "$OUT/load.$i" "connected, waiting" ${pids[i]}; done
  fi
  read -r m0 q0 x0 < <(machine); read -r r0 f0 < <(ipis); read -r g0 d0 < <(tcp); c0=$(ticks $spid); v0=$(sleeps $spid)
  if [ "$protocol" = echo ]; then
    touch "$OUT/go"
  else
    loadlist=$(IFS=,; echo "${loads[*]}")
    taskset -c "$loadlist" "$B/wrk" -t $n -c "$conns" -d "${DUR}s" --latency "http://$addr/" > "$OUT/load.0" 2>&1 & pids+=($!)
  fi
  for p in "${pids[@]}"; do wait "$p"; done
  c1=$(ticks $spid); v1=$(sleeps $spid); read -r m1 q1 x1 < <(machine); read -r r1 f1 < <(ipis); read -r g1 d1 < <(tcp)
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  if [ "$protocol" = echo ]; then
    req=0; for ((i=0;i<n;i++)); do r=$(awk '/^requests:/ {print $2}' "$OUT/load.$i"); req=$((req + ${r:-0})); done
    lat=$(awk '/^latency:/ {print $3 " / " $6}' "$OUT/load.0"); errors=none
  else
    req=$(awk '/requests in/ {print $1}' "$OUT/load.0")
    lat=$(awk '$1 == "50%" {p50 = $2} $1 == "99%" {p99 = $2} END {print p50 " / " p99}' "$OUT/load.0")
    errors=$(grep -E 'Socket errors|Non-2xx' "$OUT/load.0" | tr -s ' ' | paste -sd';' -); errors=${errors:-none}
  fi
  awk -v req="${req:-0}" -v hz="$hz" -v c=$(( c1 - c0 )) -v m=$(( m1 - m0 )) -v q=$(( q1 - q0 )) \
      -v v=$(( v1 - v0 )) -v x=$(( x1 - x0 )) -v ipi=$(( r1 - r0 + f1 - f0 )) -v seg=$(( g1 - g0 )) \
      -v dack=$(( d1 - d0 )) -v round="$round" -v p="$protocol" -v conns="$conns" -v s="$server" \
      -v lat="$lat" -v err="$errors" -v dur="$DUR" 'BEGIN {
    if (req <= 0) { printf "| %d | %s | %d | %s | no requests | | | | | | | | | | %s |\n", round, p, conns, s, err; exit }
    printf "| %d | %s | %d | %s | %.0f | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f | %.2f | %.3f | %s | %s |\n",
      round, p, conns, s, req / dur, c / hz * 1e6 / req, m / hz * 1e6 / req, q / hz * 1e6 / req,
      v / req, x / req, ipi / req, seg / req, dack / req, lat, err }'
done; done; done; done
