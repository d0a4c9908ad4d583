{{/*
The Deployment of one service. Arguments: root, component (ingest, query, aggregator,
history, notifier), groups (the engines and edge settings it reads: kafka, redis,
cassandra, auth, tls; notifier: its endpoints file), edge (whether it is an HTTP edge:
ingest, query).
*/}}
{{- define "pulse.deployment" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $svc := index $v .component }}
{{- $ctx := dict "root" $root "component" .component }}
{{- $env := include "pulse.env" . | fromYamlArray }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "pulse.componentName" $ctx }}
  labels:
    {{- include "pulse.labels" $ctx | nindent 4 }}
spec:
  {{- if not (and (hasKey $svc "autoscaling") $svc.autoscaling.enabled) }}
  replicas: {{ $svc.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "pulse.selectorLabels" $ctx | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 0
      maxSurge: 1
  template:
    metadata:
      labels:
        {{- include "pulse.labels" $ctx | nindent 8 }}
        {{- with $svc.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- $annotations := include "pulse.scrapeAnnotations" $root | fromYaml }}
      {{- $annotations = merge (deepCopy ($svc.podAnnotations | default dict)) $annotations }}
      {{- with $annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      {{- include "pulse.podSpecCommon" (dict "root" $root "svc" $svc) | trim | nindent 6 }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      containers:
        - name: {{ .component }}
          image: {{ include "pulse.image" $root | quote }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          command:
            - /usr/local/bin/{{ .component }}
          ports:
            - name: http
              containerPort: {{ $svc.port }}
              protocol: TCP
            {{- if $v.admin.enabled }}
            - name: admin
              containerPort: {{ $v.admin.port }}
              protocol: TCP
            {{- end }}
          env:
            {{- toYaml $env | nindent 12 }}
          {{- include "pulse.probes" (dict "root" $root "edge" .edge) | trim | nindent 10 }}
          resources:
            {{- toYaml $svc.resources | nindent 12 }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "pulse.volumeMounts" . | nindent 12 }}
      volumes:
        {{- include "pulse.volumes" . | nindent 8 }}
{{- end }}

{{/*
Every variable of one service, in order: chart-derived first, then `env`, then
`<component>.env`, then the extraEnv lists; a later entry of the same name replaces an
earlier one, so values always win over what the chart derives.
*/}}
{{- define "pulse.env" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $svc := index $v .component }}
{{- $all := list }}
{{- $all = concat $all (include "pulse.env.common" $root | fromYamlArray) }}
{{- $all = append $all (dict "name" "PULSE_HTTP_ADDR" "value" (printf ":%v" $svc.port)) }}
{{- if $v.admin.enabled }}
{{- $all = append $all (dict "name" "PULSE_ADMIN_ADDR" "value" (printf ":%v" $v.admin.port)) }}
{{- end }}
{{- if has "kafka" .groups }}{{ $all = concat $all (include "pulse.env.kafka" $root | fromYamlArray) }}{{ end }}
{{- if has "redis" .groups }}{{ $all = concat $all (include "pulse.env.redis" $root | fromYamlArray) }}{{ end }}
{{- if has "cassandra" .groups }}{{ $all = concat $all (include "pulse.env.cassandra" (dict "root" $root) | fromYamlArray) }}{{ end }}
{{- if .edge }}{{ $all = concat $all (include "pulse.env.edge" $root | fromYamlArray) }}{{ end }}
{{- if has "notifier" .groups }}{{ $all = concat $all (include "pulse.env.notifier" $root | fromYamlArray) }}{{ end }}
{{- if and (eq .component "aggregator") $svc.staticMembership }}
{{- $all = append $all (dict "name" "PULSE_AGGREGATOR_INSTANCE_ID" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name"))) }}
{{- end }}
{{- if eq .component "query" }}
{{- $cs := $svc.cursorSecret }}
{{- $all = append $all (dict "name" "PULSE_CURSOR_SECRET" "valueFrom" (dict "secretKeyRef" (dict "name" (include "pulse.cursorSecretName" $root) "key" $cs.key))) }}
{{- if $cs.previousKey }}
{{- $all = append $all (dict "name" "PULSE_CURSOR_SECRET_PREVIOUS" "valueFrom" (dict "secretKeyRef" (dict "name" (include "pulse.cursorSecretName" $root) "key" $cs.previousKey))) }}
{{- end }}
{{- end }}
{{- if and (eq .component "query") $svc.peerMetrics }}
{{- $peers := list }}
{{- $others := list "ingest" "aggregator" "history" }}
{{- if $v.notifier.enabled }}{{ $others = append $others "notifier" }}{{ end }}
{{- range $c := $others }}
{{- if $v.admin.enabled }}
{{- /* /metrics is only on the admin listener, reached through the cluster-internal admin Service. */}}
{{- $peers = append $peers (printf "%s=http://%s-admin:%v/metrics" $c (include "pulse.componentName" (dict "root" $root "component" $c)) $v.admin.port) }}
{{- else }}
{{- $scheme := ternary (include "pulse.scheme" $root) "http" (eq $c "ingest") }}
{{- $peers = append $peers (printf "%s=%s://%s:%v/metrics" $c $scheme (include "pulse.componentName" (dict "root" $root "component" $c)) (index $v $c "port")) }}
{{- end }}
{{- end }}
{{- $all = append $all (dict "name" "PULSE_QUERY_PEER_METRICS" "value" (join "," $peers)) }}
{{- end }}
{{- if and (eq .component "history") (hasKey $v.ingest.env "PULSE_INGEST_MAX_SKEW") }}
{{- /* history checks its horizon against ingest's skew: give it ingest's. */}}
{{- $all = append $all (dict "name" "PULSE_INGEST_MAX_SKEW" "value" (toString (index $v.ingest.env "PULSE_INGEST_MAX_SKEW"))) }}
{{- end }}
{{- $all = concat $all (include "pulse.env.map" $v.env | fromYamlArray) }}
{{- $all = concat $all (include "pulse.env.map" $svc.env | fromYamlArray) }}
{{- $all = concat $all $v.extraEnv $svc.extraEnv }}
{{- include "pulse.env.dedupe" $all }}
{{- end }}

{{/* A list of EnvVars as YAML, each name once: a later entry replaces an earlier one in its place. */}}
{{- define "pulse.env.dedupe" -}}
{{- $byName := dict }}
{{- $order := list }}
{{- range . }}
{{- if not (hasKey $byName .name) }}{{ $order = append $order .name }}{{ end }}
{{- $_ := set $byName .name . }}
{{- end }}
{{- $out := list }}
{{- range $order }}{{ $out = append $out (index $byName .) }}{{ end }}
{{- toYaml $out }}
{{- end }}

{{/* The Service in front of one component's pods. Arguments: root, component. */}}
{{- define "pulse.service" -}}
{{- $svc := index .root.Values .component }}
{{- $ctx := dict "root" .root "component" .component }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "pulse.componentName" $ctx }}
  labels:
    {{- include "pulse.labels" $ctx | nindent 4 }}
  {{- with (and (hasKey $svc "service") $svc.service.annotations) }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ if hasKey $svc "service" }}{{ $svc.service.type }}{{ else }}ClusterIP{{ end }}
  selector:
    {{- include "pulse.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: http
      port: {{ if hasKey $svc "service" }}{{ $svc.service.port }}{{ else }}{{ $svc.port }}{{ end }}
      targetPort: http
      protocol: TCP
{{- end }}

{{/*
The cluster-internal Service of one component's admin listener (/metrics, pprof), for
the ServiceMonitor and query's pipeline view. Always ClusterIP and never the public
Service, whatever <component>.service says: the admin port answers without credentials.
Arguments: root, component.
*/}}
{{- define "pulse.adminService" -}}
{{- if .root.Values.admin.enabled }}
{{- $ctx := dict "root" .root "component" .component }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "pulse.componentName" $ctx }}-admin
  labels:
    {{- include "pulse.labels" $ctx | nindent 4 }}
    pulse-presence.io/listener: admin
spec:
  type: ClusterIP
  selector:
    {{- include "pulse.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: admin
      port: {{ .root.Values.admin.port }}
      targetPort: admin
      protocol: TCP
{{- end }}
{{- end }}

{{/*
Prometheus's scrape annotations for the pods, pointing at the admin port, for a
Prometheus that discovers pods by annotation rather than through the ServiceMonitor.
*/}}
{{- define "pulse.scrapeAnnotations" -}}
{{- if .Values.admin.enabled }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.admin.port | quote }}
prometheus.io/path: /metrics
prometheus.io/scheme: http
{{- end }}
{{- end }}

{{/* The PodDisruptionBudget of one component. Arguments: root, component. */}}
{{- define "pulse.pdb" -}}
{{- $svc := index .root.Values .component }}
{{- $ctx := dict "root" .root "component" .component }}
{{- if $svc.pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "pulse.componentName" $ctx }}
  labels:
    {{- include "pulse.labels" $ctx | nindent 4 }}
spec:
  {{- if hasKey $svc.pdb "minAvailable" }}
  minAvailable: {{ $svc.pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $svc.pdb.maxUnavailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "pulse.selectorLabels" $ctx | nindent 6 }}
{{- end }}
{{- end }}

{{/* The HorizontalPodAutoscaler of an HTTP edge. Arguments: root, component. */}}
{{- define "pulse.hpa" -}}
{{- $svc := index .root.Values .component }}
{{- $ctx := dict "root" .root "component" .component }}
{{- if $svc.autoscaling.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "pulse.componentName" $ctx }}
  labels:
    {{- include "pulse.labels" $ctx | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "pulse.componentName" $ctx }}
  minReplicas: {{ $svc.autoscaling.minReplicas }}
  maxReplicas: {{ $svc.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ $svc.autoscaling.targetCPUUtilizationPercentage }}
    {{- with $svc.autoscaling.targetMemoryUtilizationPercentage }}
    - type: Resource
      resource:
        name: memory
        target:
          type: Utilization
          averageUtilization: {{ . }}
    {{- end }}
  {{- with $svc.autoscaling.behavior }}
  behavior:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}
