# Protobuf code generation and schema lint. Included by the root Makefile;
# also runs on its own: make -f mk/generate.mk generate
#
# buf and protoc-gen-go come from the tool directives in tools/go.mod, never
# from whatever is installed on the machine, so every checkout generates the
# same bytes. They are built into bin/tools (ignored by git) and buf finds
# protoc-gen-go on PATH through buf.gen.yaml's `local: protoc-gen-go`.

# Resolved when this file is read, before any later include changes MAKEFILE_LIST.
PULSE_GEN_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)
PULSE_GEN_BIN := $(PULSE_GEN_ROOT)/bin/tools
PULSE_GEN_SCHEMAS := $(PULSE_GEN_ROOT)/schemas
# tools/ is a module of its own; GOWORK=off keeps any go.work a developer made
# from resolving the tools' dependencies.
PULSE_GEN_GO := cd $(PULSE_GEN_ROOT)/tools && GOWORK=off go
PULSE_GEN_BUF := cd $(PULSE_GEN_SCHEMAS) && PATH="$(PULSE_GEN_BIN):$$PATH" $(PULSE_GEN_BIN)/buf

.PHONY: generate lint-proto pulse-gen-tools

# Prerequisites sit on their own lines so the `##` help lines stay `target: ## text`.
generate lint-proto: pulse-gen-tools

generate: ## Regenerate pkg/pb from schemas/ with the pinned buf and protoc-gen-go, then lint the schemas
	$(PULSE_GEN_BUF) generate
	$(PULSE_GEN_BUF) lint

lint-proto: ## Lint the protobuf schemas in schemas/ with buf (STANDARD rules)
	$(PULSE_GEN_BUF) lint

# go build is a no-op when the binaries are current, so this costs nothing
# after the first run; rebuilding every time also picks up a changed pin.
pulse-gen-tools:
	@mkdir -p $(PULSE_GEN_BIN)
	$(PULSE_GEN_GO) build -o $(PULSE_GEN_BIN)/ github.com/bufbuild/buf/cmd/buf google.golang.org/protobuf/cmd/protoc-gen-go
