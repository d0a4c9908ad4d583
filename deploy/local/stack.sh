#!/usr/bin/env bash
# Pulse's local stack: real Apache Kafka (KRaft), Apache Cassandra 5.0 and Redis on
# loopback, without Docker, plus the four Pulse services for `make run`.
#
#   stack.sh up        fetch jars on first use, start the servers, wait until each answers
#                      real requests, create the topics, apply the migrations
#   stack.sh down      stop the services and servers this script started (by recorded pid)
#   stack.sh status    what runs, on which port
#   stack.sh clean     down, then remove data, logs and rendered configs (jars stay cached)
#   stack.sh logs [n]  follow the logs (all, or one of kafka, cassandra, redis, <service>)
#   stack.sh run       up, build and start the services, wait for Ctrl-C, then down
#   stack.sh services [name...]
#                      build and start the services that are not running (all, or
#                      those named) with this environment, and wait until they are ready
#   stack.sh stop-services [name...]
#                      stop the services (all, or those named); the servers keep running
#   stack.sh pids      "name pid" for each process of the stack that runs
#   stack.sh env       the variables that point services and tests at this topology
#
# Everything lives under $PULSE_HOME (default <repo>/.pulse, gitignored): cache/ holds
# the server jars, data/ the servers' data, logs/ their logs, run/ the pid files.
#
# The topologies are data, in deploy/local/topologies: how many nodes of each server and
# instances of each service, their ports and home. PULSE_TOPOLOGY picks one: single (the
# default; one node of each) or cluster (make ... TOPOLOGY=cluster; Redis Cluster, three
# Kafka brokers, two Cassandra nodes, two of each consumer service, in
# <repo>/.pulse-cluster and on ports of its own, so it runs beside the single stack).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

say() { printf '==> %s\n' "$*"; }
die() {
	printf 'stack: %s\n' "$*" >&2
	exit 1
}

# ---------------------------------------------------------------------------
# The topology: one column of the table in deploy/local/topologies.

TOPOLOGY=${PULSE_TOPOLOGY:-single}

# load_topology FILE sets the variable each row of FILE names to the row's cell in
# $TOPOLOGY's column: a value, VAR=default (${VAR:-default}, {root} the checkout), or -
# (empty).
load_topology() {
	local line col=0 i value var
	local -a cells head=()
	while IFS= read -r line; do
		line=${line%%#*}
		read -ra cells <<<"$line"
		((${#cells[@]})) || continue
		if ((${#head[@]} == 0)); then
			head=("${cells[@]}")
			for ((i = 1; i < ${#head[@]}; i++)); do
				[[ ${head[i]} == "$TOPOLOGY" ]] && col=$i
			done
			if ((col == 0)); then
				local want=${head[*]:1}
				echo "stack: PULSE_TOPOLOGY=$TOPOLOGY: want ${want// / or }" >&2
				exit 2
			fi
			continue
		fi
		((${#cells[@]} == ${#head[@]})) || die "$1: row ${cells[0]} has ${#cells[@]} cells, want ${#head[@]}"
		value=${cells[col]}
		case $value in
		-) value= ;;
		PULSE_*=*)
			var=${value%%=*}
			value=${value#*=}
			value=${!var:-${value//\{root\}/$root}}
			;;
		esac
		printf -v "${cells[0]}" '%s' "$value"
	done <"$1"
}

load_topology "$here/topologies"
cache=$PULSE_HOME/cache
data=$PULSE_HOME/data
logs=$PULSE_HOME/logs
run=$PULSE_HOME/run
conf=$PULSE_HOME/conf
bin=$PULSE_HOME/bin

# The same on every topology.
PARTITIONS=${PULSE_PARTITIONS:-16}
KEYSPACE=${PULSE_KEYSPACE:-pulse}
SERVICES_WAIT_TIMEOUT=${PULSE_SERVICES_WAIT_TIMEOUT:-60s}

# The lists of the table as arrays (load_topology set the variables they come from).
# shellcheck disable=SC2153
IFS=, read -ra cassandra_addrs <<<"$CASSANDRA_ADDRS"
# shellcheck disable=SC2153
IFS=, read -ra cassandra_tokens <<<"$CASSANDRA_TOKENS"
CASSANDRA_NODES=${#cassandra_addrs[@]}
((${#cassandra_tokens[@]} == CASSANDRA_NODES)) ||
	die "deploy/local/topologies, $TOPOLOGY: ${#cassandra_tokens[@]} CASSANDRA_TOKENS for $CASSANDRA_NODES CASSANDRA_ADDRS"

# node_name SERVER N COUNT: the name of node N of COUNT: SERVER itself when it is the
# only one, else SERVER-N. Pid files, data, logs and configs are named after it.
node_name() {
	if (($3 == 1)); then echo "$1"; else echo "$1-$2"; fi
}

# kind_of NAME and node_of NAME: "kafka-2" is node 2 of kafka; "kafka" node 1.
kind_of() { echo "${1%%-*}"; }
node_of() {
	if [[ $1 == *-* ]]; then echo "${1##*-}"; else echo 1; fi
}

# nodes SERVER: how many nodes of SERVER (or instances of a service) the topology has.
nodes() {
	case $1 in
	redis) echo "$REDIS_NODES" ;;
	kafka) echo "$KAFKA_NODES" ;;
	cassandra) echo "$CASSANDRA_NODES" ;;
	*)
		local v=${1^^}_INSTANCES
		echo "${!v}"
		;;
	esac
}

servers=()
services=()
for kind in redis kafka cassandra; do
	for ((i = 1; i <= $(nodes "$kind"); i++)); do servers+=("$(node_name "$kind" "$i" "$(nodes "$kind")")"); done
done
for kind in ingest aggregator history query notifier; do
	for ((i = 1; i <= $(nodes "$kind"); i++)); do services+=("$(node_name "$kind" "$i" "$(nodes "$kind")")"); done
done
unset kind i

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

# server_addr NAME: where a server's node or a service's instance listens.
server_addr() {
	local n
	n=$(node_of "$1")
	case $(kind_of "$1") in
	redis) echo "127.0.0.1:$(redis_port "$n")" ;;
	kafka) echo "127.0.0.1:$(kafka_port "$n")" ;;
	cassandra) echo "${cassandra_addrs[n - 1]}:$CASSANDRA_PORT" ;;
	*) echo "127.0.0.1:$(service_port "$1")" ;;
	esac
}

# make_cmd TARGET: how to run TARGET of the Makefile on this topology.
make_cmd() {
	if [[ $TOPOLOGY == single ]]; then echo "make $1"; else echo "make $1 TOPOLOGY=$TOPOLOGY"; fi
}

# ---------------------------------------------------------------------------
# Processes. A pid file is trusted only while its process still runs and its
# command line carries the marker of this stack, so a recycled pid is never signalled.

marker() {
	case $(kind_of "$1") in
	redis) echo ":$(redis_port "$(node_of "$1")")" ;;
	*) echo "$PULSE_HOME" ;;
	esac
}

pid_of() {
	local f=$run/$1.pid pid
	[[ -f $f ]] || return 1
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$(marker "$1")" || return 1
	echo "$pid"
}

alive() { pid_of "$1" >/dev/null; }

# stop NAME GRACE: SIGTERM, wait up to GRACE seconds, then SIGKILL.
stop() {
	local name=$1 grace=$2 pid i
	if ! pid=$(pid_of "$name"); then
		rm -f "$run/$name.pid"
		return 0
	fi
	printf '    stopping %-10s (pid %s)' "$name" "$pid"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		printf ' did not stop in %ss, killing' "$grace"
		kill -KILL "$pid" 2>/dev/null || true
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	fi
	printf ' stopped\n'
	rm -f "$run/$name.pid"
}

# launch NAME LOGFILE CMD...: start CMD in its own session (so a Ctrl-C meant for
# `make run` reaches only the script, which then stops everything in order).
launch() {
	local name=$1 log=$2
	shift 2
	mkdir -p "$run" "$(dirname "$log")"
	printf '\n--- %s started %s ---\n' "$name" "$(date -u +%FT%TZ)" >>"$log"
	setsid "$@" >>"$log" 2>&1 </dev/null &
	echo $! >"$run/$name.pid"
}

# ---------------------------------------------------------------------------
# Fetching. Jars come from Maven Central once; the cache is keyed by the pom's hash,
# so changing a version in a pom fetches again and nothing else does.

fetch() {
	local name=$1 pom=$here/$1/pom.xml dest=$cache/$1 sum
	command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch $name: apt-get install maven"
	sum=$(sha256sum "$pom" | cut -d' ' -f1)
	if [[ -f $dest/.pom.sha256 && $(<"$dest/.pom.sha256") == "$sum" ]]; then
		return 0
	fi
	say "fetching $name jars from Maven Central (first use only)"
	local t0=$SECONDS
	rm -rf "$dest.tmp"
	mkdir -p "$dest.tmp"
	if ! mvn -B -q -f "$pom" \
		org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$dest.tmp/lib" >"$dest.tmp/mvn.log" 2>&1; then
		tail -n 30 "$dest.tmp/mvn.log" >&2
		die "fetching $name jars failed (full log: $dest.tmp/mvn.log)"
	fi
	echo "$sum" >"$dest.tmp/.pom.sha256"
	rm -rf "$dest"
	mv "$dest.tmp" "$dest"
	say "fetched $(find "$dest/lib" -name '*.jar' | wc -l) $name jars ($(du -sh "$dest/lib" | cut -f1)) in $((SECONDS - t0))s"
}

need_java() {
	command -v java >/dev/null || die "Java 17 is needed: apt-get install openjdk-17-jre-headless"
	local v
	v=$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')
	[[ $v == 17 ]] || die "Cassandra 5.0 here runs on Java 17 exactly; found Java $v (set JAVA_HOME/PATH to a Java 17)"
}

need_redis() {
	command -v redis-server >/dev/null && return 0
	say "installing Debian's redis-server"
	local sudo=
	[[ $(id -u) == 0 ]] || sudo=sudo
	$sudo apt-get install -y -qq redis-server >/dev/null 2>&1 ||
		{ $sudo apt-get update -qq && $sudo apt-get install -y -qq redis-server >/dev/null; } ||
		die "could not install redis-server with apt-get"
}

# render TEMPLATE OUT KEY=VALUE...: replace @KEY@ in TEMPLATE.
render() {
	local in=$1 out=$2 kv
	shift 2
	local text
	text=$(<"$in")
	for kv in "$@"; do
		text=${text//@${kv%%=*}@/${kv#*=}}
	done
	mkdir -p "$(dirname "$out")"
	printf '%s\n' "$text" >"$out"
}

pulsectl() {
	# Built on every call; Go's build cache makes it instant after the first time.
	(cd "$root" && go build -o "$bin/pulsectl" ./cmd/pulsectl) || die "building pulsectl failed"
	"$bin/pulsectl" "$@"
}


# ---------------------------------------------------------------------------
# Servers. start_<server>_node N starts node N of the topology's nodes of that server
# (nothing when it runs).

start_redis_node() {
	local n=$1 name port dir bus cluster=()
	name=$(node_name redis "$n" "$REDIS_NODES")
	alive "$name" && return 0
	port=$(redis_port "$n")
	dir=$data/$name
	if ((REDIS_NODES > 1)); then
		bus=$(awk '$3 ~ /myself/ {print $2}' "$dir/nodes.conf" 2>/dev/null) || bus=
		bus=${bus#*@}
		bus=${bus%%,*}
		if [[ -n $bus && $bus != "$(redis_bus_port "$n")" ]]; then
			# A node formed with another cluster bus port cannot reach its peers on the new
			# ones: it starts afresh, and the aggregators rebuild its state from the log.
			say "$name: cluster bus moved from :$bus to :$(redis_bus_port "$n"); starting it empty"
			rm -rf "$dir"
		fi
		# nodes.conf in the node's folder keeps its identity and the slot map across
		# down/up; a master that stays silent for 5 s is failed over to its replica.
		cluster=(--cluster-enabled yes --cluster-port "$(redis_bus_port "$n")"
			--cluster-config-file nodes.conf --cluster-node-timeout 5000)
	fi
	mkdir -p "$dir"
	# AOF keeps the data across down/up; RDB snapshots are off to keep writes cheap.
	# hash-max-listpack-value 256 keeps multi-device user states in their bucket's
	# listpack (docs/redis.md).
	launch "$name" "$logs/$name.log" redis-server --bind 127.0.0.1 --port "$port" \
		--dir "$dir" --save "" --appendonly yes --appendfsync everysec \
		--hash-max-listpack-value 256 \
		"${cluster[@]}" \
		--daemonize no --protected-mode yes --logfile ""
}

# redis_cluster_ok PORT: the node sees every slot served.
redis_cluster_ok() {
	redis-cli -p "$1" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok'
}

# form_redis_cluster waits for every node to answer, joins them into one cluster the
# first time (REDIS_REPLICAS replicas a master), and waits until each node serves every
# slot.
form_redis_cluster() {
	local i port deadline=$((SECONDS + 60)) addrs=() masters
	masters=$((REDIS_NODES / (REDIS_REPLICAS + 1)))
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
		say "joining the Redis nodes into a cluster ($masters masters, $((REDIS_NODES - masters)) replicas)"
		redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$REDIS_REPLICAS" --cluster-yes >>"$logs/redis-cluster.log" 2>&1 ||
			{ tail -n 30 "$logs/redis-cluster.log" >&2; die "redis-cli --cluster create failed"; }
	fi
	for ((i = 1; i <= REDIS_NODES; i++)); do
		until redis_cluster_ok "$(redis_port "$i")"; do
			((SECONDS < deadline)) || die "Redis Cluster not ok on redis-$i: redis-cli -p $(redis_port "$i") cluster info"
			sleep 0.2
		done
	done
}

# kafka_cluster_id is the file of the KRaft cluster id, made once and kept, as KRaft
# requires: in the data folder of a lone node, beside the nodes' folders when there are
# several.
kafka_cluster_id() {
	if ((KAFKA_NODES == 1)); then echo "$data/kafka/cluster.id"; else echo "$data/kafka.cluster.id"; fi
}

# make_kafka_cluster_id makes the cluster id the nodes format their storage with. An id
# starting with '-' reads as an option to kafka-storage, and no node formats (Kafka's own
# random ids avoid it the same way); such an id never formatted a node, so it is replaced.
make_kafka_cluster_id() {
	local file id=
	file=$(kafka_cluster_id)
	mkdir -p "$(dirname "$file")"
	[[ -s $file ]] && id=$(<"$file")
	while [[ -z $id || $id == -* ]]; do
		id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
	done
	printf '%s' "$id" >"$file"
}

start_kafka_node() {
	local n=$1 name props lib=$cache/kafka/lib voters=() i
	name=$(node_name kafka "$n" "$KAFKA_NODES")
	alive "$name" && return 0
	props=$conf/$name/server.properties
	# Every node votes in the controller quorum.
	for ((i = 1; i <= KAFKA_NODES; i++)); do voters+=("$i@127.0.0.1:$(kafka_controller_port "$i")"); done
	mkdir -p "$data/$name" "$logs"
	render "$here/kafka/$KAFKA_CONFIG" "$props" NODE_ID="$n" VOTERS="$(join "${voters[@]}")" \
		PORT="$(kafka_port "$n")" CONTROLLER_PORT="$(kafka_controller_port "$n")" DATA_DIR="$data/$name/log"
	java -cp "$lib/*" -Dlog4j.configuration="file:$here/kafka/log4j.properties" \
		kafka.tools.StorageTool format -t "$(<"$(kafka_cluster_id)")" -c "$props" \
		--ignore-formatted >>"$logs/$name.log" 2>&1 ||
		{ tail -n 20 "$logs/$name.log" >&2; die "formatting $name's storage failed"; }
	launch "$name" "$logs/$name.log" java -Xms"$KAFKA_HEAP_MIN" -Xmx"$KAFKA_HEAP" -XX:+UseG1GC \
		-XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
		-Dlog4j.configuration="file:$here/kafka/log4j.properties" -Dkafka.logs.dir="$logs/$name" \
		-cp "$lib/*" kafka.Kafka "$props"
}

start_cassandra_node() {
	local n=$1 name addr dir yaml
	name=$(node_name cassandra "$n" "$CASSANDRA_NODES")
	alive "$name" && return 0
	addr=${cassandra_addrs[n - 1]}
	dir=$data/$name
	yaml=$conf/$name/cassandra.yaml
	mkdir -p "$dir/tmp" "$logs"
	# The first node is the seed the others join through.
	render "$here/cassandra/$CASSANDRA_CONFIG" "$yaml" ADDRESS="$addr" SEEDS="${cassandra_addrs[0]}:$CASSANDRA_STORAGE_PORT" \
		INITIAL_TOKEN="${cassandra_tokens[n - 1]}" CQL_PORT="$CASSANDRA_PORT" STORAGE_PORT="$CASSANDRA_STORAGE_PORT" DATA_DIR="$dir"
	launch_cassandra "$name" "$dir" "$yaml"
}

# launch_cassandra NAME DIR YAML starts a Cassandra node named NAME (its log file and
# log directory are named after it) with its data in DIR and its settings in YAML.
launch_cassandra() {
	local name=$1 dir=$2 yaml=$3 lib=$cache/cassandra/lib jamm
	jamm=$(find "$lib" -name 'jamm-*.jar' | head -n 1)
	[[ -n $jamm ]] || die "no jamm jar in $lib: run '$0 clean' and remove $cache/cassandra to fetch again"
	local opts=()
	mapfile -t opts < <(grep -v '^[[:space:]]*\(#\|$\)' "$here/cassandra/jvm.options")
	launch "$name" "$logs/$name.log" nice -n "$CASSANDRA_NICE" java "${opts[@]}" \
		-Xms"$CASSANDRA_HEAP" -Xmx"$CASSANDRA_HEAP" -javaagent:"$jamm" \
		-Djava.io.tmpdir="$dir/tmp" \
		-Dcassandra-foreground=yes \
		-Dcassandra.config="file://$yaml" \
		-Dcassandra.storagedir="$dir" \
		-Dcassandra.logdir="$logs/$name" \
		-Dlogback.configurationFile="$here/cassandra/logback.xml" \
		-Dcassandra.skip_wait_for_gossip_to_settle=0 \
		-Dcassandra.ring_delay_ms=1000 \
		${PULSE_CASSANDRA_FAST:+-Dcassandra.skip_sync=true -Dcassandra.unsafesystem=true} \
		-cp "$lib/*" org.apache.cassandra.service.CassandraDaemon
	session_nice "$name" "$CASSANDRA_NICE"
}

# session_nice sets the nice of the session a launched server leads. With autogroup
# scheduling (the default of most kernels) the scheduler weighs each session as one, and
# a process's own nice counts only within its session; launch starts every server in a
# session of its own, so that session's nice is what ranks it against the others. The
# session exists once setsid has run in the child, which is waited for briefly.
session_nice() {
	local pid n=$2 i
	pid=$(<"$run/$1.pid")
	[[ -e /proc/$pid/autogroup ]] || return 0
	for ((i = 0; i < 50; i++)); do
		# Field 6 of stat is the session id; fields are counted after the ')' ending
		# the command name.
		[[ $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f4) == "$pid" ]] && break
		sleep 0.1
	done
	echo "$n" >"/proc/$pid/autogroup" 2>/dev/null || say "could not lower $1's session priority (nice $n); it competes equally for the cores"
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

# range SERVER: the ports of its nodes, ":19092" or ":29092-29094".
range() {
	local first last
	first=$("$1_port" 1)
	last=$("$1_port" "$(nodes "$1")")
	if ((first == last)); then echo ":$first"; else echo ":$first-$last"; fi
}

cmd_up() {
	local t0=$SECONDS running=0 name i
	for name in "${servers[@]}"; do alive "$name" && running=$((running + 1)); done
	if ((running == ${#servers[@]})); then
		say "$TOPOLOGY topology already running ($(make_cmd status)); nothing to do"
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
	for addr in "${cassandra_addrs[@]}"; do
		[[ $addr == 127.0.0.1 ]] && continue
		grep -qE "inet (127\.0\.0\.1/8|$addr/)" <<<"$lo" ||
			die "$addr is not a loopback address here: Cassandra's nodes need it on lo (ip addr add $addr/8 dev lo)"
	done
	say "starting the $TOPOLOGY topology: redis $(range redis), kafka $(range kafka)," \
		"cassandra ${cassandra_addrs[*]} :$CASSANDRA_PORT (data in $data)"
	pulsectl help >/dev/null 2>&1 || true # builds $bin/pulsectl
	[[ -x $bin/pulsectl ]] || die "building pulsectl failed"
	for ((i = 1; i <= REDIS_NODES; i++)); do start_redis_node "$i"; done
	# Each Kafka node formats its storage with the one cluster id (a JVM of its own) and
	# starts, in parallel.
	make_kafka_cluster_id
	local starting=()
	for ((i = 1; i <= KAFKA_NODES; i++)); do
		start_kafka_node "$i" &
		starting+=($!)
	done
	for i in "${starting[@]}"; do wait "$i" || die "starting Kafka failed"; done
	# Further Cassandra nodes join through the first, the seed, once it answers.
	start_cassandra_node 1
	if ((REDIS_NODES > 1)); then
		form_redis_cluster
		say "redis cluster ok in $((SECONDS - t0))s"
	else
		wait_for redis -redis "$(server_addr redis)"
	fi
	for ((i = 1; i <= KAFKA_NODES; i++)); do
		name=$(node_name kafka "$i" "$KAFKA_NODES")
		wait_for "$name" -kafka "$(server_addr "$name")"
	done
	# Topics of several replicas need every broker registered; a broker just started may
	# not be yet.
	pulsectl_patiently "creating the topics" topics -brokers "$(kafka_brokers)" -partitions "$PARTITIONS" -replication "$KAFKA_REPLICATION"
	for ((i = 1; i <= CASSANDRA_NODES; i++)); do
		name=$(node_name cassandra "$i" "$CASSANDRA_NODES")
		start_cassandra_node "$i"
		wait_for "$name" -cassandra "$(server_addr "$name")"
	done
	# A node that has just opened its CQL port may not yet be seen as up by the others,
	# whose quorum reads then fail ("Cannot achieve consistency level"); the migrations
	# are idempotent.
	pulsectl_patiently "applying the migrations" migrate -hosts "$(join "${cassandra_addrs[@]}")" -port "$CASSANDRA_PORT" \
		-keyspace "$KEYSPACE" -dir "$root/migrations" -replication "{'class': 'SimpleStrategy', 'replication_factor': $CASSANDRA_REPLICATION}"
	say "$TOPOLOGY topology up in $((SECONDS - t0))s; its servers hold $(rss_mib "${servers[@]}") MiB (resident)"
}

# stop_all SERVER GRACE stops every node of SERVER, the last first.
stop_all() {
	local i count
	count=$(nodes "$1")
	for ((i = count; i >= 1; i--)); do stop "$(node_name "$1" "$i" "$count")" "$2"; done
}

cmd_down() {
	local name any=0
	for name in "${services[@]}" "${servers[@]}"; do alive "$name" && any=1; done
	if ((any == 0)); then
		rm -f "$run"/*.pid 2>/dev/null || true
		say "nothing running"
		return 0
	fi
	say "stopping the $TOPOLOGY topology"
	# Services first, so nothing writes to a server that is going away.
	for name in "${services[@]}"; do stop "$name" 15; done
	stop_all kafka 60
	stop_all cassandra 60
	stop_all redis 15
}

cmd_status() {
	local name pid role
	for name in "${servers[@]}" "${services[@]}"; do
		if pid=$(pid_of "$name"); then
			role=
			if [[ $name == redis-* ]]; then
				role=$(redis-cli -p "$(redis_port "$(node_of "$name")")" role 2>/dev/null | head -n 1)
			fi
			printf '%-13s running  pid %-8s %-16s %s\n' "$name" "$pid" "$(server_addr "$name")" "$role"
		else
			printf '%-13s stopped\n' "$name"
		fi
	done
	printf 'memory: %s MiB resident\ndata: %s\nlogs: %s\n' "$(rss_mib)" "$data" "$logs"
}

# cmd_env prints the variables that point Pulse's services, pulsectl and the tests at
# the topology: eval "$(deploy/local/stack.sh env)" with PULSE_TOPOLOGY=cluster. It
# prints nothing for the single stack: every default already points at it.
cmd_env() {
	[[ $TOPOLOGY == single ]] && return 0
	cat <<EOF2
export PULSE_TOPOLOGY=$TOPOLOGY
export PULSE_HOME=$PULSE_HOME
export PULSE_KAFKA_BROKERS=$(kafka_brokers)
export PULSE_REDIS_ADDR=$(redis_addrs)
export PULSE_CASSANDRA_HOSTS=$(join "${cassandra_addrs[@]}")
export PULSE_CASSANDRA_PORT=$CASSANDRA_PORT
export PULSE_PARTITIONS=$PARTITIONS
export PULSE_KEYSPACE=$KEYSPACE
export PULSE_CASSANDRA_KEYSPACE=$KEYSPACE
EOF2
}

cmd_clean() {
	cmd_down
	say "removing $data, $logs, $conf"
	rm -rf "$data" "$logs" "$conf" "$run"
}

cmd_logs() {
	mkdir -p "$logs"
	if [[ $# -gt 0 ]]; then
		[[ -f $logs/$1.log ]] || die "no log $logs/$1.log"
		exec tail -n 100 -F "$logs/$1.log"
	fi
	shopt -s nullglob
	local files=("$logs"/*.log)
	((${#files[@]})) || die "no logs yet in $logs"
	exec tail -n 20 -F "${files[@]}"
}


# ---------------------------------------------------------------------------
# Services. Instance i of a service listens on the service's base port + 10 × (i-1);
# every instance of aggregator or history is a member of its service's consumer group.

service_port() {
	local kind n base
	kind=$(kind_of "$1")
	n=$(node_of "$1")
	case $kind in
	ingest | query | aggregator | history | notifier) base=${kind^^}_PORT ;;
	*) die "no service $1" ;;
	esac
	echo $((${!base} + 10 * (n - 1)))
}

# service_url NAME: the service's base URL. Ingest and query serve TLS when
# PULSE_TLS_CERT_FILE and PULSE_TLS_KEY_FILE are set (they inherit this environment);
# by default, and always for aggregator and history, plain HTTP on 127.0.0.1.
service_url() {
	local scheme=http kind
	kind=$(kind_of "$1")
	if [[ -n ${PULSE_TLS_CERT_FILE:-} && ($kind == ingest || $kind == query) ]]; then scheme=https; fi
	echo "$scheme://127.0.0.1:$(service_port "$1")"
}

# service_urls KIND: the URLs of every instance of a service, space-separated.
service_urls() {
	local i count urls=()
	count=$(nodes "$1")
	for ((i = 1; i <= count; i++)); do urls+=("$(service_url "$(node_name "$1" "$i" "$count")")"); done
	echo "${urls[*]}"
}

# start_services [NAME...]: every service instance when none is named.
start_services() {
	local name kind names=("$@") pids=() urls=() built=" " peers origins
	((${#names[@]})) || names=("${services[@]}")
	dev_keys
	dev_cursor_secret
	say "building services into $bin"
	for name in "${names[@]}"; do
		kind=$(kind_of "$name")
		[[ $built == *" $kind "* ]] && continue
		(cd "$root" && go build -o "$bin/pulse-$kind" "./services/$kind") || die "building $kind failed"
		built+="$kind "
	done
	# The dashboard's pipeline view scrapes the first instance of each other service.
	peers="ingest=$(service_url ingest)/metrics"
	peers+=",aggregator=$(service_url "$(node_name aggregator 1 "$AGGREGATOR_INSTANCES")")/metrics"
	peers+=",history=$(service_url "$(node_name history 1 "$HISTORY_INSTANCES")")/metrics"
	peers+=",notifier=$(service_url "$(node_name notifier 1 "$NOTIFIER_INSTANCES")")/metrics"
	webhook_endpoints
	# The pages query serves (the dashboard) and make run's demo chat page may call
	# ingest and every query instance from a browser: CORS allows the query instances'
	# own origins, whatever the topology's ports and scheme, and the demo's; the demo's
	# WebSockets need its origin in PULSE_FEED_ORIGINS. A caller's settings win.
	read -ra origins <<<"$(service_urls query)"
	origins+=("http://127.0.0.1:$DEMO_PORT")
	for name in "${names[@]}"; do
		alive "$name" && continue
		kind=$(kind_of "$name")
		# The pid file's marker is $PULSE_HOME, found in the binary's path.
		PULSE_HTTP_ADDR="127.0.0.1:$(service_port "$name")" \
			PULSE_KAFKA_BROKERS="$(kafka_brokers)" \
			PULSE_REDIS_ADDR="$(redis_addrs)" \
			PULSE_CASSANDRA_HOSTS="$(join "${cassandra_addrs[@]}")" \
			PULSE_CASSANDRA_PORT="$CASSANDRA_PORT" \
			PULSE_CASSANDRA_KEYSPACE="$KEYSPACE" \
			PULSE_QUERY_PEER_METRICS="${PULSE_QUERY_PEER_METRICS:-$peers}" \
			PULSE_NOTIFIER_ENDPOINTS_FILE="$PULSE_NOTIFIER_ENDPOINTS_FILE" \
			PULSE_CORS_ORIGINS="${PULSE_CORS_ORIGINS:-$(join "${origins[@]}")}" \
			PULSE_FEED_ORIGINS="${PULSE_FEED_ORIGINS:-127.0.0.1:$DEMO_PORT}" \
			launch "$name" "$logs/$name.log" "$bin/pulse-$kind"
		pids+=("$name=$(<"$run/$name.pid")")
	done
	for name in "${names[@]}"; do urls+=("$name=$(service_url "$name")"); done
	# With TLS, pulsectl wait trusts PULSE_TLS_CA_FILE besides the system's roots.
	# -pids: a service that exits at start fails the wait at once, with its log's tail.
	pulsectl wait -timeout "$SERVICES_WAIT_TIMEOUT" -logs "$logs" -pids "$(join "${pids[@]}")" -http "$(join "${urls[@]}")"
}

# services, stop-services and pids let cmd/bench start on a stack that is up only the
# services that are not running, stop only those again, and find every process whose CPU
# it measures, all by this script's pid files.
cmd_stop_services() {
	local name
	(($#)) || set -- "${services[@]}"
	for name in "$@"; do stop "$name" 20; done
}

cmd_pids() {
	local name pid
	for name in "${servers[@]}" "${services[@]}"; do
		if pid=$(pid_of "$name"); then echo "$name $pid"; fi
	done
}

# webhook_endpoints makes the notifier's endpoints file once, with no endpoint, under
# $PULSE_HOME/notifier/ (only its owner may read it: endpoints hold their secrets), and
# exports PULSE_NOTIFIER_ENDPOINTS_FILE. The notifier reads it again every 10 s, so
# endpoints added to it need no restart (docs/webhooks.md). A caller's own file wins.
webhook_endpoints() {
	if [[ -n ${PULSE_NOTIFIER_ENDPOINTS_FILE:-} ]]; then return; fi
	local dir=$PULSE_HOME/notifier
	(umask 077 && mkdir -p "$dir")
	[[ -s $dir/endpoints.json ]] || (umask 077 && echo '{"endpoints": []}' >"$dir/endpoints.json")
	export PULSE_NOTIFIER_ENDPOINTS_FILE=$dir/endpoints.json
}

# dev_keys makes the development API keys once, under $PULSE_HOME/auth/ (a folder
# only its owner may read): one key per scope in producer.key, reader.key and
# operator.key, and api-keys, the file ingest and query read, holding only their
# SHA-256 digests (docs/design.md, Security). It exports PULSE_API_KEYS_FILE for the
# services and the three keys for cmd_run to print. A caller's own
# PULSE_API_KEYS_FILE wins: then nothing is made.
dev_keys() {
	if [[ -n ${PULSE_API_KEYS_FILE:-} ]]; then
		DEV_KEYS=
		return
	fi
	local dir=$PULSE_HOME/auth name scope digest lines=()
	(umask 077 && mkdir -p "$dir")
	for name in producer reader operator; do
		if [[ ! -s $dir/$name.key ]]; then
			# 256 random bits, base64url, in the form pulsectl keys new makes.
			(umask 077 && printf 'pulse_%s' "$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')" >"$dir/$name.key")
		fi
		case $name in
		producer) scope="write" ;;
		reader) scope="read" ;;
		operator) scope=operator ;;
		esac
		digest=$(tr -d '\n' <"$dir/$name.key" | sha256sum | cut -d' ' -f1)
		lines+=("dev-$name $scope sha256:$digest")
	done
	(umask 077 && {
		echo "# Development keys made by deploy/local/stack.sh; the keys are in *.key beside this file."
		printf '%s\n' "${lines[@]}"
	} >"$dir/api-keys")
	PULSE_API_KEYS_FILE=$dir/api-keys
	PULSE_PRODUCER_KEY=$(<"$dir/producer.key")
	PULSE_READER_KEY=$(<"$dir/reader.key")
	PULSE_OPERATOR_KEY=$(<"$dir/operator.key")
	export PULSE_API_KEYS_FILE
	DEV_KEYS=1
	dev_verifier "$dir"
}

# dev_verifier makes the development user-token verifier once: an HS256 secret in
# $1/jwt.secret, issuer pulse-dev and audience pulse, which pulsectl token signs for
# (docs/design.md, Security). A caller's own verifier (any PULSE_JWT_* key setting)
# wins: then nothing is made.
dev_verifier() {
	if [[ -n ${PULSE_JWT_HS256_SECRET:-}${PULSE_JWT_PUBLIC_KEY_FILE:-}${PULSE_JWT_JWKS_FILE:-} ]]; then
		DEV_JWT=
		return
	fi
	if [[ ! -s $1/jwt.secret ]]; then
		(umask 077 && head -c 48 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' >"$1/jwt.secret")
	fi
	PULSE_JWT_HS256_SECRET=$(<"$1/jwt.secret")
	PULSE_JWT_ISSUER=${PULSE_JWT_ISSUER:-pulse-dev}
	PULSE_JWT_AUDIENCE=${PULSE_JWT_AUDIENCE:-pulse}
	export PULSE_JWT_HS256_SECRET PULSE_JWT_ISSUER PULSE_JWT_AUDIENCE
	DEV_JWT=$1/jwt.secret
}

# dev_cursor_secret makes, once, the secret query signs its cursors with, in
# $PULSE_HOME/auth/cursor.secret, so that cursors stay valid across restarts and
# between the query instances of a cluster. A caller's PULSE_CURSOR_SECRET wins.
dev_cursor_secret() {
	[[ -n ${PULSE_CURSOR_SECRET:-} ]] && return
	local file=$PULSE_HOME/auth/cursor.secret
	(umask 077 && mkdir -p "${file%/*}")
	if [[ ! -s $file ]]; then
		(umask 077 && head -c 48 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' >"$file")
	fi
	PULSE_CURSOR_SECRET=$(<"$file")
	export PULSE_CURSOR_SECRET
}


# start_demo serves the demo chat page (examples/chat, on the JavaScript client) with
# pulsectl demo, in the background until this script exits; it builds the client first
# (npm). Without npm there is no demo page, and everything else runs as before.
start_demo() {
	local query_url=$1
	DEMO_URL=
	if ! command -v npm >/dev/null; then
		say "npm not found: no demo chat page (apt-get install nodejs npm)"
		return 0
	fi
	say "building the JavaScript client for the demo page"
	if ! (cd "$root/clients/js" && { [[ -d node_modules ]] || npm ci --no-audit --no-fund; } && npm run build) >"$logs/demo-build.log" 2>&1; then
		say "building the JavaScript client failed (see $logs/demo-build.log): no demo chat page"
		return 0
	fi
	"$bin/pulsectl" demo -addr "127.0.0.1:$DEMO_PORT" -dir "$root/examples/chat" -client "$root/clients/js/dist" \
		-ingest "$(service_url ingest)" -query "$query_url" >"$logs/demo.log" 2>&1 &
	DEMO_PID=$!
	trap 'kill "$DEMO_PID" 2>/dev/null || true' EXIT
	DEMO_URL="http://127.0.0.1:$DEMO_PORT/"
}

cmd_run() {
	local t0=$SECONDS
	cmd_up
	start_services
	local up=$((SECONDS - t0)) keys ingest_url query_url redis=standalone env=
	ingest_url=$(service_url ingest)
	query_url=$(service_url "$(node_name query 1 "$QUERY_INSTANCES")")
	start_demo "$query_url"
	if ((REDIS_NODES > 1)); then
		local masters=$((REDIS_NODES / (REDIS_REPLICAS + 1)))
		redis="$masters masters, $((REDIS_NODES - masters)) replicas"
	fi
	if [[ $TOPOLOGY != single ]]; then
		env="
  environment eval \"\$(PULSE_TOPOLOGY=$TOPOLOGY deploy/local/stack.sh env)\"   (pulsectl, tests)"
	fi
	if [[ -n $DEV_KEYS ]]; then
		keys=$(
			cat <<EOF
  Every request but /healthz, /readyz, /metrics and /openapi.json needs a key. The
  development keys (made once, in $PULSE_HOME/auth/) — paste these lines in your shell:
    export PULSE_PRODUCER_KEY=$PULSE_PRODUCER_KEY   # write: ingest, and group writes on query
    export PULSE_READER_KEY=$PULSE_READER_KEY     # read: query
    export PULSE_OPERATOR_KEY=$PULSE_OPERATOR_KEY   # operator: view=operator, firehose, a user's history
  then:
    curl -s -XPOST $ingest_url/status -H "Authorization: Bearer \$PULSE_PRODUCER_KEY" \\
         -H 'Content-Type: application/json' -d '{"userId":"alice","status":"online"}'
    curl -s -H "Authorization: Bearer \$PULSE_READER_KEY" $query_url/status/alice
    curl -s -H "Authorization: Bearer \$PULSE_OPERATOR_KEY" \\
         '$query_url/v1/users/alice/sessions?view=operator'
    go run ./cmd/pulsectl sessions alice     # reads PULSE_OPERATOR_KEY
    go run ./cmd/loadgen -duration 10s -single-rate 100 -read-rate 100   # reads PULSE_PRODUCER_KEY, PULSE_READER_KEY
EOF
		)
		if [[ -n $DEV_JWT ]]; then
			keys+=$(
				cat <<EOF

  User tokens (JWTs whose sub is the user) are verified with a development secret, issuer
  $PULSE_JWT_ISSUER and audience $PULSE_JWT_AUDIENCE; mint one with:
    PULSE_JWT_HS256_SECRET=\$(cat $DEV_JWT) PULSE_JWT_ISSUER=$PULSE_JWT_ISSUER PULSE_JWT_AUDIENCE=$PULSE_JWT_AUDIENCE \\
      go run ./cmd/pulsectl token -user alice -watch bob -ttl 1h
EOF
			)
			if [[ -n $DEMO_URL ]]; then
				local who others tok
				keys+=$'\n\n'"  The demo chat page, $DEMO_URL: open it once per user (a private window each) and
  log in with one of these tokens of alice, bob and carol, friends of each other (12h):"
				for who in alice bob carol; do
					others=$(printf '%s\n' alice bob carol | grep -vx "$who" | paste -sd,)
					tok=$(PULSE_JWT_HS256_SECRET=$(<"$DEV_JWT") PULSE_JWT_ISSUER=$PULSE_JWT_ISSUER PULSE_JWT_AUDIENCE=$PULSE_JWT_AUDIENCE \
						"$bin/pulsectl" token -user "$who" -watch "$others" -ttl 12h)
					keys+=$'\n'"    $who: $tok"
				done
			fi
		fi
	else
		keys="  Keys: the services read PULSE_API_KEYS_FILE=$PULSE_API_KEYS_FILE (yours; no development keys made)."
	fi
	cat <<EOF

Pulse is running on the $TOPOLOGY topology (up in ${up}s; $(rss_mib) MiB resident in all):
  ingest      $(service_urls ingest)     (POST /status, /v1/events, /v1/heartbeat)
  query       $(service_urls query)     (GET /status/{userId}, POST /statuses, /v1/users/{id}/status,
                                            /v1/online, /v1/online/count, POST /v1/online/filter,
                                            /v1/watch (WebSocket), /v1/watch/sse)
  dashboard   $query_url/dashboard/     (open in a browser; paste a reader or operator key)
  demo        ${DEMO_URL:-none (needs npm)}     (a chat page on the JavaScript client; tokens below)
  aggregator  $(service_urls aggregator)     (health and metrics; one consumer group)
  history     $(service_urls history)     (health and metrics; one consumer group)
  notifier    $(service_urls notifier)     (webhooks; endpoints in $PULSE_NOTIFIER_ENDPOINTS_FILE, docs/webhooks.md)
  Every service serves /healthz, /readyz and /metrics; ingest and query /openapi.json.

  kafka       $(kafka_brokers)   (replication $KAFKA_REPLICATION)
  redis       $(redis_addrs)   ($redis)
  cassandra   $(join "${cassandra_addrs[@]}") :$CASSANDRA_PORT   (keyspace $KEYSPACE, replication $CASSANDRA_REPLICATION)
  logs        $logs   ($(make_cmd logs) S=<name>)
  status      $(make_cmd status)$env

$keys

Stop with Ctrl-C here, or '$(make_cmd down)' from another terminal.
EOF
	watch_services
}

# watch_services stays in the foreground while the services run: Ctrl-C or TERM stops
# everything; a service that exits stops everything and shows its last log lines;
# pid files gone (`make down` ran elsewhere) end the wait.
watch_services() {
	trap 'echo; cmd_down; exit 0' INT TERM
	local name
	while true; do
		for name in "${services[@]}"; do
			# No pid file: `make down` ran elsewhere and stopped everything.
			[[ -f $run/$name.pid ]] || {
				say "services were stopped; exiting"
				exit 0
			}
			if ! alive "$name"; then
				echo "stack: $name exited unexpectedly; last lines of $logs/$name.log:" >&2
				tail -n 30 "$logs/$name.log" >&2
				cmd_down
				exit 1
			fi
		done
		sleep 1 &
		wait $! || true
	done
}


case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
clean) cmd_clean ;;
logs)
	shift
	cmd_logs "$@"
	;;
run) cmd_run ;;
services)
	shift
	start_services "$@"
	;;
stop-services)
	shift
	cmd_stop_services "$@"
	;;
pids) cmd_pids ;;
env) cmd_env ;;
*)
	# The comment at the top of this file.
	awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
	exit 2
	;;
esac
