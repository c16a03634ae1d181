#!/bin/bash
# The capacity model's measurements (docs/capacity.md): SHARDS Redis
# shards (one redis-server, or a Redis Cluster of SHARDS masters) and NODES
# agentstream nodes on this machine, pinned (the nodes to core 0, Redis
# and the load client to core 1), the many-conversations workload run
# through them (runs start on the first node, the watchers are spread over
# all of them), and Redis's own counters read before and after.
#
#   go build -o /tmp/agentstream ./cmd/agentstream
#   tools/capacity/run.sh SHARDS NODES [THREADS WATCHERS_PER_THREAD RATE]
#
# SHARDS 0 runs one node on the in-memory engine (NODES must be 1): the
# baseline the Redis engine's cost is compared with.
#
# Needs redis-server and redis-cli; uses ports 27101.. and 24181...
set -u
AS=${AS:-/tmp/agentstream}
S=$1; N=$2; TH=${3:-1000}; SUBS=${4:-2}; RATE=${5:-20}
D=$(mktemp -d)
PIDS=()
RPORTS=()
cleanup() { kill ${PIDS[@]} 2>/dev/null; wait 2>/dev/null; rm -rf $D; }
trap cleanup EXIT
for i in $(seq $S); do
  P=$((27100+i)); RPORTS+=($P)
  if [ $S -gt 1 ]; then CL="--cluster-enabled yes --cluster-config-file nodes-$P.conf"; else CL=""; fi
  taskset -c 1 redis-server --port $P --save '' --appendonly no --dir $D $CL >/dev/null 2>&1 &
  PIDS+=($!)
done
for p in ${RPORTS[@]}; do until redis-cli -p $p ping >/dev/null 2>&1; do sleep 0.1; done; done
if [ $S -eq 0 ]; then
  [ $N -eq 1 ] || { echo "SHARDS 0 (in-memory) takes one node" >&2; exit 2; }
  URL=""
elif [ $S -gt 1 ]; then
  redis-cli --cluster create $(for p in ${RPORTS[@]}; do echo -n "127.0.0.1:$p "; done) --cluster-yes >/dev/null
  until redis-cli -p ${RPORTS[0]} cluster info | grep -q cluster_state:ok; do sleep 0.2; done
  URL="redis://$(for p in ${RPORTS[@]}; do echo -n "127.0.0.1:$p,"; done | sed 's/,$//')"
else
  URL="redis://127.0.0.1:${RPORTS[0]}/0"
fi
RPIDS="${PIDS[*]}"
NURLS=()
NPIDS=()
for i in $(seq $N); do
  P=$((24180+i))
  taskset -c 0 $AS serve --addr 127.0.0.1:$P --log-level warn --http-stream-rate 1000000 --http-stream-burst 1000000 ${URL:+--redis $URL} ${AS_FLAGS:-} &
  PIDS+=($!); NPIDS+=($!); NURLS+=("http://127.0.0.1:$P")
done
for u in ${NURLS[@]}; do for i in $(seq 100); do curl -sf $u/healthz >/dev/null && break; sleep 0.1; done; done
stats() { for p in ${RPORTS[@]}; do redis-cli -p $p info | grep -E "^(used_cpu_sys|used_cpu_user|total_commands_processed|total_net_input_bytes|total_net_output_bytes):" | tr -d '\r'; done | awk -F: '{s[$1]+=$2} END {for (k in s) printf "%s=%s ", k, s[k]; print ""}'; }
cpus() { for p in ${PIDS[@]}; do awk -v p=$p '{printf "%s=%.2fs", p, ($14+$15)/100}' /proc/$p/stat; awk '/^syscr/ {r=$2} /^syscw/ {w=$2} END {printf "/%dr/%dw", r, w}' /proc/$p/io; cat /proc/$p/task/*/status 2>/dev/null | awk '/ctxt_switches/ {c+=$2} END {printf "/%dcs ", c}'; done; echo; }
B=$(stats)
CB=$(cpus)
OTHER=$(echo ${NPIDS[@]:1} ${PIDS[@]:0:$S} | tr ' ' ',')
SUBURLS=$(echo ${NURLS[@]} | tr ' ' ',')
taskset -c 1 $AS load --url ${NURLS[0]} --sub-urls $SUBURLS --transport ws --threads $TH --subs-per-thread $SUBS --rate $RATE --duration 10s --pid ${NPIDS[0]} ${OTHER:+--other-pids $OTHER} 2>&1 | grep delivered | sed -E 's/runs started.*server CPU/CPU/; s/client CPU.*//'
A=$(stats)
CA=$(cpus)
echo "processes' CPU/read calls/write calls/context switches before: $CB (redis: $RPIDS; nodes: ${NPIDS[*]})"
echo "processes' CPU/read calls/write calls/context switches after:  $CA"
echo "redis before: $B"
echo "redis after:  $A"
for u in ${NURLS[@]}; do curl -s $u/metrics | grep -E "^agentstream_(redis_write_commands_total|events_published_total|events_delivered_total) "; done
