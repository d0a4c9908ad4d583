{{/*
Names, labels and the pieces every workload of the chart shares: the image, the PULSE_*
environment of each engine, and the Secrets mounted as the files the PULSE_*_FILE
variables name.
*/}}

{{- define "pulse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pulse.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The name of one component's objects: <fullname>-<component>. */}}
{{- define "pulse.componentName" -}}
{{- printf "%s-%s" (include "pulse.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Secret holding the notifier's endpoints file: the one named, or the one the chart
makes from notifier.endpointsJSON; empty when neither is set. Both set is a mistake: which
would the notifier read?
*/}}
{{- define "pulse.notifierEndpointsSecretName" -}}
{{- $n := .Values.notifier }}
{{- if and $n.endpointsSecret.name $n.endpointsJSON }}
{{- fail "notifier.endpointsSecret.name and notifier.endpointsJSON are both set: set one" }}
{{- end }}
{{- if $n.endpointsJSON }}
{{- /* Wrapped in an object, so that fromJson takes any JSON value and says what is wrong. */}}
{{- $parsed := fromJson (printf "{\"endpoints\": %s}" $n.endpointsJSON) }}
{{- if not (and (hasKey $parsed "endpoints") (eq (len $parsed) 1)) }}
{{- fail (printf "notifier.endpointsJSON is not one JSON value%s" (ternary (printf ": %v" (get $parsed "Error")) "" (hasKey $parsed "Error"))) }}
{{- end }}
{{- printf "%s-endpoints" (include "pulse.componentName" (dict "root" . "component" "notifier")) }}
{{- else }}
{{- $n.endpointsSecret.name }}
{{- end }}
{{- end }}

{{/* The Secret query signs cursors with: the user's, or the one the chart makes. */}}
{{- define "pulse.cursorSecretName" -}}
{{- .Values.query.cursorSecret.name | default (printf "%s-cursor" (include "pulse.componentName" (dict "root" . "component" "query"))) }}
{{- end }}

{{- define "pulse.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pulse.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "pulse.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "pulse.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: pulse
{{- end }}

{{- define "pulse.image" -}}
{{- $img := .Values.image }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) }}
{{- end }}
{{- end }}

{{/* Whether ingest and query serve TLS on their port. */}}
{{- define "pulse.httpsEnabled" -}}
{{- if .Values.tls.existingSecret }}true{{ end }}
{{- end }}

{{- define "pulse.scheme" -}}
{{- if include "pulse.httpsEnabled" . }}https{{ else }}http{{ end }}
{{- end }}

{{/*
The Secrets a set of engines needs, as a YAML list of {volume, secret, dir}: the
volumes, the mounts and the PULSE_*_FILE variables all come from it, so they agree.
Arguments: root, groups (a list of kafka, redis, cassandra, auth, tls, notifier).
*/}}
{{- define "pulse.secretFiles" -}}
{{- $v := .root.Values }}
{{- $files := list }}
{{- range $g := .groups }}
{{- if has $g (list "kafka" "redis" "cassandra") }}
{{- $e := index $v $g }}
{{- if $e.tls.caSecret.name }}
{{- $files = append $files (dict "volume" (printf "%s-ca" $g) "secret" $e.tls.caSecret.name "dir" (printf "/etc/pulse/%s/ca" $g)) }}
{{- end }}
{{- if $e.tls.clientCertSecret.name }}
{{- $files = append $files (dict "volume" (printf "%s-client" $g) "secret" $e.tls.clientCertSecret.name "dir" (printf "/etc/pulse/%s/client" $g)) }}
{{- end }}
{{- $pw := dict }}
{{- if eq $g "kafka" }}{{ $pw = $e.sasl.passwordSecret }}{{ else }}{{ $pw = $e.passwordSecret }}{{ end }}
{{- if $pw.name }}
{{- $files = append $files (dict "volume" (printf "%s-password" $g) "secret" $pw.name "dir" (printf "/etc/pulse/%s/password" $g)) }}
{{- end }}
{{- end }}
{{- if eq $g "auth" }}
{{- if $v.auth.apiKeys.existingSecret }}
{{- $files = append $files (dict "volume" "api-keys" "secret" $v.auth.apiKeys.existingSecret "dir" "/etc/pulse/auth/api-keys") }}
{{- end }}
{{- if $v.auth.jwt.publicKeySecret.name }}
{{- $files = append $files (dict "volume" "jwt-public-key" "secret" $v.auth.jwt.publicKeySecret.name "dir" "/etc/pulse/auth/jwt") }}
{{- end }}
{{- if $v.auth.jwt.jwksSecret.name }}
{{- $files = append $files (dict "volume" "jwt-jwks" "secret" $v.auth.jwt.jwksSecret.name "dir" "/etc/pulse/auth/jwks") }}
{{- end }}
{{- end }}
{{- if eq $g "notifier" }}
{{- with include "pulse.notifierEndpointsSecretName" $.root }}
{{- $files = append $files (dict "volume" "notifier-endpoints" "secret" . "dir" "/etc/pulse/notifier/endpoints") }}
{{- end }}
{{- end }}
{{- if eq $g "tls" }}
{{- if $v.tls.existingSecret }}
{{- $files = append $files (dict "volume" "tls-server" "secret" $v.tls.existingSecret "dir" "/etc/pulse/tls/server") }}
{{- end }}
{{- if $v.tls.clientCASecret.name }}
{{- $files = append $files (dict "volume" "tls-client-ca" "secret" $v.tls.clientCASecret.name "dir" "/etc/pulse/tls/client-ca") }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $files }}
{{- end }}

{{/* Volumes of a pod: its Secrets and a writable /tmp. Arguments as pulse.secretFiles. */}}
{{- define "pulse.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- range include "pulse.secretFiles" . | fromYamlArray }}
- name: {{ .volume }}
  secret:
    secretName: {{ .secret }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{/* Mounted as directories, not subPath, so a changed Secret reaches the running pod. */}}
{{- define "pulse.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- range include "pulse.secretFiles" . | fromYamlArray }}
- name: {{ .volume }}
  mountPath: {{ .dir }}
  readOnly: true
{{- end }}
{{- end }}

{{/* One env entry; value rendered as a string. */}}
{{- define "pulse.envVar" -}}
- name: {{ .name }}
  value: {{ .value | toString | quote }}
{{- end }}

{{/* Log settings and the extra variables of every service. */}}
{{- define "pulse.env.common" -}}
{{- $v := .Values }}
- name: PULSE_LOG_LEVEL
  value: {{ $v.log.level | quote }}
- name: PULSE_LOG_FORMAT
  value: {{ $v.log.format | quote }}
{{- end }}

{{/* NAME: value maps of PULSE_* variables, checked by name. Arguments: a map. */}}
{{- define "pulse.env.map" -}}
{{- range $name, $value := . }}
{{- if not (regexMatch "^PULSE_[A-Z0-9_]+$" $name) }}
{{- fail (printf "env: %q is not a PULSE_* variable name" $name) }}
{{- end }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/* TLS variables of an engine (PULSE_<ENGINE>_TLS*). Arguments: root, engine. */}}
{{- define "pulse.env.engineTLS" -}}
{{- $e := index .root.Values .engine }}
{{- $up := upper .engine }}
{{- if or $e.tls.enabled $e.tls.caSecret.name $e.tls.clientCertSecret.name }}
- name: PULSE_{{ $up }}_TLS
  value: "true"
{{- end }}
{{- if $e.tls.caSecret.name }}
- name: PULSE_{{ $up }}_TLS_CA_FILE
  value: {{ printf "/etc/pulse/%s/ca/%s" .engine $e.tls.caSecret.key | quote }}
{{- end }}
{{- if $e.tls.clientCertSecret.name }}
- name: PULSE_{{ $up }}_TLS_CERT_FILE
  value: {{ printf "/etc/pulse/%s/client/%s" .engine $e.tls.clientCertSecret.certKey | quote }}
- name: PULSE_{{ $up }}_TLS_KEY_FILE
  value: {{ printf "/etc/pulse/%s/client/%s" .engine $e.tls.clientCertSecret.keyKey | quote }}
{{- end }}
{{- end }}

{{- define "pulse.env.kafka" -}}
{{- $k := .Values.kafka }}
- name: PULSE_KAFKA_BROKERS
  value: {{ join "," $k.brokers | quote }}
- name: PULSE_TOPIC_EVENTS
  value: {{ $k.topics.events | quote }}
- name: PULSE_TOPIC_CHANGES
  value: {{ $k.topics.changes | quote }}
{{- include "pulse.env.engineTLS" (dict "root" . "engine" "kafka") }}
{{- if $k.sasl.username }}
- name: PULSE_KAFKA_SASL_MECHANISM
  value: {{ $k.sasl.mechanism | quote }}
- name: PULSE_KAFKA_SASL_USERNAME
  value: {{ $k.sasl.username | quote }}
{{- end }}
{{- if $k.sasl.passwordSecret.name }}
- name: PULSE_KAFKA_SASL_PASSWORD_FILE
  value: {{ printf "/etc/pulse/kafka/password/%s" $k.sasl.passwordSecret.key | quote }}
{{- end }}
{{- end }}

{{- define "pulse.env.redis" -}}
{{- $r := .Values.redis }}
- name: PULSE_REDIS_ADDR
  value: {{ join "," $r.addrs | quote }}
- name: PULSE_REDIS_PREFIX
  value: {{ $r.prefix | quote }}
{{- if $r.username }}
- name: PULSE_REDIS_USERNAME
  value: {{ $r.username | quote }}
{{- end }}
{{- if $r.passwordSecret.name }}
- name: PULSE_REDIS_PASSWORD_FILE
  value: {{ printf "/etc/pulse/redis/password/%s" $r.passwordSecret.key | quote }}
{{- end }}
{{- include "pulse.env.engineTLS" (dict "root" . "engine" "redis") }}
{{- end }}

{{/* Cassandra's variables; the password as a file unless passwordEnv (pulsectl migrate reads PULSE_CASSANDRA_PASSWORD). */}}
{{- define "pulse.env.cassandra" -}}
{{- $c := .root.Values.cassandra }}
- name: PULSE_CASSANDRA_HOSTS
  value: {{ join "," $c.hosts | quote }}
- name: PULSE_CASSANDRA_PORT
  value: {{ $c.port | toString | quote }}
- name: PULSE_CASSANDRA_KEYSPACE
  value: {{ $c.keyspace | quote }}
- name: PULSE_CASSANDRA_CONSISTENCY
  value: {{ $c.consistency | quote }}
{{- if $c.username }}
- name: PULSE_CASSANDRA_USERNAME
  value: {{ $c.username | quote }}
{{- end }}
{{- if $c.passwordSecret.name }}
{{- if .passwordEnv }}
- name: PULSE_CASSANDRA_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $c.passwordSecret.name }}
      key: {{ $c.passwordSecret.key }}
{{- else }}
- name: PULSE_CASSANDRA_PASSWORD_FILE
  value: {{ printf "/etc/pulse/cassandra/password/%s" $c.passwordSecret.key | quote }}
{{- end }}
{{- end }}
{{- include "pulse.env.engineTLS" (dict "root" .root "engine" "cassandra") }}
{{- end }}

{{/* The notifier's own variables: the replay topic and the endpoints file. */}}
{{- define "pulse.env.notifier" -}}
{{- $v := .Values }}
- name: PULSE_TOPIC_WEBHOOKS
  value: {{ $v.kafka.topics.webhooks | quote }}
{{- if include "pulse.notifierEndpointsSecretName" . }}
- name: PULSE_NOTIFIER_ENDPOINTS_FILE
  value: {{ printf "/etc/pulse/notifier/endpoints/%s" $v.notifier.endpointsSecret.key | quote }}
{{- end }}
{{- end }}

{{/* Credentials and TLS of ingest and query. */}}
{{- define "pulse.env.edge" -}}
{{- $v := .Values }}
{{- if not $v.auth.enabled }}
- name: PULSE_AUTH
  value: "off"
{{- end }}
{{- if $v.auth.apiKeys.existingSecret }}
- name: PULSE_API_KEYS_FILE
  value: {{ printf "/etc/pulse/auth/api-keys/%s" $v.auth.apiKeys.key | quote }}
{{- end }}
{{- if $v.auth.jwt.hs256Secret.name }}
- name: PULSE_JWT_HS256_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $v.auth.jwt.hs256Secret.name }}
      key: {{ $v.auth.jwt.hs256Secret.key }}
{{- end }}
{{- if $v.auth.jwt.publicKeySecret.name }}
- name: PULSE_JWT_PUBLIC_KEY_FILE
  value: {{ printf "/etc/pulse/auth/jwt/%s" $v.auth.jwt.publicKeySecret.key | quote }}
{{- end }}
{{- if $v.auth.jwt.jwksSecret.name }}
- name: PULSE_JWT_JWKS_FILE
  value: {{ printf "/etc/pulse/auth/jwks/%s" $v.auth.jwt.jwksSecret.key | quote }}
{{- end }}
{{- with $v.auth.jwt.issuer }}
- name: PULSE_JWT_ISSUER
  value: {{ . | quote }}
{{- end }}
{{- with $v.auth.jwt.audience }}
- name: PULSE_JWT_AUDIENCE
  value: {{ . | quote }}
{{- end }}
{{- if $v.auth.jwt.audienceWaived }}
- name: PULSE_JWT_AUDIENCE_WAIVED
  value: "true"
{{- end }}
{{- with $v.auth.jwt.maxAge }}
- name: PULSE_JWT_MAX_AGE
  value: {{ . | quote }}
{{- end }}
{{- if $v.tls.existingSecret }}
- name: PULSE_TLS_CERT_FILE
  value: {{ printf "/etc/pulse/tls/server/%s" $v.tls.certKey | quote }}
- name: PULSE_TLS_KEY_FILE
  value: {{ printf "/etc/pulse/tls/server/%s" $v.tls.keyKey | quote }}
{{- end }}
{{- if $v.tls.clientCASecret.name }}
- name: PULSE_TLS_CLIENT_CA_FILE
  value: {{ printf "/etc/pulse/tls/client-ca/%s" $v.tls.clientCASecret.key | quote }}
{{- end }}
{{- end }}

{{/*
Probes on /healthz (alive) and /readyz (dependencies answer). Under mutual TLS the kubelet
cannot present a client certificate, so both become TCP checks of the port.
Arguments: root, port, edge (whether the port may speak TLS).
*/}}
{{- define "pulse.probes" -}}
{{- $p := .root.Values.probes }}
{{- $mtls := and .edge .root.Values.tls.clientCASecret.name }}
{{- $scheme := "HTTP" }}
{{- if and .edge (include "pulse.httpsEnabled" .root) }}{{ $scheme = "HTTPS" }}{{ end }}
livenessProbe:
  {{- if $mtls }}
  tcpSocket:
    port: http
  {{- else }}
  httpGet:
    path: /healthz
    port: http
    scheme: {{ $scheme }}
  {{- end }}
  {{- toYaml $p.liveness | nindent 2 }}
readinessProbe:
  {{- if $mtls }}
  tcpSocket:
    port: http
  {{- else }}
  httpGet:
    path: /readyz
    port: http
    scheme: {{ $scheme }}
  {{- end }}
  {{- toYaml $p.readiness | nindent 2 }}
{{- end }}

{{/* Pod-level settings shared by every workload. Arguments: root, svc (the component's values). */}}
{{- define "pulse.podSpecCommon" -}}
{{- $v := .root.Values }}
{{- with $v.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
automountServiceAccountToken: false
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
{{- with .svc.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .svc.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .svc.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .svc.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
