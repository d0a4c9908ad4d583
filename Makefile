# Pulse — make help lists the targets.
#
# The two commands a new machine needs:
#   make run    start Kafka, Cassandra, Redis and the five services on this machine
#   make test   lint, unit tests, the local stack, integration tests against it

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

MODULE := github.com/pulse-presence/pulse
# Every module but tests/. Unit tests run anywhere; the few that use Redis skip without
# it, except under `make test` and CI, which start the stack first and fail such a test
# instead of skipping it (internal/platform/servertest).
UNIT_PKGS := $(MODULE)/internal/... $(MODULE)/pkg/... $(MODULE)/cmd/... $(MODULE)/services/... $(MODULE)/examples/...
STACK := deploy/local/stack.sh
# TOPOLOGY=single (the default): one node of each server. TOPOLOGY=cluster: Redis
# Cluster (3 masters, 3 replicas), three Kafka brokers, two Cassandra nodes and two
# members of each consumer service, beside the single stack (the columns of
# deploy/local/topologies).
# up, down, status, clean, logs, run and every test target take it.
TOPOLOGY ?= single
export PULSE_TOPOLOGY := $(TOPOLOGY)
# The topology's addresses for the tests (nothing for single: the defaults are its own).
# The unit tests take only the addresses: some run stack.sh on stack folders of their own.
TOPOLOGY_ENV = eval "$$($(STACK) env)" &&
# Integration tests left out on the cluster topology (each with its reason above it),
# and the cluster's failover tests (tests/cluster_failover_test.go), which need its
# replicas and are left out of the single topology.
# TestFaultLoadKafkaKilled kills the single stack's one broker by its pid file; on the
# cluster, TestKafkaKilledLosesNothingAcknowledged kills every broker and
# TestClusterFailoverKafkaLeaderKilled one leader, under load, with the same checks.
# TestChatDemoInTheBrowser and TestJSClient check the browser page and the JavaScript
# client, which do the same whatever the servers' topology; the present sockets they use
# are checked on the cluster by TestPresentSocketIsTheDevicesPresence.
CLUSTER_SKIP := TestFaultLoadKafkaKilled|TestChatDemoInTheBrowser|TestJSClient
ifeq ($(TOPOLOGY),cluster)
TOPOLOGY_SKIP := $(if $(CLUSTER_SKIP),-skip '^($(CLUSTER_SKIP))$$')
# Every write waits for two of three replicas, outages restart several nodes.
INTEGRATION_TIMEOUT ?= 60m
else
TOPOLOGY_SKIP := -skip '^TestClusterFailover'
endif
GO_TEST_FLAGS ?= -count=1
# Integration tests share one stack; -p 1 keeps packages from racing for it.
INTEGRATION_TIMEOUT ?= 30m

include mk/generate.mk

# Test runs go through gotestsum (pinned in tools/): it ends with a count of the tests
# run and skipped and names every skipped test.
GOTESTSUM := bin/tools/gotestsum

.PHONY: help up down status clean logs run build lint fmt test test-unit test-integration test-js

help: ## Show the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

up: ## Start Kafka, Cassandra and Redis (first run fetches the jars), create topics, migrate
	@$(STACK) up

down: ## Stop the services and the stack started by up/run
	@$(STACK) down

status: ## Show what runs, on which port
	@$(STACK) status

clean: ## Stop everything and remove the stack's data and logs (the jar cache stays)
	@$(STACK) clean

logs: ## Follow the logs of the stack and services (make logs S=kafka for one)
	@$(STACK) logs $(S)

run: ## Start the stack and the five services, print their URLs; Ctrl-C stops all
	@$(STACK) run

.PHONY: bench
bench: ## Benchmark the pipeline on the stack into bench-results/<time>/ (BENCH_FLAGS=-quick: ~3 min)
	@$(STACK) up
	go run $(MODULE)/cmd/bench $(BENCH_FLAGS)

build: ## Build the five services and pulsectl into bin/
	@mkdir -p bin
	go build -o bin/ $(MODULE)/services/ingest $(MODULE)/services/aggregator \
		$(MODULE)/services/history $(MODULE)/services/query $(MODULE)/services/notifier $(MODULE)/cmd/pulsectl

.PHONY: config-doc
config-doc: ## Rewrite docs/configuration.md's tables from the services' tables in code
	go test -count=1 -p 1 -run '^TestConfigDocDocuments(Shared|Service)Variables$$' \
		$(MODULE)/internal/platform/config $(addprefix $(MODULE)/services/,ingest aggregator history query notifier) -args -update-docs

fmt: ## Format all Go code
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

lint: ## gofmt, go vet and staticcheck over every module
	@unformatted=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet $(MODULE)/...
	go vet -tags faulttest $(MODULE)/services/aggregator
	@mkdir -p bin/tools
	cd tools && GOWORK=off go build -o ../bin/tools/ honnef.co/go/tools/cmd/staticcheck
	bin/tools/staticcheck $(MODULE)/...

$(GOTESTSUM): tools/go.mod tools/go.sum
	@mkdir -p bin/tools
	cd tools && GOWORK=off go build -o ../bin/tools/ gotest.tools/gotestsum

test-unit: $(GOTESTSUM) ## Unit tests (the Redis-backed ones skip without the stack, fail without it under CI)
	$(TOPOLOGY_ENV) unset PULSE_TOPOLOGY && $(GOTESTSUM) --format pkgname-and-test-fails -- $(GO_TEST_FLAGS) -race $(UNIT_PKGS)

# Schemathesis (PyPI), pinned, in a virtualenv of its own: TestOpenAPIFuzzedWithSchemathesis
# runs it against the live ingest and query.
SCHEMATHESIS_VERSION := 4.32.5
SCHEMATHESIS := bin/tools/schemathesis/bin/schemathesis

$(SCHEMATHESIS):
	@command -v python3 >/dev/null || { echo "python3 (with venv) is needed for schemathesis" >&2; exit 1; }
	python3 -m venv bin/tools/schemathesis
	bin/tools/schemathesis/bin/pip install -q --disable-pip-version-check schemathesis==$(SCHEMATHESIS_VERSION)

# The JavaScript client, clients/js: its npm dev dependencies (TypeScript,
# openapi-typescript) as package-lock.json pins them. npm ci writes the hidden lockfile
# last, so the target stands for a complete install.
JS_CLIENT := clients/js
JS_DEPS := $(JS_CLIENT)/node_modules/.package-lock.json

$(JS_DEPS): $(JS_CLIENT)/package.json $(JS_CLIENT)/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node.js 20.10 or newer) is needed for clients/js: apt-get install nodejs npm" >&2; exit 1; }
	cd $(JS_CLIENT) && npm ci --no-audit --no-fund --loglevel=error

# Offline: the generated types still match the OpenAPI document, the unit tests (fake
# fetch and WebSocket), the build. TestJSClient runs its stack tests with tests/.
test-js: $(JS_DEPS) ## The JavaScript client: types match the OpenAPI document, unit tests, build
	cd $(JS_CLIENT) && npm run --silent check-types && npm test && npm run --silent build

# Every test's output, passing ones' logs included (the scenarios' figures), goes to
# bin/test-integration.json as go test -json events.
test-integration: up $(GOTESTSUM) $(SCHEMATHESIS) $(JS_DEPS) ## Integration tests in tests/ against the real Kafka, Cassandra and Redis
	$(TOPOLOGY_ENV) $(GOTESTSUM) --format pkgname-and-test-fails --jsonfile bin/test-integration.json -- $(GO_TEST_FLAGS) -p 1 -timeout $(INTEGRATION_TIMEOUT) \
		$(TOPOLOGY_SKIP) $(MODULE)/tests/...

# The fault scenarios of tests/ (docs/design.md guarantees 7, 10 and 11): servers down,
# processes killed with SIGKILL, Redis flushed, poison records. make test runs them too,
# with the rest of tests/.
FAULT_TESTS := TestPipelineSurvivesCrashes|TestHistoryCrashReplaysExactly|TestHistoryRollupsMatchModel|TestRedisFlushHealsItself|TestRedisFlushRestoresUsersBeyondTheLogFromHistory|TestReadyzFailsWhileRedisIsDown|TestQueryRejectsBadInputAndSurvivesRedisOutage|TestAggregatorStopsInTimeWhileRedisHangs|TestTimeoutsSurviveAnAggregatorOutage|TestHistoryAPIWithoutCassandra|TestPoisonRecordsGoToTheDeadLetterTopics|TestKafkaKilledLosesNothingAcknowledged|TestHistoryCatchesUpAfterCassandraOutage|TestFaultLoadRedisRestartedEmpty|TestFaultLoadRedisFlushAll|TestFaultLoadAggregatorCrashes|TestFaultLoadHistoryCrashes|TestFaultLoadKafkaKilled|TestWebhooksDeliverEveryChange

# Every fuzz target of the modules, FUZZTIME each (go test -fuzz runs one at a time).
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 30s): decoders of outside input, cursors, tokens, bodies
	@for pkg in $$(go list $(UNIT_PKGS)); do \
		for f in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "==> $$pkg $$f ($(FUZZTIME))"; \
			go test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

.PHONY: test-faults
test-faults: up $(GOTESTSUM) ## The fault scenarios alone: crashes, outages, a flushed Redis, poison records
	$(TOPOLOGY_ENV) $(GOTESTSUM) --format pkgname-and-test-fails -- $(GO_TEST_FLAGS) -p 1 -timeout $(INTEGRATION_TIMEOUT) \
		$(TOPOLOGY_SKIP) -run '^($(FAULT_TESTS))$$' $(MODULE)/tests/...

# The stack comes up before the unit tests, so none of them skips for want of a server.
test: export PULSE_REQUIRE_SERVERS = 1
test: lint test-deploy test-js up test-unit test-integration ## Everything: lint, the chart and alert rules, the JS client, the stack, unit tests, integration tests

# The Kubernetes deployment and the monitoring, checked offline: the Helm chart linted and
# rendered with its defaults and the production-like values, every rendered manifest
# decoded strictly into the Kubernetes API's Go types (tools/deploy), the dashboard's and
# the alerts' metrics checked against the code, and the alert rules' promtool unit tests.
# Helm is pinned in tools/deploy/go.mod; promtool is Debian's prometheus package.
HELM := bin/tools/helm
CHART := deploy/helm/pulse
CHART_PROD_VALUES := $(CHART)/ci/production-values.yaml

# Helm's own build stamps its version and the Kubernetes version it renders for (else
# v1.20, older than the chart's kubeVersion) with -X; the same here, from the pins.
HELM_VERSION = $(shell cd tools/deploy && GOWORK=off go list -m -f '{{.Version}}' helm.sh/helm/v3)
K8S_VERSION = $(shell cd tools/deploy && GOWORK=off go list -m -f '{{.Version}}' k8s.io/client-go)
HELM_LDFLAGS = -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	$(foreach p,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 \
		-X helm.sh/helm/v3/$(p).k8sVersionMinor=$(word 2,$(subst ., ,$(K8S_VERSION))))

$(HELM): tools/deploy/go.mod tools/deploy/go.sum
	@mkdir -p bin/tools
	cd tools/deploy && GOWORK=off go build -ldflags '$(HELM_LDFLAGS)' -o ../../bin/tools/ helm.sh/helm/v3/cmd/helm

.PHONY: test-deploy
test-deploy: $(HELM) $(GOTESTSUM) ## The Helm chart (lint, template, schema check), dashboard and alert rules (promtool), offline
	@command -v promtool >/dev/null || { echo "promtool is needed: apt-get install prometheus" >&2; exit 1; }
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) -f $(CHART_PROD_VALUES)
	$(HELM) template pulse $(CHART) >/dev/null
	$(HELM) template pulse $(CHART) -f $(CHART_PROD_VALUES) >/dev/null
	cd tools/deploy && GOWORK=off ../../$(GOTESTSUM) --format pkgname-and-test-fails -- -count=1 ./...
	promtool check rules deploy/observability/alerts.yaml
	promtool test rules deploy/observability/alerts_test.yaml
