#!/usr/bin/env bash
# scripts/cluster.sh — a cluster of N hosts on this machine, to run titan across hosts over a real network.
#
# Each host is a network namespace with its own network stack, connected by a veth pair to one bridge in the
# root namespace (where mpirun runs), and, for every process Open MPI starts there, its own hostname (a UTS
# namespace) and its own /dev/shm (a mount namespace): Open MPI sees N nodes and moves bytes between them
# over TCP only, titan's watchdog board (shared memory) is per host, as on real machines. The filesystem is
# shared (the dump folder, the data), as a cluster's shared folder is.
#
#   cluster.sh up N [--slots S] [--rate R] [--loss P] [--delay D]   N hosts h1..hN (addresses 10.213.0.1..N),
#                                        S ranks each in the hostfile (default 2); every host's link shaped:
#                                        R a tc rate (e.g. 10gbit, 1gbit, 100mbit; both directions),
#                                        P the fraction of packets dropped on the way in (e.g. 0.05),
#                                        D added one-way latency (e.g. 50ms, 100us: the kernel's netem on the
#                                        way out, or where the kernel has none, titan-netdelay holding the
#                                        packets of the way in; either way each packet between two hosts is
#                                        delayed once by a uniform D)
#   cluster.sh shape HOST [--rate R] [--loss P] [--delay D]         reshape one host's link (none: unshaped)
#   cluster.sh link HOST down|up        take a host's link down (its traffic is lost) or bring it back
#   cluster.sh mpirun ARGS...           mpirun across the hosts (the hostfile, the rsh agent that enters a
#                                        host, TCP on the cluster's subnet); ARGS as for mpirun
#   cluster.sh exec HOST CMD...         run CMD on a host (its namespaces)
#   cluster.sh status                   the hosts, their links and shaping, the processes on each
#   cluster.sh down                     kill every process on the hosts, remove namespaces, links, bridge
#   cluster.sh check                    exit 0 where a cluster can be made here, 77 (skip) with why where not
#
# Needs root (network namespaces, veth, tc; iptables for --loss and titan-netdelay). titan-netdelay is found as
# $TITAN_NETDELAY, else build/titan-netdelay beside this script's tree, else on PATH. Exit 77 means "not possible here" (what
# tests read as a skip), 2 a usage error, 1 a failure. State: $TITAN_CLUSTER_DIR (default /run/titan-cluster).
set -euo pipefail

DIR=${TITAN_CLUSTER_DIR:-/run/titan-cluster}
PREFIX=titan-h          # namespaces titan-h1 .. titan-hN
BRIDGE=titanbr0
NET=10.213.0            # host i: NET.i, the bridge (mpirun's side): NET.254
ME=$(basename "$0")

die() { echo "$ME: $*" >&2; exit 1; }
usage() { echo "$ME: $*" >&2; echo "usage: $ME up N [--slots S] [--rate R] [--loss P] [--delay D] | shape HOST ... | link HOST down|up | mpirun ARGS | exec HOST CMD | status | down | check" >&2; exit 2; }
skip() { echo "$ME: $* (skipped: a cluster of namespaces cannot be made here)" >&2; exit 77; }

host_index() {  # h3 | 3 | 10.213.0.3 -> 3
  local h=$1
  h=${h#"$NET".}; h=${h#h}
  [[ $h =~ ^[0-9]+$ ]] && [ -e "/run/netns/$PREFIX$h" ] || die "no host '$1' in the cluster (hosts: $(hosts | tr '\n' ' '))"
  echo "$h"
}
hosts() { ls /run/netns 2>/dev/null | sed -n "s/^$PREFIX\([0-9]*\)$/h\1/p" | sort -V; }

can_make() {
  [ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, veth links, tc)"
  for t in ip tc unshare mpirun; do command -v "$t" >/dev/null || skip "'$t' is not installed (scripts/setup.sh installs it)"; done
  local probe=titan-probe-$$ err
  err=$(ip netns add "$probe" 2>&1) || skip "network namespaces are not permitted: ip netns add: $err"
  err=$(ip link add tprb$$ type veth peer name tprc$$ 2>&1) || { ip netns del "$probe"; skip "veth links are not permitted: $err"; }
  ip link del tprb$$ 2>/dev/null || true
  ip netns del "$probe"
}

has_netem() {
  local probe=titan-probe-$$ ok=1
  ip netns add "$probe" && ip -n "$probe" link set lo up &&
    ip netns exec "$probe" tc qdisc add dev lo root netem delay 1ms 2>/dev/null && ok=0
  ip netns del "$probe" 2>/dev/null || true
  return $ok
}

netdelay_bin() {  # titan-netdelay's path, or nothing
  local b=${TITAN_NETDELAY:-}
  [ -n "$b" ] || b=$(cd "$(dirname "$0")/.." && pwd)/build/titan-netdelay
  [ -x "$b" ] || b=$(command -v titan-netdelay || true)
  [ -n "$b" ] && [ -x "$b" ] && echo "$b"
}

has_nfqueue() {  # netfilter's queue target (what titan-netdelay reads) in this kernel
  local probe=titan-probe-$$ ok=1
  ip netns add "$probe" &&
    ip netns exec "$probe" iptables -A INPUT -i lo -j NFQUEUE --queue-num 0 2>/dev/null && ok=0
  ip netns del "$probe" 2>/dev/null || true
  return $ok
}

# How --delay is made here: netem, netdelay (titan-netdelay on netfilter's queue), or nothing
delay_method() {
  if has_netem; then echo netem
  elif [ -n "$(netdelay_bin)" ] && command -v iptables >/dev/null && has_nfqueue; then echo netdelay
  else echo none; fi
}

# check_shape: RATE LOSS DELAY are possible here and well-formed (before anything is made or changed)
check_shape() {
  if [ -n "$DELAY" ]; then
    DELAY_METHOD=$(delay_method)
    if [ "$DELAY_METHOD" = none ]; then
      echo "$ME: --delay $DELAY needs the kernel's netem queueing discipline (sch_netem), which this kernel does not have (tc: 'Specified qdisc kind is unknown'), or titan-netdelay (built with titan; set TITAN_NETDELAY), iptables and the kernel's NFQUEUE target; --rate and --loss work without them" >&2
      exit 77
    fi
  fi
  if [ -n "$LOSS" ]; then
    command -v iptables >/dev/null || skip "--loss needs iptables (scripts/setup.sh installs it)"
    awk -v p="$LOSS" 'BEGIN { exit !(p + 0 == p && p > 0 && p < 1) }' || usage "--loss takes a fraction in (0, 1), got '$LOSS'"
  fi
  [ -z "$RATE" ] || [[ $RATE =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps)$ ]] || usage "--rate takes a tc rate such as 10gbit or 100mbit, got '$RATE'"
  [ -z "$DELAY" ] || [[ $DELAY =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || usage "--delay takes a time such as 50ms or 100us, got '$DELAY'"
}

# shape_link I RATE LOSS DELAY: host I's link. Rate: tbf on both ends of its veth (the bridge side shapes
# what goes in, the host side what goes out); delay: netem on the way out, or (no netem) titan-netdelay on the
# way in; loss: iptables in the host drops that fraction of what comes in (each packet between two hosts passes
# one host's way in and one's way out).
shape_link() {
  local i=$1 rate=$2 loss=$3 delay=$4 ns=$PREFIX$1 v=titanv$1
  tc qdisc del dev "$v" root 2>/dev/null || true
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  ip netns exec "$ns" iptables -F INPUT 2>/dev/null || true
  if [ -f "$DIR/netdelay.h$i.pid" ]; then  # the previous delay's reader, gone before its queue is taken again
    local old; old=$(cat "$DIR/netdelay.h$i.pid")
    kill "$old" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$old" 2>/dev/null || true
    rm -f "$DIR/netdelay.h$i.pid"
  fi
  if [ -n "$delay" ] && [ "${DELAY_METHOD:-netem}" = netem ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "$delay" ${rate:+rate "$rate"}
  elif [ -n "$rate" ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 400ms
  fi
  if [ -n "$rate" ]; then tc qdisc add dev "$v" root tbf rate "$rate" burst 256kb latency 400ms; fi
  if [ -n "$loss" ]; then
    ip netns exec "$ns" iptables -A INPUT -m statistic --mode random --probability "$loss" -j DROP
  fi
  if [ -n "$delay" ] && [ "${DELAY_METHOD:-netem}" = netdelay ]; then
    # the host's way in through titan-netdelay (what the loss rule lets through); ready before the rule is added
    local log=$DIR/netdelay.h$i.log
    ip netns exec "$ns" "$(netdelay_bin)" --queue 0 --delay "$delay" > "$log" 2>&1 &
    echo $! > "$DIR/netdelay.h$i.pid"
    for _ in $(seq 1 50); do grep -q "delay" "$log" 2>/dev/null && break; sleep 0.1; done
    grep -q "titan-netdelay: queue" "$log" || die "titan-netdelay did not start on h$i: $(cat "$log")"
    ip netns exec "$ns" iptables -A INPUT -i eth0 -j NFQUEUE --queue-num 0
  fi
  printf '%s\t%s\t%s\n' "${rate:--}" "${loss:--}" "${delay:--}" > "$DIR/shape.h$i"
}

parse_shape() {  # sets RATE LOSS DELAY (and SLOTS) from --rate/--loss/--delay/--slots
  RATE=""; LOSS=""; DELAY=""
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) RATE=${2:?--rate needs a value}; shift 2 ;;
      --loss) LOSS=${2:?--loss needs a value}; shift 2 ;;
      --delay) DELAY=${2:?--delay needs a value}; shift 2 ;;
      --slots) SLOTS=${2:?--slots needs a value}; [[ $SLOTS =~ ^[1-9][0-9]*$ ]] || usage "--slots takes a count >= 1, got '$SLOTS'"; shift 2 ;;
      *) usage "unknown option '$1'" ;;
    esac
  done
}

down() {
  for h in $(hosts); do
    local ns=$PREFIX${h#h}
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  done
  # until they are gone (up to 5 s): a namespace deleted under a dying process outlives its name
  for _ in $(seq 1 50); do
    local alive=0
    for h in $(hosts); do [ -z "$(ip netns pids "$PREFIX${h#h}" 2>/dev/null)" ] || alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  for h in $(hosts); do
    local i=${h#h}
    ip link del "titanv$i" 2>/dev/null || true
    ip netns del "$PREFIX$i" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$DIR"
}

up() {
  local n=${1:-}
  [[ $n =~ ^[1-9][0-9]*$ ]] && [ "$n" -le 250 ] || usage "up takes a host count in 1..250, got '${n}'"
  shift
  SLOTS=2
  parse_shape "$@"
  can_make
  [ -z "$(hosts)" ] || die "a cluster is up already ($(hosts | tr '\n' ' ')): '$ME down' first"
  check_shape
  # whatever ends `up` before the cluster is whole (a failed command, a refusal) takes the part made down with it
  trap 'rc=$?; if [ $rc -ne 0 ]; then echo "$ME: up failed; cleaning up" >&2; down; fi; exit $rc' EXIT
  mkdir -p "$DIR"
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  : > "$DIR/hostfile"
  for i in $(seq 1 "$n"); do
    local ns=$PREFIX$i
    ip netns add "$ns"
    ip link add "titanv$i" type veth peer name eth0 netns "$ns"
    ip link set "titanv$i" master "$BRIDGE" up
    ip -n "$ns" addr add "$NET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    shape_link "$i" "$RATE" "$LOSS" "$DELAY"
    echo "$NET.$i slots=$SLOTS" >> "$DIR/hostfile"
  done
  # the rsh agent mpirun starts each host's daemon with: enter the host's network namespace, then a UTS and a
  # mount namespace of its own (hostname hI, a private /dev/shm) for the daemon and every rank it starts
  cat > "$DIR/agent" <<EOF
#!/bin/bash
# Open MPI's rsh agent for the namespace cluster (written by $ME): AGENT HOST COMMAND...
host=\$1; shift
i=\${host#$NET.}
[ -e /run/netns/$PREFIX\$i ] || { echo "titan cluster agent: no host \$host" >&2; exit 1; }
export TITAN_CLUSTER_CMD="\$*"
exec ip netns exec $PREFIX\$i unshare --uts --mount --propagation private /bin/sh -c \
  'hostname "h\$0" && mount -t tmpfs -o mode=1777 titan-shm /dev/shm && eval "\$TITAN_CLUSTER_CMD"' "\$i"
EOF
  chmod +x "$DIR/agent"
  trap - EXIT
  echo "$ME: $n hosts up (h1..h$n at $NET.1..$NET.$n, $SLOTS slots each; link: rate ${RATE:-unshaped}, loss ${LOSS:-0}, delay ${DELAY:-0})"
  echo "$ME: run with: $0 mpirun -np $((n * SLOTS)) titan-train --config ..."
}

cluster_mpirun() {
  [ -f "$DIR/hostfile" ] || die "no cluster is up ('$ME up N' first)"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # TCP on the cluster's subnet only (the daemons' wire-up and the ranks' bytes), shared memory within a host;
  # keepalives on the daemons' connections: mpirun ends the job ~8 s after a host becomes unreachable
  # (Open MPI's default, 300 s idle + 9 x 20 s, or TCP's retransmissions, ~15 min, when data is in flight)
  # The hosts share this machine's cores: a host's ranks fit its slots, so Open MPI busy-polls without yielding,
  # and with more ranks in all than cores each message waits for the scheduler to run its receiver (a checkpoint
  # of the debug model over 2 hosts x 2 ranks on 2 cores: 10 s busy-polling, 0.15 s yielding). Yield as Open MPI
  # does on one oversubscribed machine.
  local slots=0 yield=()
  while read -r _ s; do slots=$((slots + ${s#slots=})); done < "$DIR/hostfile"
  # (the machine's cores: GNU nproc would report OMP_NUM_THREADS where it is set)
  [ "$slots" -gt "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" ] && yield=(--mca mpi_yield_when_idle 1)
  exec mpirun --hostfile "$DIR/hostfile" --mca plm_rsh_agent "$DIR/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$NET.0/24" --mca btl_tcp_if_include "$NET.0/24" --mca btl self,vader,tcp \
    --mca oob_tcp_keepalive_time 3 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 5 \
    ${yield[@]+"${yield[@]}"} "$@"
}

status() {
  [ -n "$(hosts)" ] || { echo "$ME: no cluster is up"; return 0; }
  for h in $(hosts); do
    local i=${h#h} s="-	-	-"
    [ -f "$DIR/shape.h$i" ] && s=$(cat "$DIR/shape.h$i")
    IFS=$'\t' read -r r l d <<< "$s"
    printf '%s  %s  link %s  rate %s  loss %s  delay %s  processes %s\n' "$h" "$NET.$i" \
      "$(cat /sys/class/net/titanv$i/operstate 2>/dev/null || echo gone)" "$r" "$l" "$d" "$(ip netns pids "$PREFIX$i" | wc -l)"
  done
}

cmd=${1:-}
[ -n "$cmd" ] || usage "a command is needed"
shift
case $cmd in
  up) up "$@" ;;
  down) down; echo "$ME: down" ;;
  check) can_make; m=$(delay_method)
         case $m in netem) w="" ;; netdelay) w=" (--delay through titan-netdelay: no netem in this kernel)" ;;
                    *) w=" (without --delay: no netem in this kernel, no titan-netdelay)" ;; esac
         echo "$ME: a cluster can be made here$w" ;;
  shape) [ $# -ge 1 ] || usage "shape needs a host"; i=$(host_index "$1"); shift; parse_shape "$@"; check_shape
         shape_link "$i" "$RATE" "$LOSS" "$DELAY" ;;
  link) [ $# -eq 2 ] || usage "link needs a host and down|up"; i=$(host_index "$1")
        case $2 in down|up) ip link set "titanv$i" "$2" ;; *) usage "link takes down or up, got '$2'" ;; esac ;;
  mpirun) cluster_mpirun "$@" ;;
  exec) [ $# -ge 2 ] || usage "exec needs a host and a command"; i=$(host_index "$1"); shift; exec ip netns exec "$PREFIX$i" "$@" ;;
  status) status ;;
  *) usage "unknown command '$cmd'" ;;
esac
