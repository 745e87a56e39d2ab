# File: bench/ucx_perftest_lib.sh
#
# Sourced by the scripts that put relay's point-to-point (bench/pingpong)
# beside UCX's own ucx_perftest (ab_pingpong.sh, compare_p2p_ucx.sh), so
# that both compare the same way.
#   perftest_run TEST SIZE ITERS [WINDOW]
#       runs ucx_perftest's server and client on 127.0.0.1 (UCX_TLS as
#       exported) and prints "latency_us bandwidth_GBps" from the client's
#       Final line (its MB/s is 2^20 B/s); WINDOW is tag_bw's -O.
#   pingpong_round_trips SIZE ITERS
#       the round trips bench/pingpong makes at SIZE bytes when asked for
#       ITERS: at most about 1 GB per size, at least 10 (kept in step with
#       bench/pingpong.cc), so tag_lat is given as many and no more.

perftest_run() {
  local test="$1" size="$2" iters="$3" window="${4:-}"
  local window_flag=() attempt out
  [[ $test == tag_bw && -n $window ]] && window_flag=(-O "$window")
  # Up to three tries, each on a fresh port: the random port can be taken,
  # or the server not listening yet after the pause (one run in about 500
  # failed that way, and took a 200-round comparison down with it).
  for attempt in 1 2 3; do
    local port=$((20000 + RANDOM % 20000))
    ucx_perftest -p "$port" -t "$test" -s "$size" -n "$iters" "${window_flag[@]}" >/dev/null 2>&1 &
    local server=$!
    sleep 0.5
    out="$(ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" "${window_flag[@]}" 2>/dev/null |
      awk '/^Final:/ {printf "%s %.3f\n", $4, $7 * 1048576 / 1e9}')"
    if [[ -z $out ]]; then
      kill "$server" 2>/dev/null || true
      wait "$server" 2>/dev/null || true
      echo "perftest_run: no result on port $port (try $attempt of 3)" >&2
      continue
    fi
    wait "$server" || true
    echo "$out"
    return 0
  done
  return 1
}

pingpong_round_trips() {
  local size="$1" iters="$2"
  local trips=$(( (1 << 30) / (size + 1) ))
  ((trips > iters)) && trips=$iters
  ((trips < 10)) && trips=10
  echo "$trips"
}
