{{/* Names, labels, and what every kubus container shares. */}}

{{- define "kubus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-kubus, or the release name when it already says kubus; at most 63 characters. */}}
{{- define "kubus.fullname" -}}
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

{{/* The name of one component's objects: (list $ "queue"). */}}
{{- define "kubus.componentName" -}}
{{- $ := index . 0 -}}
{{- printf "%s-%s" (include "kubus.fullname" $) (index . 1) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kubus.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: only what never changes across upgrades. */}}
{{- define "kubus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kubus.labels" -}}
helm.sh/chart: {{ include "kubus.chart" . }}
{{ include "kubus.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubus
{{- end }}

{{/* Selector labels of one component: (list $ "binder"). */}}
{{- define "kubus.componentSelectorLabels" -}}
{{ include "kubus.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "kubus.componentLabels" -}}
{{ include "kubus.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* "true" in cluster mode (kubus schedules the pods of the cluster it runs in: the watcher,
binders binding through the API, the ClusterRole), "" in the bus mode. */}}
{{- define "kubus.clusterMode" -}}
{{- if eq .Values.mode "cluster" }}true{{ end }}
{{- end }}

{{/* "true" for a component that calls the Kubernetes API, (list $ "binder"): the watcher and the
binders, in cluster mode. Only their pods get the ServiceAccount's token. */}}
{{- define "kubus.callsKubeApi" -}}
{{- $ := index . 0 -}}
{{- if and (include "kubus.clusterMode" $) (has (index . 1) (list "watcher" "binder")) }}true{{ end }}
{{- end }}

{{/* The ClusterRole and ClusterRoleBinding (cluster-scoped: the namespace keeps two releases of
one name apart). */}}
{{- define "kubus.clusterRoleName" -}}
{{- printf "%s-%s" (include "kubus.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "kubus.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kubus.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kubus.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The name a subchart gives its objects (the usual fullname rule), for its Service's DNS name. */}}
{{- define "kubus.subchartFullname" -}}
{{- $ := index . 0 -}}
{{- $chart := index . 1 }}
{{- $values := index $.Values $chart }}
{{- if $values.fullnameOverride }}
{{- $values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default $chart $values.nameOverride }}
{{- if contains $name $.Release.Name }}
{{- $.Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" $.Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "true" when the bundled NATS runs as a cluster (the NATS chart's own config.cluster). */}}
{{- define "kubus.natsCluster" -}}
{{- if and .Values.nats.enabled (dig "config" "cluster" "enabled" false .Values.nats) }}true{{ end }}
{{- end }}

{{/* The pods of a StatefulSet by their stable DNS names, (list $ statefulSet headlessService
count): <statefulSet>-<i>.<headlessService>.<namespace>.svc, space-separated. */}}
{{- define "kubus.podHosts" -}}
{{- $ := index . 0 -}}
{{- $statefulSet := index . 1 }}
{{- $service := index . 2 }}
{{- $hosts := list }}
{{- range $i := until (int (index . 3)) }}
{{- $hosts = append $hosts (printf "%s-%d.%s.%s.svc" $statefulSet $i $service $.Release.Namespace) }}
{{- end }}
{{- join " " $hosts }}
{{- end }}

{{- define "kubus.natsUrl" -}}
{{- if include "kubus.natsCluster" . }}
{{- /* Every server of the NATS chart's StatefulSet, as its routes name them (<name>-<i>.<name>-headless). */}}
{{- $name := include "kubus.subchartFullname" (list . "nats") }}
{{- $hosts := splitList " " (include "kubus.podHosts" (list . $name (printf "%s-headless" $name) .Values.nats.config.cluster.replicas)) }}
{{- $urls := list }}
{{- range $hosts }}{{ $urls = append $urls (printf "nats://%s:4222" .) }}{{ end }}
{{- join "," $urls }}
{{- else if .Values.nats.enabled }}
{{- printf "nats://%s:4222" (include "kubus.subchartFullname" (list . "nats")) }}
{{- else }}
{{- .Values.externalNats.url }}
{{- end }}
{{- end }}

{{/* The copies JetStream keeps of each stream (KUBUS_STREAM_REPLICAS): streamReplicas, else 3 (at
most the servers) with the bundled NATS cluster; empty: the services' default, 1. */}}
{{- define "kubus.streamReplicas" -}}
{{- if .Values.streamReplicas }}
{{- .Values.streamReplicas }}
{{- else if include "kubus.natsCluster" . }}
{{- min 3 (int .Values.nats.config.cluster.replicas) }}
{{- end }}
{{- end }}

{{/* The chart's own Valkey primary, replicas and sentinels (valkeyHA): the names of their
StatefulSets, which are also those of their headless Services. */}}
{{- define "kubus.valkeyHAName" -}}
{{- include "kubus.componentName" (list . "valkey") }}
{{- end }}

{{- define "kubus.sentinelName" -}}
{{- include "kubus.componentName" (list . "valkey-sentinel") }}
{{- end }}

{{/* The stable DNS names of the Valkey pods (pod 0 first) and of the sentinels, space-separated. */}}
{{- define "kubus.valkeyHosts" -}}
{{- $name := include "kubus.valkeyHAName" . }}
{{- include "kubus.podHosts" (list . $name $name (add1 (int .Values.valkeyHA.replicas))) }}
{{- end }}

{{- define "kubus.sentinelHosts" -}}
{{- $name := include "kubus.sentinelName" . }}
{{- include "kubus.podHosts" (list . $name $name .Values.valkeyHA.sentinel.replicas) }}
{{- end }}

{{/* KUBUS_REDIS_SENTINELS: host:port of every sentinel. */}}
{{- define "kubus.redisSentinels" -}}
{{- $addresses := list }}
{{- range splitList " " (include "kubus.sentinelHosts" .) }}
{{- $addresses = append $addresses (printf "%s:26379" .) }}
{{- end }}
{{- join "," $addresses }}
{{- end }}

{{- define "kubus.redisUrl" -}}
{{- if .Values.valkeyHA.enabled }}
{{- /* With sentinels only the database number counts; the host is the first primary, pod 0. */}}
{{- printf "redis://%s:6379/0" (first (splitList " " (include "kubus.valkeyHosts" .))) }}
{{- else if .Values.valkey.enabled }}
{{- printf "redis://%s:6379/0" (include "kubus.subchartFullname" (list . "valkey")) }}
{{- else }}
{{- .Values.externalRedis.url }}
{{- end }}
{{- end }}

{{/*
Mistakes that span several values, which values.schema.json cannot say in one clear line.
Included by the ConfigMap, so every render runs it once.
*/}}
{{- define "kubus.validate" -}}
{{- if and .Values.nats.enabled .Values.externalNats.url }}
{{- fail "externalNats.url is set but nats.enabled is true: set nats.enabled=false to use your own NATS" }}
{{- end }}
{{- if and (not .Values.nats.enabled) (not .Values.externalNats.url) }}
{{- fail "externalNats.url: required when nats.enabled is false (the NATS server kubus connects to)" }}
{{- end }}
{{- if and .Values.valkey.enabled .Values.externalRedis.url }}
{{- fail "externalRedis.url is set but valkey.enabled is true: set valkey.enabled=false to use your own Redis" }}
{{- end }}
{{- if and (not .Values.valkey.enabled) (not .Values.valkeyHA.enabled) (not .Values.externalRedis.url) }}
{{- fail "externalRedis.url: required when valkey.enabled is false (the Redis server kubus connects to)" }}
{{- end }}
{{- with .Values.valkeyHA }}
{{- if .enabled }}
{{- if $.Values.valkey.enabled }}
{{- fail "valkeyHA.enabled: set valkey.enabled=false too (valkeyHA's primary, replicas and sentinels replace the single bundled Valkey)" }}
{{- end }}
{{- if $.Values.externalRedis.url }}
{{- fail "valkeyHA.enabled: externalRedis.url is set too: use one or the other" }}
{{- end }}
{{- if gt (int .sentinel.quorum) (int .sentinel.replicas) }}
{{- fail (printf "valkeyHA.sentinel.quorum: %d is more than the %d sentinels: no failover could ever be agreed" (int .sentinel.quorum) (int .sentinel.replicas)) }}
{{- end }}
{{- if gt (int .waitReplicas) (int .replicas) }}
{{- fail (printf "valkeyHA.waitReplicas: %d is more than the %d replicas: every confirmed write would time out" (int .waitReplicas) (int .replicas)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (include "kubus.natsCluster" .) .Values.streamReplicas (gt (int .Values.streamReplicas) (int .Values.nats.config.cluster.replicas)) }}
{{- fail (printf "streamReplicas: %d copies need as many NATS servers; nats.config.cluster.replicas is %d" (int .Values.streamReplicas) (int .Values.nats.config.cluster.replicas)) }}
{{- end }}
{{- include "kubus.validateLease" (list "queue" .Values.queue) }}
{{- if and .Values.tls.redis.existingSecret (not (hasPrefix "rediss://" (include "kubus.redisUrl" .))) }}
{{- fail "tls.redis.existingSecret: Redis TLS needs a rediss:// URL in externalRedis.url" }}
{{- end }}
{{- range $server, $tls := .Values.tls }}
{{- if ne (empty $tls.certKey) (empty $tls.keyKey) }}
{{- fail (printf "tls.%s.certKey and tls.%s.keyKey: set both (mutual TLS) or neither" $server $server) }}
{{- end }}
{{- if and (not $tls.existingSecret) (or $tls.certKey $tls.keyKey) }}
{{- fail (printf "tls.%s.certKey: needs tls.%s.existingSecret, the Secret that holds it" $server $server) }}
{{- end }}
{{- end }}
{{- with .Values.access }}
{{- range $server := list "nats" "redis" }}
{{- if and $.Values.access.existingSecret (index $.Values.auth $server).existingSecret }}
{{- fail (printf "access.existingSecret and auth.%s.existingSecret: set one, not both (access gives every service its own login from its settings file, auth one shared login)" $server) }}
{{- end }}
{{- end }}
{{- if and .nodeAgentsSecret (not .existingSecret) }}
{{- fail "access.nodeAgentsSecret: needs access.existingSecret, the Secret of the other services' logins" }}
{{- end }}
{{- if and .existingSecret (not (include "kubus.clusterMode" $)) $.Values.gpuAgent.enabled (eq $.Values.gpuAgent.mode "node") (not .nodeAgentsSecret) }}
{{- fail "access.nodeAgentsSecret: required with access.existingSecret in gpuAgent.mode node: the Secret of the agent-<node>.yaml files (`kubus access init DIR --node <node> ...`), one login per node; the gpu-agent user may run only a simulation" }}
{{- end }}
{{- if and .existingSecret (not $.Values.podSecurityContext.fsGroup) }}
{{- fail "access.existingSecret: the settings files are mounted mode 0400, readable by the kubus user only through podSecurityContext.fsGroup: set it (the default is 10001)" }}
{{- end }}
{{- end }}
{{- range $server, $auth := .Values.auth }}
{{- range $key, $value := omit $auth "existingSecret" }}
{{- if and $value (not $auth.existingSecret) }}
{{- fail (printf "auth.%s.%s: needs auth.%s.existingSecret, the Secret that holds it" $server $key $server) }}
{{- end }}
{{- end }}
{{- end }}
{{- $profiles := list }}
{{- range .Values.schedulerConfig.profiles }}
{{- if has .schedulerName $profiles }}
{{- fail (printf "schedulerConfig.profiles: schedulerName %q appears twice" .schedulerName) }}
{{- end }}
{{- $profiles = append $profiles .schedulerName }}
{{- end }}
{{- range $name, $_ := .Values.cycle.overrides }}
{{- if not (has $name $profiles) }}
{{- fail (printf "cycle.overrides.%s: no profile of schedulerConfig.profiles has that schedulerName" $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/* A renewal must come within the ttl: (list "queue" .Values.queue). 0 stands for the services'
own defaults, 5 s and 1 s. */}}
{{- define "kubus.validateLease" -}}
{{- $where := index . 0 }}
{{- $lease := index . 1 }}
{{- $ttl := $lease.leaseTtl | default 5.0 | float64 }}
{{- $renew := $lease.renewInterval | default 1.0 | float64 }}
{{- if ge $renew $ttl }}
{{- fail (printf "%s.renewInterval: %v s must be below %s.leaseTtl (%v s; 0 means the service's default, 5 s and 1 s)" $where $renew $where $ttl) }}
{{- end }}
{{- end }}

{{/* Where kubus finds NATS and Redis: the KUBUS_* variables of kubus.settings. */}}
{{- define "kubus.env" -}}
- name: KUBUS_NATS_URL
  value: {{ include "kubus.natsUrl" . | quote }}
- name: KUBUS_REDIS_URL
  value: {{ include "kubus.redisUrl" . | quote }}
- name: KUBUS_CONNECT_TIMEOUT
  value: {{ .Values.connectTimeout | quote }}
{{- with include "kubus.streamReplicas" . }}
- name: KUBUS_STREAM_REPLICAS
  value: {{ . | quote }}
{{- end }}
{{- with .Values.valkeyHA }}
{{- if .enabled }}
- name: KUBUS_REDIS_SENTINELS
  value: {{ include "kubus.redisSentinels" $ | quote }}
- name: KUBUS_REDIS_MASTER
  value: {{ .sentinel.masterName | quote }}
- name: KUBUS_REDIS_WAIT_REPLICAS
  value: {{ .waitReplicas | quote }}
- name: KUBUS_REDIS_WAIT_TIMEOUT
  value: {{ .waitTimeout | quote }}
{{- end }}
{{- end }}
{{- with .Values.auth.nats }}
{{- range $var, $key := dict "KUBUS_NATS_USER" .userKey "KUBUS_NATS_PASSWORD" .passwordKey "KUBUS_NATS_TOKEN" .tokenKey }}
{{- if $key }}
- name: {{ $var }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.auth.nats.existingSecret }}
      key: {{ $key }}
{{- end }}
{{- end }}
{{- if .credsKey }}
- name: KUBUS_NATS_CREDS
  value: /etc/kubus/nats-creds/{{ .credsKey }}
{{- end }}
{{- end }}
{{- with .Values.auth.redis }}
{{- range $var, $key := dict "KUBUS_REDIS_USERNAME" .usernameKey "KUBUS_REDIS_PASSWORD" .passwordKey }}
{{- if $key }}
- name: {{ $var }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.auth.redis.existingSecret }}
      key: {{ $key }}
{{- end }}
{{- end }}
{{- end }}
{{- range $server, $tls := .Values.tls }}
{{- if $tls.existingSecret }}
{{- $prefix := printf "KUBUS_%s_TLS" (upper $server) }}
{{- range $suffix, $key := dict "CA" $tls.caKey "CERT" $tls.certKey "KEY" $tls.keyKey }}
{{- if $key }}
- name: {{ $prefix }}_{{ $suffix }}
  value: /etc/kubus/tls/{{ $server }}/{{ $key }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The Secrets behind the file settings (credentials file, TLS), and a writable /tmp; the access
Secret's volume is kubus.accessVolume, per role. */}}
{{- define "kubus.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if .Values.auth.nats.credsKey }}
- name: nats-creds
  secret:
    secretName: {{ .Values.auth.nats.existingSecret }}
    items:
      - key: {{ .Values.auth.nats.credsKey }}
        path: {{ .Values.auth.nats.credsKey }}
{{- end }}
{{- range $server, $tls := .Values.tls }}
{{- if $tls.existingSecret }}
- name: tls-{{ $server }}
  secret:
    secretName: {{ $tls.existingSecret }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kubus.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.auth.nats.credsKey }}
- name: nats-creds
  mountPath: /etc/kubus/nats-creds
  readOnly: true
{{- end }}
{{- range $server, $tls := .Values.tls }}
{{- if $tls.existingSecret }}
- name: tls-{{ $server }}
  mountPath: /etc/kubus/tls/{{ $server }}
  readOnly: true
{{- end }}
{{- end }}
{{- include "kubus.accessVolumeMount" . }}
{{- end }}

{{/*
A pod's own login with access.existingSecret: (list $ "queue") for the queue, cycle, binder,
watcher and gpu-agent roles, (list $ "node-agent") for the per-node agents of gpuAgent.mode node.
Every pod mounts one file of the Secret, its role's settings; the node agents mount access.nodeAgentsSecret
(agent-<node>.yaml files only: which node a DaemonSet pod lands on is not known to the chart) and
pick theirs by $(NODE_NAME), which the kubelet expands in args. Nothing without access.
*/}}
{{- define "kubus.accessSettings" -}}
{{- $ := index . 0 -}}
{{- $role := index . 1 -}}
{{- if $.Values.access.existingSecret -}}
/etc/kubus/access/{{ ternary "agent-$(NODE_NAME)" $role (eq $role "node-agent") }}.yaml
{{- end -}}
{{- end }}

{{- define "kubus.accessArgs" -}}
{{- with include "kubus.accessSettings" . }}
- --settings={{ . }}
{{- end }}
{{- end }}

{{- define "kubus.accessVolume" -}}
{{- $ := index . 0 -}}
{{- $role := index . 1 -}}
{{- with $.Values.access.existingSecret }}
- name: access
  secret:
    {{- if eq $role "node-agent" }}
    secretName: {{ $.Values.access.nodeAgentsSecret }}
    defaultMode: 0400
    {{- else }}
    secretName: {{ . }}
    defaultMode: 0400
    items:
      - key: {{ $role }}.yaml
        path: {{ $role }}.yaml
    {{- end }}
{{- end }}
{{- end }}

{{- define "kubus.accessVolumeMount" -}}
{{- if .Values.access.existingSecret }}
- name: access
  mountPath: /etc/kubus/access
  readOnly: true
{{- end }}
{{- end }}

{{/* The metrics port and the probes every kubus container answers (kubus.metrics.serve_metrics). */}}
{{- define "kubus.probes" -}}
ports:
  - name: metrics
    containerPort: {{ .Values.metrics.port }}
    protocol: TCP
# Alive: the process runs and no root task has died. Connecting may take connectTimeout.
startupProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 2
  failureThreshold: 30
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
# Ready: running, NATS connected, Redis answering PING within a second.
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 2
{{- end }}

{{/* What every kubus pod spec shares, (list $ "queue"): the account (its token only where the
Kubernetes API is called), the security context, no service links. */}}
{{- define "kubus.podSpec" -}}
{{- $ := index . 0 -}}
serviceAccountName: {{ include "kubus.serviceAccountName" $ }}
{{- if include "kubus.callsKubeApi" . }}
# The in-cluster config (kubus.kubeapi.load_config): this pod calls the API under the ClusterRole.
automountServiceAccountToken: true
{{- else }}
automountServiceAccountToken: false
{{- end }}
# Services named kubus-* would otherwise inject KUBUS_*_PORT variables next to kubus' own settings
# (the kubelet still sets KUBERNETES_SERVICE_HOST/PORT, which the in-cluster config reads).
enableServiceLinks: false
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
securityContext:
  {{- toYaml $.Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* The start of every kubus container: (list $ "queue"). It ends with env, so a template may
add variables; command and args follow. */}}
{{- define "kubus.container" -}}
{{- $ := index . 0 -}}
- name: {{ index . 1 }}
  image: {{ include "kubus.image" $ }}
  imagePullPolicy: {{ $.Values.image.pullPolicy }}
  securityContext:
    {{- toYaml $.Values.securityContext | nindent 4 }}
  {{- include "kubus.probes" $ | nindent 2 }}
  env:
    {{- include "kubus.env" $ | nindent 4 }}
{{- end }}

{{/* Pods restart when the scheduler configuration changes. */}}
{{- define "kubus.configChecksum" -}}
checksum/scheduler-config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end }}
