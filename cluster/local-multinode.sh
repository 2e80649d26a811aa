#!/usr/bin/env bash
# A local multi-node Ray cluster on one machine: one head and N worker raylets, each a
# separate Ray node. Workers advertise {"docker": 1} so that Docker cells can be pinned to them.
#
#   cluster/local-multinode.sh start [--port 6390] [--head-cpus 1] [--worker-cpus 1] [--workers 2]
#                                    [--state DIR] [--dashboard] [--dashboard-port 8265]
#                                    [--dashboard-agent-port 52365]
#                                    [--object-store-bytes 200000000] [--worker-private DIR]...
#   cluster/local-multinode.sh stop  [--state DIR]
#   cluster/local-multinode.sh address [--state DIR]      # prints 127.0.0.1:PORT
#   eval "$(cluster/local-multinode.sh env [--state DIR])"  # auth token + RAY_ADDRESS for clients
#
# --worker-private DIR (repeatable; needs root, or CAP_SYS_ADMIN): each worker raylet starts in a
# mount namespace of its own where DIR is an empty tmpfs, so that its cells cannot see what the
# head's side keeps there (a run root, task directories): nodes without a shared filesystem,
# on one machine.
#
# Every node gets its own --temp-dir below the state directory, and RAY_TMPDIR points there
# too, so that `stop` can find exactly the processes this script started (their command lines
# name the state directory) and never touches another Ray instance on the machine: it does
# not use `ray stop`, which kills every Ray process of the user.
set -euo pipefail

cmd="${1:-}"
[ -n "$cmd" ] && shift
port=6390
head_cpus=1
worker_cpus=1
workers=2
dashboard=false
dashboard_port=8265
agent_port=52365
store=200000000
private=()
state="${RB_MULTINODE_STATE:-/tmp/rbmn-$(id -u)}"
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    --head-cpus) head_cpus="$2"; shift 2 ;;
    --worker-cpus) worker_cpus="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --state) state="$2"; shift 2 ;;
    --dashboard) dashboard=true; shift ;;
    --dashboard-port) dashboard_port="$2"; shift 2 ;;
    --dashboard-agent-port) agent_port="$2"; shift 2 ;;
    --object-store-bytes) store="$2"; shift 2 ;;
    --worker-private) private+=("$2"); shift 2 ;;
    *) echo "error: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

ray_bin="${RAY_BIN:-$(command -v ray || true)}"
if [ -z "$ray_bin" ]; then
  here="$(cd "$(dirname "$0")/.." && pwd)"
  ray_bin="$here/.venv/bin/ray"
fi

# Unix socket paths must stay under ~107 bytes: keep the state directory short.
if [ "${#state}" -gt 40 ]; then
  echo "error: --state $state is too long for Ray's socket paths (keep it under 40 characters)" >&2
  exit 2
fi

our_pids() {
  # Processes whose command line names our state directory (gcs, raylets, workers, agents).
  # The glob expands before grep starts, so grep never lists itself.
  grep -laF -- "$state/" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 | grep -vx "$$" || true
}

case "$cmd" in
  start)
    if [ -f "$state/address" ] && [ -n "$(our_pids)" ]; then
      echo "error: a cluster from $state is already running at $(cat "$state/address") (stop it first)" >&2
      exit 2
    fi
    mkdir -p "$state"
    # Token authentication with a token of this cluster's own (Ray >= 2.5x enables token auth
    # for new clusters and otherwise shares ~/.ray/auth_token with every local cluster).
    # Clients joining the cluster export the same two variables (see `env` below).
    if [ ! -s "$state/auth_token" ]; then
      (umask 077; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$state/auth_token")
    fi
    # Workers at nice 0, not Ray's 15: cell runners mostly wait, and at 15 any busy process on
    # the host starves them (ray_bench/onray/start.py says more).
    export RAY_TMPDIR="$state" RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=token \
      RAY_AUTH_TOKEN_PATH="$state/auth_token" RAY_worker_niceness="${RAY_worker_niceness:-0}"
    "$ray_bin" start --head --port "$port" --num-cpus "$head_cpus" --temp-dir "$state/head" \
      --include-dashboard "$dashboard" --dashboard-host 127.0.0.1 --dashboard-port "$dashboard_port" \
      --dashboard-agent-listen-port "$agent_port" \
      --object-store-memory "$store" --disable-usage-stats >"$state/head.log" 2>&1 \
      || { cat "$state/head.log" >&2; exit 1; }
    echo "127.0.0.1:$port" >"$state/address"
    for i in $(seq 1 "$workers"); do
      hide=()
      if [ "${#private[@]}" -gt 0 ]; then
        # a private mount namespace; the raylet and its workers inherit it
        mounts=""
        for dir in "${private[@]}"; do mounts+="mount -t tmpfs -o size=512m rb-private '$dir' && "; done
        hide=(unshare --mount --propagation private sh -c "${mounts}exec \"\$@\"" sh)
      fi
      "${hide[@]}" "$ray_bin" start --address "127.0.0.1:$port" --num-cpus "$worker_cpus" \
        --resources '{"docker": 1}' --temp-dir "$state/w$i" --object-store-memory "$store" \
        --disable-usage-stats \
        >"$state/worker-$i.log" 2>&1 || { cat "$state/worker-$i.log" >&2; exit 1; }
    done
    echo "127.0.0.1:$port"
    ;;
  stop)
    pids="$(our_pids)"
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      for _ in $(seq 1 50); do
        [ -z "$(our_pids)" ] && break
        sleep 0.1
      done
      pids="$(our_pids)"
      # shellcheck disable=SC2086
      [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
    fi
    rm -f "$state/address"
    ;;
  address)
    cat "$state/address"
    ;;
  env)
    # eval "$(cluster/local-multinode.sh env)" before `ray-bench execute --address ...`
    echo "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$state/auth_token RAY_ADDRESS=$(cat "$state/address")"
    ;;
  *)
    echo "usage: $0 start|stop|address|env [options]" >&2
    exit 2
    ;;
esac
