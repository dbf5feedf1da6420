#!/usr/bin/env bash
# Every core (issue 15): an HTTP/1.1 keep-alive server and an echo server on N workers,
# greenweave against tokio's multi-thread runtime with N workers and Go with GOMAXPROCS=N, side
# by side in one run. Produces the "Every core (issue 15)" section of BENCHMARKS.md:
#
#   bash benches/scaling.sh                                   # this 2-core machine's setups
#   bash benches/scaling.sh --duration 3 --rounds 1           # a quick look
#   bash benches/scaling.sh --workers "1 2 4 8" --server-cpus "0 0-1 0-3 0-7" \
#        --load-cpus 8-15                                      # a 16-core machine
#
# Options (lists are space-separated, in one argument):
#   --workers LIST         worker counts to run (default "1 1 2")
#   --server-cpus LIST     the CPUs each worker count's server is pinned to, one taskset-style
#                          CPU list per worker count, in the same order (default "1 0 0,1");
#                          a single entry is used for every worker count
#   --load-cpus LIST       the load generator's CPUs (default "0"): wrk runs one thread per
#                          CPU, echo_load one process per CPU (it is single-threaded), each
#                          pinned to its CPU and given an equal share of the connections
#   --duration SECONDS     seconds of load per run (default 10)
#   --rounds N             runs of every (setup, server) pair; medians are reported (default 3)
#   --connections LIST     sets both lists below
#   --http-connections LIST  wrk's connections (default "64 256")
#   --echo-connections LIST  echo_load's connections (default "100 1000")
#   --protocols LIST       "http echo" (default both)
#   --prebuilt DIR         take the binaries from DIR instead of building them (no cargo, no
#                          go needed): http_server, tokio_http_server, echo_server,
#                          tokio_echo_server, echo_load, go_http_server, go_http_raw_server,
#                          go_echo_server, and wrk if it is not on PATH; a missing Go server
#                          is skipped. ../shared/device/bundle.sh makes such a folder
#                          (.device-bundle/bin) for a machine that reaches no package registry.
#
# The defaults are this 2-core machine's three setups, load on CPU 0 in all: 1 worker on CPU 1
# (nothing shared: the honest per-core figure), 1 worker on CPU 0 (sharing the load's CPU), and
# 2 workers on CPUs 0 and 1 (worker 0 shares the load's CPU: the third setup against the second
# shows what a second core adds under that contention; it is not a scaling figure).
#
# Servers: examples/http_server and examples/echo_server (greenweave: one runtime per worker,
# one SO_REUSEPORT listener each, worker i pinned to the i-th server CPU), examples/
# tokio_http_server and examples/tokio_echo_server (tokio's multi-thread runtime, one listener,
# work stealing, its threads pinned round robin to the server CPUs), benches/go/http_server.go
# (Go's net/http, what Go users run), benches/go/http_raw_server.go (the same replies as ours,
# hand-rolled on net.Conn) and benches/go/echo_server.go (GOMAXPROCS=N; Go's threads are kept
# on the server CPUs by taskset only). Every server process runs under `taskset -c <server
# CPUs>`. For each run the script records requests/s (wrk's, or the sum of the echo_load
# processes') and the server's CPU time (utime + stime of all its threads, /proc/<pid>/stat)
# from the start of the requests (wrk's start; for echo_load, the moment every process, all
# connected, is told to send: `echo_load --start-when`) to the load's end, over the requests
# completed: CPU µs per request.
#
# Needs taskset (util-linux). Without wrk (Debian package wrk) it skips the HTTP runs, without
# go (Debian package golang-go) the Go servers, and says so. Loopback only (127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."

WORKERS="1 1 2"
SERVER_CPUS="1 0 0,1"
LOAD_CPUS="0"
DURATION=10
ROUNDS=3
HTTP_CONNECTIONS="64 256"
ECHO_CONNECTIONS="100 1000"
PROTOCOLS="http echo"
PREBUILT=""

say() { printf 'scaling: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

while (( $# )); do
  case $1 in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  esac
  (( $# >= 2 )) || die "$1 needs a value (see --help)"
  case $1 in
    --workers) WORKERS=$2 ;;
    --server-cpus) SERVER_CPUS=$2 ;;
    --load-cpus) LOAD_CPUS=$2 ;;
    --duration) DURATION=$2 ;;
    --rounds) ROUNDS=$2 ;;
    --connections) HTTP_CONNECTIONS=$2; ECHO_CONNECTIONS=$2 ;;
    --http-connections) HTTP_CONNECTIONS=$2 ;;
    --echo-connections) ECHO_CONNECTIONS=$2 ;;
    --protocols) PROTOCOLS=$2 ;;
    --prebuilt) PREBUILT=$(cd "$2" && pwd) || die "--prebuilt: no folder $2" ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift 2
done

# --- what can run ------------------------------------------------------------------------------
command -v taskset >/dev/null || die "taskset not found (Debian/Ubuntu package util-linux): pinning is the point of this benchmark"
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "--duration: not a whole number of seconds > 0: $DURATION"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds: not a positive whole number: $ROUNDS"
read -r -a worker_list <<<"$WORKERS"
read -r -a server_cpu_list <<<"$SERVER_CPUS"
(( ${#worker_list[@]} > 0 )) || die "--workers: no worker count"
if (( ${#server_cpu_list[@]} == 1 )); then
  for (( i = 1; i < ${#worker_list[@]}; i++ )); do server_cpu_list+=("${server_cpu_list[0]}"); done
fi
(( ${#server_cpu_list[@]} == ${#worker_list[@]} )) \
  || die "--server-cpus: give one CPU list per worker count (${#worker_list[@]}) or one for all"
for w in "${worker_list[@]}"; do [[ $w =~ ^[1-9][0-9]*$ ]] || die "--workers: not a positive whole number: $w"; done
for cpus in "${server_cpu_list[@]}" "$LOAD_CPUS"; do
  taskset -c "$cpus" true 2>/dev/null || die "cannot pin to CPUs $cpus (nproc says $(nproc))"
done
# The load CPUs one by one (taskset's list syntax expanded), for wrk's threads and echo_load's
# processes.
load_cpu_each=()
for part in ${LOAD_CPUS//,/ }; do
  if [[ $part == *-* ]]; then
    for (( c = ${part%-*}; c <= ${part#*-}; c++ )); do load_cpu_each+=("$c"); done
  else
    load_cpu_each+=("$part")
  fi
done
load_count=${#load_cpu_each[@]}

have_wrk=1 have_go=1
[[ -n $PREBUILT && -x $PREBUILT/wrk ]] && PATH=$PREBUILT:$PATH
command -v wrk >/dev/null || { have_wrk=0; say "SKIPPING the HTTP runs: wrk not found (Debian package wrk)"; }
if [[ -n $PREBUILT ]]; then
  [[ -x $PREBUILT/go_echo_server ]] || { have_go=0; say "SKIPPING the Go servers: none in $PREBUILT"; }
else
  command -v go >/dev/null || { have_go=0; say "SKIPPING the Go servers: go not found (Debian package golang-go)"; }
fi
protocols=()
for protocol in $PROTOCOLS; do
  case $protocol in
    http) (( have_wrk )) && protocols+=(http) ;;
    echo) protocols+=(echo) ;;
    *) die "--protocols: http or echo, not $protocol" ;;
  esac
done
(( ${#protocols[@]} )) || die "nothing to run"
declare -A servers_of=([http]="greenweave tokio" [echo]="greenweave tokio")
if (( have_go )); then
  servers_of[http]+=" go go-raw"
  servers_of[echo]+=" go"
fi
declare -A connections_of=([http]=$HTTP_CONNECTIONS [echo]=$ECHO_CONNECTIONS)

# --- open files: each side needs one descriptor per connection, plus a few ---------------------
max_connections=0
for c in $HTTP_CONNECTIONS $ECHO_CONNECTIONS; do
  [[ $c =~ ^[1-9][0-9]*$ ]] || die "connections: not a positive whole number: $c"
  (( c >= load_count )) || die "connections: $c is fewer than the $load_count load CPUs"
  (( c > max_connections )) && max_connections=$c
done
hard=$(ulimit -Hn)
[[ $hard == unlimited ]] || (( hard >= max_connections + 64 )) \
  || die "$max_connections connections need about $(( max_connections + 64 )) open files, the hard limit is $hard"
ulimit -Sn "$hard"

# --- build -------------------------------------------------------------------------------------
work=$(mktemp -d)
if [[ -n $PREBUILT ]]; then
  bin_dir=$PREBUILT
  for b in http_server tokio_http_server echo_server tokio_echo_server echo_load; do
    [[ -x $bin_dir/$b ]] || die "--prebuilt: $bin_dir/$b is missing"
  done
else
  say "building the servers and echo_load in release"
  cargo build --quiet --release --example http_server --example tokio_http_server \
    --example echo_server --example tokio_echo_server --example echo_load
  bin_dir=${CARGO_TARGET_DIR:-target}/release/examples
fi
declare -A server_bin=(
  [http greenweave]=$bin_dir/http_server [http tokio]=$bin_dir/tokio_http_server
  [echo greenweave]=$bin_dir/echo_server [echo tokio]=$bin_dir/tokio_echo_server
)
if (( have_go )) && [[ -n $PREBUILT ]]; then
  server_bin+=([http go]=$PREBUILT/go_http_server [http go-raw]=$PREBUILT/go_http_raw_server
               [echo go]=$PREBUILT/go_echo_server)
elif (( have_go )); then
  say "building the Go servers ($(go version | cut -d' ' -f3))"
  export GOCACHE=${GOCACHE:-$work/go-cache}
  go build -o "$work/go_http_server" benches/go/http_server.go
  go build -o "$work/go_http_raw_server" benches/go/http_raw_server.go
  go build -o "$work/go_echo_server" benches/go/echo_server.go
  server_bin+=([http go]=$work/go_http_server [http go-raw]=$work/go_http_raw_server
               [echo go]=$work/go_echo_server)
fi
clk_tck=$(getconf CLK_TCK)

# --- one run -----------------------------------------------------------------------------------
server_pid=""
load_pids=()
cleanup() {
  local pid
  for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
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

# Busy ticks (user, nice, system, irq, softirq) summed over all CPUs.
machine_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }

# Waits up to 30 s for a line matching $2 in file $1 while process $3 lives.
wait_for_line() {
  local i
  for (( i = 0; i < 3000; i++ )); do
    grep -q -- "$2" "$1" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

# One run: sets run_figure[rps|us|busy] and run_row.
declare -A run_figure
run_one() {
  local protocol=$1 connections=$2 workers=$3 cpus=$4 server=$5
  local server_log=$work/server.log
  local command=("${server_bin[$protocol $server]}" --addr 127.0.0.1:0)
  case $server in
    greenweave | tokio) command+=(--workers "$workers" --pin "$cpus") ;;
  esac
  # Emptied here, not by the redirection below, which happens in the background child: the
  # wait that follows must not find the previous server's line.
  : >"$server_log"
  GOMAXPROCS=$workers taskset -c "$cpus" "${command[@]}" >"$server_log" 2>&1 &
  server_pid=$!
  wait_for_line "$server_log" "listening on" "$server_pid" \
    || die "$server $protocol server did not start: $(cat "$server_log")"
  local addr
  addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$server_log" | head -1)

  local c0 c1 t0 t1 m0 m1 l0 l1 lt0 i
  l0=$(children_ticks)
  lt0=$(date +%s%N)
  load_pids=()
  if [[ $protocol == http ]]; then
    taskset -c "$LOAD_CPUS" wrk -t "$load_count" -c "$connections" -d "${DURATION}s" \
      "http://$addr/" >"$work/load.0" 2>&1 &
    load_pids+=($!)
  else
    for (( i = 0; i < load_count; i++ )); do
      # An equal share of the connections each; the first ones take the remainder.
      local share=$(( connections / load_count + (i < connections % load_count ? 1 : 0) ))
      : >"$work/load.$i" # before the wait below looks for its line (see server_log)
      taskset -c "${load_cpu_each[i]}" "$bin_dir/echo_load" --addr "$addr" \
        --connections "$share" --duration "$DURATION" --start-when "$work/start" \
        >"$work/load.$i" 2>&1 &
      load_pids+=($!)
    done
  fi
  # echo_load connects everything first, then waits for the start file and sends (and times)
  # requests; the server is measured from then, one interval for every process. wrk sends as
  # soon as each connection is up, so from its start.
  if [[ $protocol == echo ]]; then
    for (( i = 0; i < load_count; i++ )); do
      wait_for_line "$work/load.$i" "connected, waiting" "${load_pids[i]}" \
        || die "echo_load did not connect to $server: $(cat "$work/load.$i")"
    done
  fi
  m0=$(machine_ticks)
  c0=$(cpu_ticks "$server_pid")
  t0=$(date +%s%N)
  [[ $protocol == echo ]] && touch "$work/start"
  local status=0 pid
  for pid in "${load_pids[@]}"; do wait "$pid" || status=$?; done
  load_pids=()
  c1=$(cpu_ticks "$server_pid")
  t1=$(date +%s%N)
  m1=$(machine_ticks)
  l1=$(children_ticks)
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  (( status == 0 )) || die "the load failed against $server (exit $status): $(cat "$work"/load.*)"

  local requests=0 rps=0 errors=""
  if [[ $protocol == http ]]; then
    read -r requests < <(awk '/requests in/ { print $1 }' "$work/load.0")
    read -r rps < <(awk '/^Requests\/sec:/ { print $2 }' "$work/load.0")
    errors=$(grep -E 'Socket errors|Non-2xx' "$work/load.0" | tr -s ' ' | paste -sd';' || true)
    [[ -n $requests && -n $rps ]] || die "cannot parse wrk's output: $(cat "$work/load.0")"
  else
    for (( i = 0; i < load_count; i++ )); do
      local n r
      read -r n r < <(awk '/^requests:/ { print $2, $7 }' "$work/load.$i")
      [[ -n $n ]] || die "cannot parse echo_load's output: $(cat "$work/load.$i")"
      requests=$(( requests + n ))
      rps=$(awk -v a="$rps" -v b="$r" 'BEGIN { print a + b }')
    done
  fi
  rm -f "$work"/load.* "$work/start"
  local figures
  figures=$(awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$clk_tck" -v n="$requests" \
    -v m0="$m0" -v m1="$m1" -v l0="$l0" -v l1="$l1" -v lt0="$lt0" \
    'BEGIN { cpu = (c1 - c0) / hz; wall = (t1 - t0) / 1e9; load = (l1 - l0) / hz;
             load_wall = (t1 - lt0) / 1e9; other = (m1 - m0) / hz - cpu - load * wall / load_wall;
             printf "%.2f %.1f %.2f %.0f %.0f", cpu, 100 * cpu / wall, cpu * 1e6 / n,
                    100 * load / load_wall, 100 * (other > 0 ? other : 0) / wall }')
  local cpu busy us load other
  read -r cpu busy us load other <<<"$figures"
  run_figure=([rps]=$rps [us]=$us [busy]=$busy)
  run_row=$(printf '| %s | %s | %s | %s (CPUs %s) | %s | %.0f | %s s (%s%%) | %s | %s%% | %s%% | %s |' \
    "$round" "$protocol" "$connections" "$workers" "$cpus" "$server" "$rps" "$cpu" "$busy" "$us" \
    "$load" "$other" "${errors:-none}")
}

median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# --- the runs ----------------------------------------------------------------------------------
declare -A result # "$protocol $connections $setup $server $round $figure" -> value
echo "every core, greenweave vs tokio multi-thread vs Go: $(date -u '+%Y-%m-%d %H:%M UTC')"
if [[ -n $PREBUILT ]]; then
  echo "prebuilt binaries from $PREBUILT, $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)"
else
  echo "commit $(git rev-parse --short HEAD)$([[ -z $(git status --porcelain -- src asm build.rs examples benches/go Cargo.toml) ]] || echo ' (with uncommitted changes)'), $(rustc --version)$( (( have_go )) && echo ", $(go version | cut -d' ' -f3)"), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)"
fi
echo "$(uname -sr), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load generator on CPUs $LOAD_CPUS ($load_count wrk thread(s) / echo_load process(es)); $DURATION s per run, $ROUNDS round(s)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "Per run: the server's CPU time (and as a percentage of one CPU), the load generator's CPU"
echo "(percent of one CPU), and the CPU everything else on the machine used meanwhile (other"
echo "people's builds: a large figure means the run was disturbed)."
echo
echo "| round | protocol | connections | workers | server | requests/s | server CPU | CPU µs/request | load CPU | others' CPU | load errors |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
setups=${#worker_list[@]}
for (( round = 1; round <= ROUNDS; round++ )); do
  for protocol in "${protocols[@]}"; do
    read -r -a servers <<<"${servers_of[$protocol]}"
    # Alternate the order from round to round, so drift does not favour one server.
    (( round % 2 )) || { reversed=(); for (( i = ${#servers[@]} - 1; i >= 0; i-- )); do reversed+=("${servers[i]}"); done; servers=("${reversed[@]}"); }
    for connections in ${connections_of[$protocol]}; do
      for (( setup = 0; setup < setups; setup++ )); do
        for server in "${servers[@]}"; do
          run_one "$protocol" "$connections" "${worker_list[setup]}" "${server_cpu_list[setup]}" "$server"
          echo "$run_row"
          for figure in "${!run_figure[@]}"; do
            result["$protocol $connections $setup $server $round $figure"]=${run_figure[$figure]}
          done
        done
      done
    done
  done
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# --- the tables --------------------------------------------------------------------------------
med() { # protocol connections setup server figure
  local values="" r
  for (( r = 1; r <= ROUNDS; r++ )); do values+="${result["$1 $2 $3 $4 $r $5"]} "; done
  echo "${values% }" | median
}
echo
echo "Medians of $ROUNDS round(s). Ratio: greenweave / the best peer (requests/s: above 1 means"
echo "greenweave served more; CPU per request: below 1 means greenweave spent less)."
for protocol in "${protocols[@]}"; do
  read -r -a servers <<<"${servers_of[$protocol]}"
  echo
  header="| connections | workers (server CPUs) |"
  rule="|---|---|"
  for server in "${servers[@]}"; do header+=" $server req/s |"; rule+="---|"; done
  header+=" ratio |"; rule+="---|"
  for server in "${servers[@]}"; do header+=" $server µs/req |"; rule+="---|"; done
  header+=" ratio |"; rule+="---|"
  echo "$protocol:"
  echo
  echo "$header"
  echo "$rule"
  for connections in ${connections_of[$protocol]}; do
    for (( setup = 0; setup < setups; setup++ )); do
      row="| $connections | ${worker_list[setup]} (${server_cpu_list[setup]}) |"
      best_rps=0 best_us=0 ours_rps=0 ours_us=0
      for server in "${servers[@]}"; do
        rps=$(med "$protocol" "$connections" "$setup" "$server" rps)
        row+=" $(printf '%.0f' "$rps") |"
        if [[ $server == greenweave ]]; then ours_rps=$rps
        else best_rps=$(awk -v a="$best_rps" -v b="$rps" 'BEGIN { print (b > a) ? b : a }'); fi
      done
      row+=" $(awk -v a="$ours_rps" -v b="$best_rps" 'BEGIN { printf "%.2fx", (b > 0) ? a / b : 0 }') |"
      for server in "${servers[@]}"; do
        us=$(med "$protocol" "$connections" "$setup" "$server" us)
        row+=" $us |"
        if [[ $server == greenweave ]]; then ours_us=$us
        else best_us=$(awk -v a="$best_us" -v b="$us" 'BEGIN { print (a == 0 || b < a) ? b : a }'); fi
      done
      row+=" $(awk -v a="$ours_us" -v b="$best_us" 'BEGIN { printf "%.2fx", (b > 0) ? a / b : 0 }') |"
      echo "$row"
    done
  done
done

echo
echo "Scaling: each setup's median requests/s over the first setup's (${worker_list[0]} worker(s) on CPUs ${server_cpu_list[0]})."
echo
header="| protocol | connections | server |"
rule="|---|---|---|"
for (( setup = 1; setup < setups; setup++ )); do
  header+=" ${worker_list[setup]} (${server_cpu_list[setup]}) / ${worker_list[0]} (${server_cpu_list[0]}) |"
  rule+="---|"
done
echo "$header"
echo "$rule"
for protocol in "${protocols[@]}"; do
  read -r -a servers <<<"${servers_of[$protocol]}"
  for connections in ${connections_of[$protocol]}; do
    for server in "${servers[@]}"; do
      row="| $protocol | $connections | $server |"
      first=$(med "$protocol" "$connections" 0 "$server" rps)
      for (( setup = 1; setup < setups; setup++ )); do
        rps=$(med "$protocol" "$connections" "$setup" "$server" rps)
        row+=" $(awk -v a="$rps" -v b="$first" 'BEGIN { printf "%.2fx", (b > 0) ? a / b : 0 }') |"
      done
      echo "$row"
    done
  done
done
