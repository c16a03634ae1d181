#!/bin/bash
# agentstream beside Centrifugo v6, both on their Redis engines, with the
# same load client and pinning (docs/performance.md): NODES nodes of each
# on one redis-server, the nodes pinned to core 0, Redis and the load
# client to core 1. Centrifugo is built from its Go module
# (github.com/centrifugal/centrifugo/v6, into $CENTRIFUGO_DIR, once) and
# configured here: insecure client mode (anonymous WebSocket clients may
# subscribe to any channel), the HTTP API without a key, the Redis engine,
# and channel history (HISTORY publications for 300 s) so that, like
# agentstream's, each channel keeps what a reconnecting client resumes
# from. Publications go through the first node's HTTP API in batches;
# agentstream's events are published by its firehose runs on its first
# node. The subscribers are spread over all nodes of each.
#
#   go build -o /tmp/agentstream ./cmd/agentstream
#   tools/centrifugo/run.sh both|centrifugo|agentstream NODES THREADS WATCHERS_PER_THREAD RATE [ROUNDS]
#
#   tools/centrifugo/run.sh both 2 2000 2 20     # many conversations
#   tools/centrifugo/run.sh both 2 1 1000 200    # one thread, 1,000 watchers
#
# Needs go (for the first build), redis-server, curl and taskset; uses
# ports 27201, 24281.. (agentstream) and 24381.. (Centrifugo).
set -u
AS=${AS:-/tmp/agentstream}
CENTRIFUGO_VERSION=${CENTRIFUGO_VERSION:-v6.9.1}
CENTRIFUGO_DIR=${CENTRIFUGO_DIR:-/tmp/centrifugo-$CENTRIFUGO_VERSION}
HISTORY=${HISTORY:-1000}
WHICH=$1; N=$2; TH=$3; SUBS=$4; RATE=$5; ROUNDS=${6:-1}
if [ ! -x $CENTRIFUGO_DIR/centrifugo ]; then
  echo "building Centrifugo $CENTRIFUGO_VERSION into $CENTRIFUGO_DIR" >&2
  GOFLAGS=-mod=mod GOBIN=$CENTRIFUGO_DIR go install github.com/centrifugal/centrifugo/v6@$CENTRIFUGO_VERSION || exit 1
fi
D=$(mktemp -d)
PIDS=()
cleanup() { kill ${PIDS[@]} 2>/dev/null; wait 2>/dev/null; rm -rf $D; }
trap cleanup EXIT
RPORT=27201

# start_redis: a fresh redis-server for one measurement.
start_redis() {
  taskset -c 1 redis-server --port $RPORT --save '' --appendonly no --dir $D >/dev/null 2>&1 &
  RPID=$!
  until redis-cli -p $RPORT ping >/dev/null 2>&1; do sleep 0.1; done
}

# wait_up URL: until the node answers.
wait_up() { for i in $(seq 100); do curl -sf -o /dev/null $1 && return; sleep 0.1; done; echo "no answer from $1" >&2; exit 1; }

# measure NAME LOAD_FLAGS...: runs the workload, with the nodes' and
# Redis's CPU counted, and prints the result line.
measure() {
  local name=$1; shift
  local other=$(echo ${NPIDS[@]:1} $RPID | tr ' ' ',')
  echo -n "$name, $N nodes: "
  taskset -c 1 $AS load --url ${NURLS[0]} --sub-urls $(echo ${NURLS[@]} | tr ' ' ',') --transport ws \
    --threads $TH --subs-per-thread $SUBS --rate $RATE --duration 10s --pid ${NPIDS[0]} --other-pids $other "$@" 2>&1 |
    grep -E "delivered|Error|error" | sed -E 's/; server RSS.*//; s/runs started in [^;]*; //'
}

stop_all() { kill ${NPIDS[@]} $RPID 2>/dev/null; wait ${NPIDS[@]} $RPID 2>/dev/null; }

agentstream() {
  start_redis
  NPIDS=(); NURLS=()
  for i in $(seq $N); do
    P=$((24280+i))
    taskset -c 0 $AS serve --addr 127.0.0.1:$P --log-level warn --http-stream-rate 1000000 --http-stream-burst 1000000 --redis redis://127.0.0.1:$RPORT/0 &
    NPIDS+=($!); PIDS+=($!); NURLS+=("http://127.0.0.1:$P")
  done
  for u in ${NURLS[@]}; do wait_up $u/healthz; done
  measure agentstream
  stop_all
}

centrifugo() {
  start_redis
  NPIDS=(); NURLS=()
  for i in $(seq $N); do
    P=$((24380+i))
    cat > $D/centrifugo-$P.json <<EOF
{
  "log": {"level": "error"},
  "http_server": {"address": "127.0.0.1", "port": $P},
  "client": {"insecure": true, "allowed_origins": ["*"]},
  "http_api": {"insecure": true},
  "health": {"enabled": true},
  "channel": {"without_namespace": {"allow_subscribe_for_client": true, "history_size": $HISTORY, "history_ttl": "300s", "force_recovery": true}},
  "engine": {"type": "redis", "redis": {"address": ["redis://127.0.0.1:$RPORT"]}}
}
EOF
    taskset -c 0 $CENTRIFUGO_DIR/centrifugo --config $D/centrifugo-$P.json >$D/centrifugo-$P.log 2>&1 &
    NPIDS+=($!); PIDS+=($!); NURLS+=("http://127.0.0.1:$P")
  done
  for u in ${NURLS[@]}; do wait_up $u/health; done
  measure centrifugo --centrifugo
  stop_all
}

for r in $(seq $ROUNDS); do
  case $WHICH in
    both) agentstream; centrifugo ;;
    agentstream) agentstream ;;
    centrifugo) centrifugo ;;
    *) echo "usage: $0 both|centrifugo|agentstream NODES THREADS WATCHERS_PER_THREAD RATE [ROUNDS]" >&2; exit 2 ;;
  esac
done
