#!/bin/sh
# netns_ecmp.sh: path steering end to end. Two network namespaces joined by two veth pairs;
# the sender's route to the receiver is a two-way ECMP route hashed on the L4 5-tuple
# (fib_multipath_hash_policy=1). The kernel itself tells us (ip route get ... sport P) which
# path each candidate source port takes; a fake agent assigns such ports to the shim's sockets
# with chosen weights; the bytes counted on each veth must match: each socket's share on the
# path its port was assigned, in three runs (0.7/0.3, swapped, and one socket on one path).
# Exit 0 = pass, 77 = skipped (not root, or no `ip netns`), anything else = fail.
# Traffic stays inside the two namespaces this script creates; they are removed on exit.
set -u
B=${B:-build}
DIR=$(cd "$(dirname "$0")/.." && pwd)
cd "$DIR" || exit 1
LIB=$B/libnccl-net-c4.so
DRV=$B/fake_nccl

if [ "$(id -u)" != 0 ]; then echo "SKIP netns-ecmp: needs root (network namespaces, veth, sysctl)"; exit 77; fi
if ! command -v ip >/dev/null 2>&1; then echo "SKIP netns-ecmp: iproute2 'ip' not found"; exit 77; fi
NA=c4a-$$; NB=c4b-$$
TMP=$(mktemp -d)
cleanup() { ip netns del "$NA" 2>/dev/null; ip netns del "$NB" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM
if ! ip netns add "$NA" 2>/dev/null; then echo "SKIP netns-ecmp: 'ip netns add' failed here"; exit 77; fi
ip netns add "$NB" || exit 1

set -e
A="ip -n $NA"; Bn="ip -n $NB"
ip link add a0 netns "$NA" type veth peer name b0 netns "$NB"
ip link add a1 netns "$NA" type veth peer name b1 netns "$NB"
$A link set lo up; $Bn link set lo up
$A addr add 10.91.0.1/24 dev a0; $A addr add 10.91.1.1/24 dev a1; $A addr add 10.91.8.1/32 dev lo
$Bn addr add 10.91.0.2/24 dev b0; $Bn addr add 10.91.1.2/24 dev b1; $Bn addr add 10.91.9.1/32 dev lo
for i in a0 a1; do $A link set $i up; done
for i in b0 b1; do $Bn link set $i up; done
ip netns exec "$NA" sysctl -qw net.ipv4.fib_multipath_hash_policy=1
# Replies all return over b0; data arriving on b1 must not be dropped by reverse-path checks.
for k in all default b0 b1; do ip netns exec "$NB" sysctl -qw net.ipv4.conf.$k.rp_filter=0; done
$A route add 10.91.9.1/32 src 10.91.8.1 nexthop via 10.91.0.2 dev a0 nexthop via 10.91.1.2 dev a1
$Bn route add 10.91.8.1/32 via 10.91.0.1 dev b0
set +e

PORT=4792 # the shim's fixed listen port: part of every flow's 5-tuple
path_of() { $A route get 10.91.9.1 from 10.91.8.1 ipproto tcp sport "$1" dport $PORT | sed -n 's/.* dev \([a-z0-9]*\).*/\1/p' | head -1; }
P0=""; P1=""
p=41000
while [ $p -lt 41400 ]; do
  d=$(path_of $p)
  if [ "$d" = a0 ] && [ $(echo $P0 | wc -w) -lt 3 ]; then P0="$P0 $p"; fi
  if [ "$d" = a1 ] && [ $(echo $P1 | wc -w) -lt 3 ]; then P1="$P1 $p"; fi
  [ $(echo $P0 $P1 | wc -w) -ge 6 ] && break
  p=$((p+1))
done
set -- $P0; A1=$1; A2=$2; A3=$3
set -- $P1; B1=$1; B2=$2; B3=$3
if [ -z "${A3:-}" ] || [ -z "${B3:-}" ]; then echo "FAIL netns-ecmp: could not find ports for both paths ($P0 | $P1)"; exit 1; fi
echo "kernel ECMP choice: ports$P0 -> a0, ports$P1 -> a1"

tx() { cat /sys/class/net/$1/statistics/tx_bytes; }
MSGS=40; SIZE=1048576; TOTAL=$((MSGS*SIZE))
fails=0
run() { # name, expected share on a0 (percent), flows...
  name=$1; want0=$2; shift 2
  hf=$TMP/handle-$name
  ip netns exec "$NB" env C4_SHIM_ADDR=10.91.9.1 C4_SHIM_PORT=$PORT C4_AGENT_SOCKET=off \
    "$DRV" "$LIB" ecmp-recv "$hf" $MSGS $SIZE > "$TMP/recv.log" 2>&1 &
  rpid=$!
  b0=$(ip netns exec "$NA" cat /sys/class/net/a0/statistics/tx_bytes)
  b1=$(ip netns exec "$NA" cat /sys/class/net/a1/statistics/tx_bytes)
  ip netns exec "$NA" env C4_SHIM_ADDR=10.91.8.1 C4_SHIM_PORT=$PORT C4_LOOKUP_TIMEOUT_MS=2000 \
    "$DRV" "$LIB" ecmp-send "$hf" $MSGS $SIZE "$@" > "$TMP/send.log" 2>&1
  src=$?
  wait $rpid; rrc=$?
  e0=$(ip netns exec "$NA" cat /sys/class/net/a0/statistics/tx_bytes)
  e1=$(ip netns exec "$NA" cat /sys/class/net/a1/statistics/tx_bytes)
  d0=$((e0-b0)); d1=$((e1-b1))
  # Each path must carry at least its share of the payload and at most that plus 10% for
  # TCP/IP headers and our 24-byte message headers (+64 KiB for handshakes and stray packets).
  lo0=$((TOTAL/100*want0)); hi0=$((lo0 + lo0/10 + 65536))
  lo1=$((TOTAL/100*(100-want0))); hi1=$((lo1 + lo1/10 + 65536))
  if [ $src -ne 0 ] || [ $rrc -ne 0 ]; then
    echo "FAIL netns-ecmp $name: sender rc=$src receiver rc=$rrc"; cat "$TMP/send.log" "$TMP/recv.log"; fails=$((fails+1))
  elif [ $d0 -lt $lo0 ] || [ $d0 -gt $hi0 ] || [ $d1 -lt $lo1 ] || [ $d1 -gt $hi1 ]; then
    echo "FAIL netns-ecmp $name: a0 carried $d0 (want $lo0..$hi0), a1 carried $d1 (want $lo1..$hi1)"; fails=$((fails+1))
  else
    echo "PASS netns-ecmp $name: flows $* -> a0 $d0 bytes, a1 $d1 bytes of $TOTAL payload"
  fi
}
run split-70-30 70 $A1:0.7 $B1:0.3
run swapped-30-70 30 $A2:0.3 $B2:0.7
run one-path-a1 0 $B3:1.0
[ $fails -eq 0 ]
