#!/usr/bin/env bash
# tools/slowlink.sh: run qc-perf over MPI on a rate-limited link.
#
# Creates a network namespace (qcslow), brings up its loopback and limits it
# with a token bucket filter to RATE (default 1gbit; burst 128kb, latency
# 50ms), then runs qc-perf --transport mpi under OpenMPI's mpirun inside the
# namespace, over TCP on that loopback only:
#   mpirun -np NP --oversubscribe --mca pml ob1 --mca btl tcp,self
#          --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
# so that every byte between ranks (shared memory disabled) crosses the
# limited loopback. All NP ranks share the one link: with 4 ranks at
# 1 Gbit/s each rank gets about a quarter, as with 4 hosts behind one
# 1 Gbit/s switch uplink. The namespace is removed on exit (trap), whatever
# happens. The host's real interfaces are never touched.
#
# Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN) for `ip netns` and `tc`;
# without them the script stops with a message before doing anything.
#
# Usage: tools/slowlink.sh [-np N] [--rate RATE] [--qc-perf PATH] [--] [qc-perf args...]
#        tools/slowlink.sh [--rate RATE] --exec [--] COMMAND [ARGS...]
#   -np N          ranks (default 4)
#   --rate RATE    tc rate (default 1gbit)
#   --qc-perf PATH the binary (default: build*/tools/qc-perf/qc-perf, newest)
#   --exec         run COMMAND in the namespace instead (it starts its own
#                  mpirun, with the TCP-on-lo flags above; OMPI_ALLOW_RUN_AS_ROOT*
#                  and GLOO_SOCKET_IFNAME=lo are set), e.g. the PyTorch comparison:
#                  tools/slowlink.sh --exec -- /usr/bin/python3 examples/torch_ddp_digits.py --np 4
#   everything else is passed to qc-perf (after --transport mpi)
# Example (the docs/benchmarks.md slow-link table):
#   tools/slowlink.sh -np 4 -- -b 64K -e 16M -f 4 -a sra,ring -w 1 -i 3 \
#       -c none,fp16,minmax:8,minmax:4,minmax:2,qsgd,onebit+ef --profile --json slow.json
set -euo pipefail

NP=4
RATE=1gbit
QCPERF=""
NS=qcslow
EXEC=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -np) NP="$2"; shift 2 ;;
    --exec) EXEC=1; shift ;;
    --rate) RATE="$2"; shift 2 ;;
    --qc-perf) QCPERF="$2"; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done

if [[ $EXEC -eq 1 ]]; then
  [[ $# -gt 0 ]] || { echo "slowlink.sh: --exec needs a command" >&2; exit 2; }
  QCPERF=/bin/true  # not used
elif [[ -z "$QCPERF" ]]; then
  root="$(cd "$(dirname "$0")/.." && pwd)"
  QCPERF="$(ls -t "$root"/build*/tools/qc-perf/qc-perf 2>/dev/null | head -1 || true)"
fi
if [[ -z "$QCPERF" || ! -x "$QCPERF" ]]; then
  echo "slowlink.sh: qc-perf not found; build it or pass --qc-perf PATH" >&2
  exit 2
fi
QCPERF="$(readlink -f "$QCPERF")"
for tool in ip tc mpirun; do
  command -v "$tool" >/dev/null || { echo "slowlink.sh: '$tool' not found" >&2; exit 2; }
done
if [[ "$(id -u)" != 0 ]]; then
  echo "slowlink.sh: needs root (ip netns / tc need CAP_SYS_ADMIN and CAP_NET_ADMIN)" >&2
  exit 2
fi
if ip netns list | grep -qw "$NS"; then
  echo "slowlink.sh: namespace '$NS' already exists (another run, or a leftover:" \
       "'ip netns del $NS')" >&2
  exit 2
fi

cleanup() { ip netns del "$NS" 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
ip netns exec "$NS" tc qdisc add dev lo root tbf rate "$RATE" burst 128kb latency 50ms
echo "# slowlink: namespace $NS, lo: $(ip netns exec "$NS" tc qdisc show dev lo)" >&2

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [[ $EXEC -eq 1 ]]; then
  GLOO_SOCKET_IFNAME=lo ip netns exec "$NS" "$@"
  exit $?
fi
ip netns exec "$NS" mpirun -np "$NP" --oversubscribe \
  --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  "$QCPERF" --transport mpi "$@"
