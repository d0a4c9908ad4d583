# shellcheck shell=bash
# The cluster topology of Pulse's local stack, sourced by stack.sh when
# PULSE_TOPOLOGY=cluster (make up|run|test|down TOPOLOGY=cluster). It replaces the
# single servers and services with:
#
#   Redis Cluster   3 masters + 3 replicas, 127.0.0.1:26379-26384 (cluster bus
#                   27379-27384)
#   Kafka (KRaft)   3 combined broker+controllers, 127.0.0.1:29092-29094 (controllers
#                   29192-29194); replication 3, min.insync.replicas 2
#   Cassandra       2 nodes, 127.0.0.2 and 127.0.0.3 (CQL 29042, storage 27000);
#                   Pulse's keyspace with replication 2
#   services        ingest 28080; aggregator 28082 and 28092, history 28083 and 28093,
#                   query 28081 and 28091 (make run)
#
# Its home is $PULSE_HOME, by default <repo>/.pulse-cluster, and its ports are its own,
# so it runs beside the single stack. `stack.sh env` prints the variables that point
# the services, pulsectl and the tests at it.

KAFKA_NODES=3
REDIS_NODES=6
KAFKA_PORT=${PULSE_CLUSTER_KAFKA_PORT:-29092}
KAFKA_CONTROLLER_PORT=${PULSE_CLUSTER_KAFKA_CONTROLLER_PORT:-29192}
REDIS_PORT=${PULSE_CLUSTER_REDIS_PORT:-26379}
# Redis's own choice for the cluster bus, port + 10000, lands in Linux's ephemeral range
# (32768-60999), where an outgoing connection of any process may hold it and the node
# then cannot start; every port here stays below that range.
REDIS_BUS_PORT=${PULSE_CLUSTER_REDIS_BUS_PORT:-27379}
CASSANDRA_PORT=${PULSE_CLUSTER_CASSANDRA_PORT:-29042}
CASSANDRA_STORAGE_PORT=${PULSE_CLUSTER_CASSANDRA_STORAGE_PORT:-27000}
CASSANDRA_ADDRS=(127.0.0.2 127.0.0.3)
# Instance n of a service listens on its base port + 10 × (n-1).
INGEST_PORT=${PULSE_CLUSTER_INGEST_PORT:-28080}
QUERY_PORT=${PULSE_CLUSTER_QUERY_PORT:-28081}
AGGREGATOR_PORT=${PULSE_CLUSTER_AGGREGATOR_PORT:-28082}
HISTORY_PORT=${PULSE_CLUSTER_HISTORY_PORT:-28083}
KAFKA_HEAP_MIN=${PULSE_CLUSTER_KAFKA_HEAP_MIN:-384m}
KAFKA_HEAP=${PULSE_CLUSTER_KAFKA_HEAP:-512m}
CASSANDRA_HEAP=${PULSE_CLUSTER_CASSANDRA_HEAP:-768m}
# Two Cassandra nodes at a lower CPU priority start in many minutes on a busy two-core
# machine; on the cluster they compete equally unless PULSE_CASSANDRA_NICE says otherwise.
CASSANDRA_NICE=${PULSE_CASSANDRA_NICE:-0}
# A Cassandra node can take minutes to start when the cores are busy.
WAIT_TIMEOUT=${PULSE_WAIT_TIMEOUT:-600s}
KAFKA_REPLICATION=3
CASSANDRA_REPLICATION=2

servers=()
for ((i = 1; i <= REDIS_NODES; i++)); do servers+=("redis-$i"); done
for ((i = 1; i <= KAFKA_NODES; i++)); do servers+=("kafka-$i"); done
for ((i = 1; i <= ${#CASSANDRA_ADDRS[@]}; i++)); do servers+=("cassandra-$i"); done
services=(ingest aggregator-1 aggregator-2 history-1 history-2 query-1 query-2)

redis_port() { echo $((REDIS_PORT + $1 - 1)); }
redis_bus_port() { echo $((REDIS_BUS_PORT + $1 - 1)); }
kafka_port() { echo $((KAFKA_PORT + $1 - 1)); }
kafka_controller_port() { echo $((KAFKA_CONTROLLER_PORT + $1 - 1)); }

join() {
	local IFS=,
	echo "$*"
}

redis_addrs() {
	local i a=()
	for ((i = 1; i <= REDIS_NODES; i++)); do a+=("127.0.0.1:$(redis_port "$i")"); done
	join "${a[@]}"
}

kafka_brokers() {
	local i a=()
	for ((i = 1; i <= KAFKA_NODES; i++)); do a+=("127.0.0.1:$(kafka_port "$i")"); done
	join "${a[@]}"
}

marker() {
	case $1 in
	redis-*) echo ":$(redis_port "${1#redis-}")" ;;
	*) echo "$PULSE_HOME" ;;
	esac
}

# ---------------------------------------------------------------------------
# Servers

start_redis_node() {
	local n=$1 port dir bus
	alive "redis-$n" && return 0
	port=$(redis_port "$n")
	dir=$data/redis-$n
	bus=$(awk '$3 ~ /myself/ {print $2}' "$dir/nodes.conf" 2>/dev/null) || bus=
	bus=${bus#*@}
	bus=${bus%%,*}
	if [[ -n $bus && $bus != "$(redis_bus_port "$n")" ]]; then
		# A node formed with another cluster bus port cannot reach its peers on the new
		# ones: it starts afresh, and the aggregators rebuild its state from the log.
		say "redis-$n: cluster bus moved from :$bus to :$(redis_bus_port "$n"); starting it empty"
		rm -rf "$dir"
	fi
	mkdir -p "$dir"
	# nodes.conf in the node's folder keeps its identity and the slot map across
	# down/up; a master that stays silent for 5 s is failed over to its replica.
	launch "redis-$n" "$logs/redis-$n.log" redis-server --bind 127.0.0.1 --port "$port" \
		--dir "$dir" --save "" --appendonly yes --appendfsync everysec \
		--hash-max-listpack-value 256 \
		--cluster-enabled yes --cluster-port "$(redis_bus_port "$n")" \
		--cluster-config-file nodes.conf --cluster-node-timeout 5000 \
		--daemonize no --protected-mode yes --logfile ""
}

# redis_cluster_ok PORT: the node sees every slot served.
redis_cluster_ok() {
	redis-cli -p "$1" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok'
}

# form_redis_cluster waits for every node to answer, joins them into one cluster the
# first time (3 masters, a replica each), and waits until each node serves every slot.
form_redis_cluster() {
	local i port deadline=$((SECONDS + 60)) addrs=()
	for ((i = 1; i <= REDIS_NODES; i++)); do
		port=$(redis_port "$i")
		addrs+=("127.0.0.1:$port")
		until [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]]; do
			alive "redis-$i" || { tail -n 20 "$logs/redis-$i.log" >&2; die "redis-$i exited"; }
			((SECONDS < deadline)) || die "redis-$i does not answer on :$port"
			sleep 0.2
		done
	done
	local known
	known=$(redis-cli -p "$REDIS_PORT" cluster info | tr -d '\r' | awk -F: '$1 == "cluster_known_nodes" {print $2}')
	if [[ $known != "$REDIS_NODES" ]]; then
		say "joining the Redis nodes into a cluster (3 masters, 3 replicas)"
		redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >>"$logs/redis-cluster.log" 2>&1 ||
			{ tail -n 30 "$logs/redis-cluster.log" >&2; die "redis-cli --cluster create failed"; }
	fi
	for ((i = 1; i <= REDIS_NODES; i++)); do
		until redis_cluster_ok "$(redis_port "$i")"; do
			((SECONDS < deadline)) || die "Redis Cluster not ok on redis-$i: redis-cli -p $(redis_port "$i") cluster info"
			sleep 0.2
		done
	done
}

start_kafka_node() {
	local n=$1
	local props=$conf/kafka-$n/server.properties lib=$cache/kafka/lib voters=() i
	alive "kafka-$n" && return 0
	for ((i = 1; i <= KAFKA_NODES; i++)); do voters+=("$i@127.0.0.1:$(kafka_controller_port "$i")"); done
	mkdir -p "$data/kafka-$n" "$logs"
	render "$here/kafka/cluster.properties.in" "$props" NODE_ID="$n" VOTERS="$(join "${voters[@]}")" \
		PORT="$(kafka_port "$n")" CONTROLLER_PORT="$(kafka_controller_port "$n")" DATA_DIR="$data/kafka-$n/log"
	java -cp "$lib/*" -Dlog4j.configuration="file:$here/kafka/log4j.properties" \
		kafka.tools.StorageTool format -t "$(<"$data/kafka.cluster.id")" -c "$props" \
		--ignore-formatted >>"$logs/kafka-$n.log" 2>&1 ||
		{ tail -n 20 "$logs/kafka-$n.log" >&2; die "formatting kafka-$n's storage failed"; }
	launch "kafka-$n" "$logs/kafka-$n.log" java -Xms"$KAFKA_HEAP_MIN" -Xmx"$KAFKA_HEAP" -XX:+UseG1GC \
		-XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
		-Dlog4j.configuration="file:$here/kafka/log4j.properties" -Dkafka.logs.dir="$logs/kafka-$n" \
		-cp "$lib/*" kafka.Kafka "$props"
}

start_cassandra_node() {
	local n=$1
	local addr=${CASSANDRA_ADDRS[n - 1]} dir=$data/cassandra-$n
	local yaml=$conf/cassandra-$n/cassandra.yaml token
	alive "cassandra-$n" && return 0
	mkdir -p "$dir/tmp" "$logs"
	# Tokens split the ring evenly: node 1 at its start, node 2 half way.
	token=-9223372036854775808
	((n == 1)) || token=0
	render "$here/cassandra/cluster.yaml.in" "$yaml" ADDRESS="$addr" SEEDS="${CASSANDRA_ADDRS[0]}:$CASSANDRA_STORAGE_PORT" \
		INITIAL_TOKEN="$token" CQL_PORT="$CASSANDRA_PORT" STORAGE_PORT="$CASSANDRA_STORAGE_PORT" DATA_DIR="$dir"
	launch_cassandra "cassandra-$n" "$dir" "$yaml"
}

# wait_for NAME FLAG ADDR: pulsectl wait for one server, failing at once when its
# process exits, with its log's tail.
wait_for() {
	"$bin/pulsectl" wait -timeout "$WAIT_TIMEOUT" -pids "${2#-}=$(<"$run/$1.pid")" "$2" "$3" >"$run/wait-$1.out" 2>&1 || {
		cat "$run/wait-$1.out" >&2
		tail -n 30 "$logs/$1.log" >&2
		die "$1 did not come up"
	}
	printf '    %s: %s\n' "$1" "$(grep -v '^ *waiting .*starting$' "$run/wait-$1.out" | tail -n 1 | sed 's/^ *waiting *[0-9]*s: //')"
}

# rss_mib [NAME...]: the summed resident memory of the named processes (every running
# one of the topology by default), in MiB.
rss_mib() {
	local name pid kb total=0
	(($#)) || set -- "${servers[@]}" "${services[@]}"
	for name in "$@"; do
		pid=$(pid_of "$name") || continue
		kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || kb=0
		total=$((total + ${kb:-0}))
	done
	echo $((total / 1024))
}

# pulsectl_patiently WHAT ARGS...: runs pulsectl ARGS, an idempotent step that a server
# just started may refuse for a while, once a second for up to 30 s; prints its output
# when it succeeds, and dies with it when it never does.
pulsectl_patiently() {
	local what=$1 out=$run/pulsectl.out i
	shift
	for ((i = 0; ; i++)); do
		if pulsectl "$@" >"$out" 2>&1; then
			cat "$out"
			return 0
		fi
		((i < 30)) || { cat "$out" >&2; die "$what failed"; }
		sleep 1
	done
}

cmd_up() {
	local t0=$SECONDS running=0 name i
	for name in "${servers[@]}"; do alive "$name" && running=$((running + 1)); done
	if ((running == ${#servers[@]})); then
		say "cluster already running (make status TOPOLOGY=cluster); nothing to do"
		return 0
	fi
	command -v go >/dev/null || die "Go is needed: see README.md"
	need_java
	need_redis
	fetch kafka
	fetch cassandra
	# Linux routes the whole of 127.0.0.0/8 to lo; elsewhere each address needs an alias.
	local addr lo
	lo=$(ip -o addr show lo 2>/dev/null || true)
	for addr in "${CASSANDRA_ADDRS[@]}"; do
		grep -qE "inet (127\.0\.0\.1/8|$addr/)" <<<"$lo" ||
			die "$addr is not a loopback address here: Cassandra's nodes need it on lo (ip addr add $addr/8 dev lo)"
	done
	say "starting the cluster topology: redis :$(redis_port 1)-$(redis_port $REDIS_NODES)," \
		"kafka :$(kafka_port 1)-$(kafka_port $KAFKA_NODES), cassandra ${CASSANDRA_ADDRS[*]} :$CASSANDRA_PORT (data in $data)"
	pulsectl help >/dev/null 2>&1 || true # builds $bin/pulsectl
	[[ -x $bin/pulsectl ]] || die "building pulsectl failed"
	for ((i = 1; i <= REDIS_NODES; i++)); do start_redis_node "$i"; done
	# One cluster id for the three nodes, made once and kept, as KRaft requires; then
	# each node formats its storage with it (a JVM of its own) and starts, in parallel.
	mkdir -p "$data"
	# An id starting with '-' reads as an option to kafka-storage, and no node formats
	# (Kafka's own random ids avoid it the same way); such an id never formatted a node,
	# so it is replaced.
	local id=
	[[ -s $data/kafka.cluster.id ]] && id=$(<"$data/kafka.cluster.id")
	while [[ -z $id || $id == -* ]]; do
		id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
	done
	printf '%s' "$id" >"$data/kafka.cluster.id"
	local starting=()
	for ((i = 1; i <= KAFKA_NODES; i++)); do
		start_kafka_node "$i" &
		starting+=($!)
	done
	for i in "${starting[@]}"; do wait "$i" || die "starting Kafka failed"; done
	# The second Cassandra node joins through the first, the seed, once it answers.
	start_cassandra_node 1
	form_redis_cluster
	say "redis cluster ok in $((SECONDS - t0))s"
	for ((i = 1; i <= KAFKA_NODES; i++)); do wait_for "kafka-$i" -kafka "127.0.0.1:$(kafka_port "$i")"; done
	# Topics of 3 replicas need every broker registered; a broker just started may not
	# be yet.
	pulsectl_patiently "creating the topics" topics -brokers "$(kafka_brokers)" -partitions "$PARTITIONS" -replication "$KAFKA_REPLICATION"
	wait_for cassandra-1 -cassandra "${CASSANDRA_ADDRS[0]}:$CASSANDRA_PORT"
	start_cassandra_node 2
	wait_for cassandra-2 -cassandra "${CASSANDRA_ADDRS[1]}:$CASSANDRA_PORT"
	# A node that has just opened its CQL port may not yet be seen as up by the other,
	# whose quorum reads then fail ("Cannot achieve consistency level"); the migrations
	# are idempotent.
	pulsectl_patiently "applying the migrations" migrate -hosts "$(join "${CASSANDRA_ADDRS[@]}")" -port "$CASSANDRA_PORT" \
		-keyspace "$KEYSPACE" -dir "$root/migrations" -replication "{'class': 'SimpleStrategy', 'replication_factor': $CASSANDRA_REPLICATION}"
	say "cluster topology up in $((SECONDS - t0))s; its servers hold $(rss_mib "${servers[@]}") MiB (resident)"
}

cmd_down() {
	local name any=0 i
	for name in "${services[@]}" "${servers[@]}"; do alive "$name" && any=1; done
	if ((any == 0)); then
		rm -f "$run"/*.pid 2>/dev/null || true
		say "nothing running"
		return 0
	fi
	say "stopping the cluster topology"
	for name in "${services[@]}"; do stop "$name" 15; done
	for ((i = KAFKA_NODES; i >= 1; i--)); do stop "kafka-$i" 60; done
	for ((i = ${#CASSANDRA_ADDRS[@]}; i >= 1; i--)); do stop "cassandra-$i" 60; done
	for ((i = REDIS_NODES; i >= 1; i--)); do stop "redis-$i" 15; done
}

server_addr() {
	case $1 in
	redis-*) echo "127.0.0.1:$(redis_port "${1#redis-}")" ;;
	kafka-*) echo "127.0.0.1:$(kafka_port "${1#kafka-}")" ;;
	cassandra-*) echo "${CASSANDRA_ADDRS[${1#cassandra-} - 1]}:$CASSANDRA_PORT" ;;
	*) echo "127.0.0.1:$(service_port "$1")" ;;
	esac
}

cmd_status() {
	local name pid role
	for name in "${servers[@]}" "${services[@]}"; do
		if pid=$(pid_of "$name"); then
			role=
			if [[ $name == redis-* ]]; then
				role=$(redis-cli -p "$(redis_port "${name#redis-}")" role 2>/dev/null | head -n 1)
			fi
			printf '%-13s running  pid %-8s %-16s %s\n' "$name" "$pid" "$(server_addr "$name")" "$role"
		else
			printf '%-13s stopped\n' "$name"
		fi
	done
	printf 'memory: %s MiB resident\ndata: %s\nlogs: %s\n' "$(rss_mib)" "$data" "$logs"
}

# cmd_env prints the variables that point Pulse's services, pulsectl and the tests at
# the cluster: eval "$(deploy/local/stack.sh env)" with PULSE_TOPOLOGY=cluster.
cmd_env() {
	cat <<EOF
export PULSE_TOPOLOGY=cluster
export PULSE_HOME=$PULSE_HOME
export PULSE_KAFKA_BROKERS=$(kafka_brokers)
export PULSE_REDIS_ADDR=$(redis_addrs)
export PULSE_CASSANDRA_HOSTS=$(join "${CASSANDRA_ADDRS[@]}")
export PULSE_CASSANDRA_PORT=$CASSANDRA_PORT
export PULSE_PARTITIONS=$PARTITIONS
export PULSE_KEYSPACE=$KEYSPACE
export PULSE_CASSANDRA_KEYSPACE=$KEYSPACE
EOF
}

# ---------------------------------------------------------------------------
# Services: aggregator-2, history-2 and query-2 are second members of their
# service, on their own ports.

service_port() {
	local kind=${1%-[0-9]} n=1 base
	[[ $1 == *-[0-9] ]] && n=${1##*-}
	case $kind in
	ingest) base=$INGEST_PORT ;;
	query) base=$QUERY_PORT ;;
	aggregator) base=$AGGREGATOR_PORT ;;
	history) base=$HISTORY_PORT ;;
	*) die "no service $1" ;;
	esac
	echo $((base + 10 * (n - 1)))
}

service_url() {
	local scheme=http
	if [[ -n ${PULSE_TLS_CERT_FILE:-} && ($1 == ingest || $1 == query*) ]]; then scheme=https; fi
	echo "$scheme://127.0.0.1:$(service_port "$1")"
}

start_services() {
	local name kind names=("$@") pids=() urls=() built=" "
	((${#names[@]})) || names=("${services[@]}")
	dev_keys
	dev_cursor_secret
	say "building services into $bin"
	for name in "${names[@]}"; do
		kind=${name%-[0-9]}
		[[ $built == *" $kind "* ]] && continue
		(cd "$root" && go build -o "$bin/pulse-$kind" "./services/$kind") || die "building $kind failed"
		built+="$kind "
	done
	for name in "${names[@]}"; do
		alive "$name" && continue
		kind=${name%-[0-9]}
		PULSE_HTTP_ADDR="127.0.0.1:$(service_port "$name")" \
			PULSE_KAFKA_BROKERS="$(kafka_brokers)" \
			PULSE_REDIS_ADDR="$(redis_addrs)" \
			PULSE_CASSANDRA_HOSTS="$(join "${CASSANDRA_ADDRS[@]}")" \
			PULSE_CASSANDRA_PORT="$CASSANDRA_PORT" \
			PULSE_CASSANDRA_KEYSPACE="$KEYSPACE" \
			PULSE_QUERY_PEER_METRICS="ingest=$(service_url ingest)/metrics,aggregator=$(service_url aggregator-1)/metrics,history=$(service_url history-1)/metrics" \
			launch "$name" "$logs/$name.log" "$bin/pulse-$kind"
		pids+=("$name=$(<"$run/$name.pid")")
	done
	for name in "${names[@]}"; do urls+=("$name=$(service_url "$name")"); done
	pulsectl wait -timeout "$SERVICES_WAIT_TIMEOUT" -logs "$logs" -pids "$(join "${pids[@]}")" -http "$(join "${urls[@]}")"
}

cmd_run() {
	local t0=$SECONDS
	cmd_up
	start_services
	local up=$((SECONDS - t0)) keys=
	if [[ -n $DEV_KEYS ]]; then
		keys=$(
			cat <<EOF
  Development keys (in $PULSE_HOME/auth/), for your shell:
    export PULSE_PRODUCER_KEY=$PULSE_PRODUCER_KEY   # write: ingest
    export PULSE_READER_KEY=$PULSE_READER_KEY     # read: query
    export PULSE_OPERATOR_KEY=$PULSE_OPERATOR_KEY   # operator
EOF
		)
	else
		keys="  Keys: the services read PULSE_API_KEYS_FILE=$PULSE_API_KEYS_FILE."
	fi
	cat <<EOF

Pulse is running on the cluster topology (up in ${up}s; $(rss_mib) MiB resident in all):
  ingest        $(service_url ingest)     (POST /status, /v1/events, /v1/heartbeat)
  query         $(service_url query-1)  $(service_url query-2)     (reads, /v1/watch, /dashboard/)
  aggregator    $(service_url aggregator-1)  $(service_url aggregator-2)     (health and metrics; one consumer group)
  history       $(service_url history-1)  $(service_url history-2)     (health and metrics; one consumer group)

  kafka         $(kafka_brokers)   (replication $KAFKA_REPLICATION, min.insync.replicas 2)
  redis         $(redis_addrs)   (3 masters, 3 replicas)
  cassandra     $(join "${CASSANDRA_ADDRS[@]}") :$CASSANDRA_PORT   (keyspace $KEYSPACE, replication $CASSANDRA_REPLICATION)
  logs          $logs   (make logs TOPOLOGY=cluster S=kafka-1)
  status        make status TOPOLOGY=cluster     (Redis roles, memory)
  environment   eval "\$(PULSE_TOPOLOGY=cluster deploy/local/stack.sh env)"   (pulsectl, tests)

$keys

Stop with Ctrl-C here, or 'make down TOPOLOGY=cluster' from another terminal.
EOF
	watch_services
}
