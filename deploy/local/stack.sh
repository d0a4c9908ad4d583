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
#                      build and start the services that are not running (all four, or
#                      those named) with this environment, and wait until they are ready
#   stack.sh stop-services [name...]
#                      stop the services (all four, or those named); the servers keep running
#   stack.sh pids      "name pid" for each process of the stack that runs
#   stack.sh env       the variables that point services and tests at this topology
#
# Everything lives under $PULSE_HOME (default <repo>/.pulse, gitignored): cache/ holds
# the server jars, data/ the servers' data, logs/ their logs, run/ the pid files.
#
# PULSE_TOPOLOGY=cluster (make ... TOPOLOGY=cluster) runs the cluster topology instead,
# described in cluster.sh: several nodes of each server, in <repo>/.pulse-cluster and on
# ports of its own, so it runs beside the single stack.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

TOPOLOGY=${PULSE_TOPOLOGY:-single}
case $TOPOLOGY in
single) PULSE_HOME=${PULSE_HOME:-$root/.pulse} ;;
cluster) PULSE_HOME=${PULSE_HOME:-$root/.pulse-cluster} ;;
*)
	echo "stack: PULSE_TOPOLOGY=$TOPOLOGY: want single or cluster" >&2
	exit 2
	;;
esac
cache=$PULSE_HOME/cache
data=$PULSE_HOME/data
logs=$PULSE_HOME/logs
run=$PULSE_HOME/run
conf=$PULSE_HOME/conf
bin=$PULSE_HOME/bin

# Ports of Pulse's own, so a developer's other Kafka, Cassandra or Redis never clash.
KAFKA_PORT=${PULSE_KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=${PULSE_KAFKA_CONTROLLER_PORT:-19093}
CASSANDRA_PORT=${PULSE_CASSANDRA_PORT:-19042}
CASSANDRA_STORAGE_PORT=${PULSE_CASSANDRA_STORAGE_PORT:-17000}
REDIS_PORT=${PULSE_REDIS_PORT:-16379}
INGEST_PORT=${PULSE_INGEST_PORT:-18080}
QUERY_PORT=${PULSE_QUERY_PORT:-18081}
AGGREGATOR_PORT=${PULSE_AGGREGATOR_PORT:-18082}
HISTORY_PORT=${PULSE_HISTORY_PORT:-18083}

PARTITIONS=${PULSE_PARTITIONS:-16}
KEYSPACE=${PULSE_KEYSPACE:-pulse}
KAFKA_HEAP=${PULSE_KAFKA_HEAP:-512m}
CASSANDRA_HEAP=${PULSE_CASSANDRA_HEAP:-1G}
# Everything shares this machine; history is the one consumer that may lag, so Cassandra
# runs at a lower CPU priority and the live path (Kafka, Redis, the services) comes first
# when the cores are saturated. 0 gives it equal priority.
CASSANDRA_NICE=${PULSE_CASSANDRA_NICE:-10}
WAIT_TIMEOUT=${PULSE_WAIT_TIMEOUT:-240s}
SERVICES_WAIT_TIMEOUT=${PULSE_SERVICES_WAIT_TIMEOUT:-60s}

servers=(redis kafka cassandra)
services=(ingest aggregator history query)

say() { printf '==> %s\n' "$*"; }
die() {
	printf 'stack: %s\n' "$*" >&2
	exit 1
}

# ---------------------------------------------------------------------------
# Processes. A pid file is trusted only while its process still runs and its
# command line carries the marker of this stack, so a recycled pid is never signalled.

marker() {
	case $1 in
	redis) echo ":$REDIS_PORT" ;;
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
# Servers

start_redis() {
	alive redis && return 0
	need_redis
	mkdir -p "$data/redis"
	# AOF keeps the data across down/up; RDB snapshots are off to keep writes cheap.
	# hash-max-listpack-value 256 keeps multi-device user states in their bucket's
	# listpack (docs/redis.md).
	launch redis "$logs/redis.log" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" \
		--dir "$data/redis" --save "" --appendonly yes --appendfsync everysec \
		--hash-max-listpack-value 256 \
		--daemonize no --protected-mode yes --logfile ""
}

start_kafka() {
	alive kafka && return 0
	local props=$conf/kafka/server.properties lib=$cache/kafka/lib
	mkdir -p "$data/kafka" "$logs"
	render "$here/kafka/server.properties.in" "$props" \
		PORT="$KAFKA_PORT" CONTROLLER_PORT="$KAFKA_CONTROLLER_PORT" DATA_DIR="$data/kafka/log"
	# The cluster id is made once per data folder and kept, as KRaft requires.
	if [[ ! -s $data/kafka/cluster.id ]]; then
		head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' >"$data/kafka/cluster.id"
	fi
	java -cp "$lib/*" -Dlog4j.configuration="file:$here/kafka/log4j.properties" \
		kafka.tools.StorageTool format -t "$(<"$data/kafka/cluster.id")" -c "$props" \
		--ignore-formatted >>"$logs/kafka.log" 2>&1 ||
		{ tail -n 20 "$logs/kafka.log" >&2; die "formatting Kafka's storage failed"; }
	launch kafka "$logs/kafka.log" java -Xms"$KAFKA_HEAP" -Xmx"$KAFKA_HEAP" -XX:+UseG1GC \
		-XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
		-Dlog4j.configuration="file:$here/kafka/log4j.properties" -Dkafka.logs.dir="$logs/kafka" \
		-cp "$lib/*" kafka.Kafka "$props"
}

start_cassandra() {
	alive cassandra && return 0
	local dir=$data/cassandra yaml=$conf/cassandra/cassandra.yaml
	mkdir -p "$dir/tmp" "$logs"
	render "$here/cassandra/cassandra.yaml.in" "$yaml" \
		CQL_PORT="$CASSANDRA_PORT" STORAGE_PORT="$CASSANDRA_STORAGE_PORT" DATA_DIR="$dir"
	launch_cassandra cassandra "$dir" "$yaml"
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

cmd_up() {
	local t0=$SECONDS running=0 name
	for name in "${servers[@]}"; do alive "$name" && running=$((running + 1)); done
	if ((running == ${#servers[@]})); then
		say "stack already running (make status); nothing to do"
		return 0
	fi
	command -v go >/dev/null || die "Go is needed: see README.md"
	need_java
	fetch kafka
	fetch cassandra
	say "starting redis :$REDIS_PORT, kafka :$KAFKA_PORT, cassandra :$CASSANDRA_PORT (data in $data)"
	start_redis
	start_kafka
	start_cassandra
	local pids=()
	for name in "${servers[@]}"; do pids+=("$name=$(cat "$run/$name.pid")"); done
	pulsectl wait -timeout "$WAIT_TIMEOUT" -logs "$logs" -pids "$(
		IFS=,
		echo "${pids[*]}"
	)" \
		-redis "127.0.0.1:$REDIS_PORT" -kafka "127.0.0.1:$KAFKA_PORT" -cassandra "127.0.0.1:$CASSANDRA_PORT"
	pulsectl topics -brokers "127.0.0.1:$KAFKA_PORT" -partitions "$PARTITIONS"
	pulsectl migrate -hosts 127.0.0.1 -port "$CASSANDRA_PORT" -keyspace "$KEYSPACE" -dir "$root/migrations"
	say "stack up in $((SECONDS - t0))s"
}

cmd_down() {
	local name any=0
	for name in "${services[@]}" "${servers[@]}"; do alive "$name" && any=1; done
	if ((any == 0)); then
		rm -f "$run"/*.pid 2>/dev/null || true
		say "nothing running"
		return 0
	fi
	say "stopping"
	# Services first, so nothing writes to a server that is going away.
	for name in "${services[@]}"; do stop "$name" 15; done
	stop kafka 60
	stop cassandra 60
	stop redis 15
}

cmd_status() {
	local name pid port
	for name in "${servers[@]}" "${services[@]}"; do
		case $name in
		redis) port=$REDIS_PORT ;;
		kafka) port=$KAFKA_PORT ;;
		cassandra) port=$CASSANDRA_PORT ;;
		ingest) port=$INGEST_PORT ;;
		query) port=$QUERY_PORT ;;
		aggregator) port=$AGGREGATOR_PORT ;;
		history) port=$HISTORY_PORT ;;
		esac
		if pid=$(pid_of "$name"); then
			printf '%-11s running  pid %-8s 127.0.0.1:%s\n' "$name" "$pid" "$port"
		else
			printf '%-11s stopped\n' "$name"
		fi
	done
	printf 'data: %s\nlogs: %s\n' "$data" "$logs"
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
# Services

service_port() {
	case $1 in
	ingest) echo "$INGEST_PORT" ;;
	query) echo "$QUERY_PORT" ;;
	aggregator) echo "$AGGREGATOR_PORT" ;;
	history) echo "$HISTORY_PORT" ;;
	esac
}

# service_url NAME: the service's base URL. Ingest and query serve TLS when
# PULSE_TLS_CERT_FILE and PULSE_TLS_KEY_FILE are set (they inherit this environment);
# by default, and always for aggregator and history, plain HTTP on 127.0.0.1.
service_url() {
	local scheme=http
	if [[ -n ${PULSE_TLS_CERT_FILE:-} && ( $1 == ingest || $1 == query ) ]]; then scheme=https; fi
	echo "$scheme://127.0.0.1:$(service_port "$1")"
}

# start_services [NAME...]: all four services when none is named.
start_services() {
	local name names=("$@") pids=()
	((${#names[@]})) || names=("${services[@]}")
	dev_keys
	dev_cursor_secret
	say "building services into $bin"
	for name in "${names[@]}"; do
		(cd "$root" && go build -o "$bin/pulse-$name" "./services/$name") || die "building $name failed"
	done
	for name in "${names[@]}"; do
		alive "$name" && continue
		# The pid file's marker is $PULSE_HOME, found in the binary's path.
		PULSE_HTTP_ADDR="127.0.0.1:$(service_port "$name")" \
			PULSE_KAFKA_BROKERS="127.0.0.1:$KAFKA_PORT" \
			PULSE_REDIS_ADDR="127.0.0.1:$REDIS_PORT" \
			PULSE_CASSANDRA_HOSTS="127.0.0.1" \
			PULSE_CASSANDRA_PORT="$CASSANDRA_PORT" \
			PULSE_CASSANDRA_KEYSPACE="$KEYSPACE" \
			launch "$name" "$logs/$name.log" "$bin/pulse-$name"
		pids+=("$name=$(<"$run/$name.pid")")
	done
	local urls=()
	for name in "${names[@]}"; do urls+=("$name=$(service_url "$name")"); done
	# With TLS, pulsectl wait trusts PULSE_TLS_CA_FILE besides the system's roots.
	# -pids: a service that exits at start fails the wait at once, with its log's tail.
	pulsectl wait -timeout "$SERVICES_WAIT_TIMEOUT" -logs "$logs" -pids "$(
		IFS=,
		echo "${pids[*]}"
	)" -http "$(
		IFS=,
		echo "${urls[*]}"
	)"
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
		producer) scope=write ;;
		reader) scope=read ;;
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

cmd_run() {
	cmd_up
	start_services
	local keys ingest_url query_url
	ingest_url=$(service_url ingest)
	query_url=$(service_url query)
	if [[ -n $DEV_KEYS ]]; then
		keys=$(
			cat <<EOF
  Every request but /healthz, /readyz, /metrics and /openapi.json needs a key. The
  development keys (made once, in $PULSE_HOME/auth/) — paste these lines in your shell:
    export PULSE_PRODUCER_KEY=$PULSE_PRODUCER_KEY   # write: ingest
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
		fi
	else
		keys="  Keys: the services read PULSE_API_KEYS_FILE=$PULSE_API_KEYS_FILE (yours; no development keys made)."
	fi
	cat <<EOF

Pulse is running:
  ingest      $ingest_url     (POST /status, /v1/events, /v1/heartbeat)
  query       $query_url     (GET /status/{userId}, POST /statuses, /v1/users/{id}/status,
                                            /v1/online, /v1/online/count, POST /v1/online/filter,
                                            /v1/watch (WebSocket), /v1/watch/sse)
  dashboard   $query_url/dashboard/     (open in a browser; paste a reader or operator key)
  aggregator  http://127.0.0.1:$AGGREGATOR_PORT     (health and metrics)
  history     http://127.0.0.1:$HISTORY_PORT     (health and metrics)
  Every service serves /healthz, /readyz and /metrics; ingest and query /openapi.json.

  kafka       127.0.0.1:$KAFKA_PORT   cassandra 127.0.0.1:$CASSANDRA_PORT   redis 127.0.0.1:$REDIS_PORT
  logs        $logs   (make logs)

$keys

Stop with Ctrl-C here, or 'make down' from another terminal.
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

# env prints nothing for the single stack: every default already points at it.
cmd_env() { :; }

if [[ $TOPOLOGY == cluster ]]; then
	# shellcheck source=deploy/local/cluster.sh
	source "$here/cluster.sh"
fi

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
	sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
