{{/* Names and labels. */}}
{{- define "hookstamp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hookstamp.fullname" -}}
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

{{/*
hookstamp.suffixedName: "<fullname>-SUFFIX", the fullname cut short enough
for the whole to fit the 63 characters of a name (and of the label
Kubernetes copies some names into). Called with (list $ "SUFFIX").
*/}}
{{- define "hookstamp.suffixedName" -}}
{{- $suffix := index . 1 }}
{{- $base := include "hookstamp.fullname" (index . 0) | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" }}
{{- printf "%s-%s" $base $suffix }}
{{- end }}

{{- define "hookstamp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookstamp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hookstamp.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "hookstamp.selectorLabels" . }}
app.kubernetes.io/version: {{ include "hookstamp.versionLabel" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- /*
The migration Job's labels: the release's, under a name of their own, so
that no Service, PodDisruptionBudget or anti-affinity term of the replicas
selects its pods (a PodDisruptionBudget over a pod whose owner cannot
scale allows no disruption at all).
*/}}
{{- define "hookstamp.migrateLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ printf "%s-migrate" (include "hookstamp.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "hookstamp.versionLabel" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: migrate
{{- end }}

{{- define "hookstamp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hookstamp.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hookstamp.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "hookstamp.fullname" .) }}
{{- end }}

{{/*
The image: repository@digest when image.digest is set (the tag is then
only a label), else repository:tag.
*/}}
{{- define "hookstamp.image" -}}
{{- with .Values.image.digest }}
{{- $digest := toString . }}
{{- if not (regexMatch "^[a-z0-9]+([+._-][a-z0-9]+)*:[A-Za-z0-9=_-]{32,}$" $digest) }}
{{- fail (printf "image.digest: %q is not a digest (sha256:<64 hex digits>, without the \"@\")" $digest) }}
{{- end }}
{{- printf "%s@%s" $.Values.image.repository $digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "hookstamp.tag" .) }}
{{- end }}
{{- end }}

{{/*
hookstamp.tag: image.tag, or the chart's appVersion when it is empty. A
tag YAML read as a number (20240601, 1.10) is refused: the number cannot
be turned back into the tag (1.10 is 1.1 by then).
*/}}
{{- define "hookstamp.tag" -}}
{{- $tag := .Values.image.tag }}
{{- if not (or (kindIs "string" $tag) (kindIs "invalid" $tag)) }}
{{- fail (printf "image.tag must be a string; this one was read as a %s (%v): YAML reads an unquoted tag such as 20240601 or 1.10 as a number (1.10 becomes 1.1), which cannot be turned back into the tag. Quote it (tag: \"1.10\"), or pass it with --set-string image.tag=…" (kindOf $tag) $tag) }}
{{- end }}
{{- $tag | default .Chart.AppVersion }}
{{- end }}

{{/*
hookstamp.versionLabel: the tag (or appVersion) as a label value: a digest
written into the tag ("v0.1.0@sha256:…") left out, characters a label may
not hold replaced by "_", at most 63 characters, alphanumeric at both ends.
*/}}
{{- define "hookstamp.versionLabel" -}}
{{- $v := include "hookstamp.tag" . }}
{{- $v = regexReplaceAll "@.*$" $v "" }}
{{- $v = regexReplaceAll "[^A-Za-z0-9._-]" $v "_" | trunc 63 }}
{{- regexReplaceAll "^[^A-Za-z0-9]+|[^A-Za-z0-9]+$" $v "" }}
{{- end }}

{{/* The configuration file as mounted: config values, YAML. */}}
{{- define "hookstamp.configYAML" -}}
{{- toYaml .Values.config }}
{{- end }}

{{- define "hookstamp.configPath" -}}/etc/hookstamp/config.yaml{{- end }}

{{/*
hookstamp.port: the port of a listen address (":9090", "0.0.0.0:9090").
A loopback or empty address fails: the kubelet and the Service reach the pod's
own address. Called with (list "key.path" value).
*/}}
{{- define "hookstamp.port" -}}
{{- $key := index . 0 }}
{{- $addr := index . 1 | toString }}
{{- if not (regexMatch "^(|0\\.0\\.0\\.0|\\[::\\]):[0-9]{1,5}$" $addr) }}
{{- fail (printf "config.%s: %q must listen on every interface of the pod, as \":PORT\"" $key $addr) }}
{{- end }}
{{- regexFind "[0-9]+$" $addr }}
{{- end }}

{{- define "hookstamp.adminPort" -}}
{{- $admin := .Values.config.admin | default dict }}
{{- include "hookstamp.port" (list "admin.listen" ($admin.listen | default "")) }}
{{- end }}

{{- define "hookstamp.httpPort" -}}
{{- $server := .Values.config.server | default dict }}
{{- include "hookstamp.port" (list "server.listen" ($server.listen | default ":8080")) }}
{{- end }}

{{/* server.redirect_listen's port; "" when there is none. */}}
{{- define "hookstamp.redirectPort" -}}
{{- with dig "server" "redirect_listen" "" .Values.config }}
{{- include "hookstamp.port" (list "server.redirect_listen" .) }}
{{- end }}
{{- end }}

{{/*
The pod's security context: podSecurityContext, and, when a listener is on
a port below 1024 (":443", ":80" for the CA's challenges), the lowest of
them as net.ipv4.ip_unprivileged_port_start (a sysctl Kubernetes counts as
safe), since the gateway runs as a user without capabilities.
*/}}
{{- define "hookstamp.podSecurityContext" -}}
{{- $ctx := deepCopy (.Values.podSecurityContext | default dict) }}
{{- $low := 1024 }}
{{- range list (include "hookstamp.httpPort" .) (include "hookstamp.redirectPort" .) (include "hookstamp.adminPort" .) }}
{{- if and . (lt (int .) $low) }}{{ $low = int . }}{{ end }}
{{- end }}
{{- if lt $low 1024 }}
{{- $sysctls := list }}
{{- range ($ctx.sysctls | default list) }}
{{- if ne .name "net.ipv4.ip_unprivileged_port_start" }}{{ $sysctls = append $sysctls . }}{{ end }}
{{- end }}
{{- $_ := set $ctx "sysctls" (append $sysctls (dict "name" "net.ipv4.ip_unprivileged_port_start" "value" (toString $low))) }}
{{- end }}
{{- toYaml $ctx }}
{{- end }}

{{/*
hookstamp.milliseconds: a Go duration ("15s", "1m30s", "2500ms") in whole
milliseconds, rounded up. Called with (list "key.path" value).
*/}}
{{- define "hookstamp.milliseconds" -}}
{{- $key := index . 0 }}
{{- $d := index . 1 | toString }}
{{- if not (regexMatch "^([0-9]*\\.?[0-9]+(ns|us|µs|ms|s|m|h))+$" $d) }}
{{- fail (printf "config.%s: %q is not a Go duration (e.g. 15s, 1m30s)" $key $d) }}
{{- end }}
{{- $unit := dict "ns" 0.000001 "us" 0.001 "µs" 0.001 "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]*\\.?[0-9]+(ns|us|µs|ms|s|m|h)" $d -1 }}
{{- $n := regexFind "^[0-9]*\\.?[0-9]+" . }}
{{- $total = addf $total (mulf (float64 $n) (get $unit (trimPrefix $n .))) }}
{{- end }}
{{- ceil $total | int64 }}
{{- end }}

{{/* terminationGracePeriodSeconds: the pre-stop sleep, the drain, the release. */}}
{{- define "hookstamp.terminationGracePeriodSeconds" -}}
{{- $server := .Values.config.server | default dict }}
{{- $drainMs := include "hookstamp.milliseconds" (list "server.shutdown_timeout" ($server.shutdown_timeout | default "15s")) | int64 }}
{{- $drain := div (add $drainMs 999) 1000 }}
{{- add .Values.terminationGrace.preStopSleepSeconds $drain .Values.terminationGrace.releaseSeconds }}
{{- end }}

{{/*
hookstamp.isReference: true when v is empty or one "${NAME}" reference,
without a default or with an empty one ("${NAME:-}"): a value the ConfigMap
may hold. A default is written into the ConfigMap: "${ADMIN_TOKEN:-hunter2}"
is a literal secret.
*/}}
{{- define "hookstamp.isReference" -}}
{{- $v := toString . }}
{{- if or (eq $v "") (regexMatch "^\\$\\{[A-Za-z_][A-Za-z0-9_]*(:-)?\\}$" $v) }}true{{- end }}
{{- end }}

{{- define "hookstamp.checkSecretValues" -}}
{{- $c := .Values.config }}
{{- $checks := list }}
{{- with $c.admin }}{{ $checks = append $checks (list "admin.token" (.token | default "")) }}{{ end }}
{{- with $c.store }}{{ if eq (.driver | default "sqlite") "postgres" }}{{ $checks = append $checks (list "store.dsn" (.dsn | default "")) }}{{ end }}{{ end }}
{{- with $c.screen }}{{ with .redis }}{{ $checks = append $checks (list "screen.redis.password" (.password | default "")) }}{{ end }}{{ end }}
{{- range $i, $r := $c.routes }}
{{- with $r.verify }}
{{- range $j, $s := (.secrets | default list) }}
{{- $checks = append $checks (list (printf "routes[%d].verify.secrets[%d]" $i $j) $s) }}
{{- end }}
{{- with .challenge_token }}{{ $checks = append $checks (list (printf "routes[%d].verify.challenge_token" $i) .) }}{{ end }}
{{- end }}
{{- /*
What the gateway itself hides of an upstream URL (config.RedactURL): the
user information (the password of user:password; the whole of it without
one, often a token alone) and the values of query parameters named as
credentials are (api_key, token, sig, code: Azure Functions' key).
*/}}
{{- $url := toString (dig "upstream" "url" "" $r) }}
{{- /* Names of query parameters that carry credentials; a tenant or a flag may stay in the ConfigMap. */}}
{{- $credentialName := "(?i)(token|key|secret|pass|pwd|sig|auth|code|credential|session|sas)" }}
{{- $rest := regexReplaceAll "^[A-Za-z][A-Za-z0-9+.-]*://" $url "" }}
{{- $authority := regexFind "^[^/?#]*" $rest }}
{{- if contains "@" $authority }}
{{- $userinfo := regexReplaceAll "@[^@]*$" $authority "" }}
{{- if contains ":" $userinfo }}
{{- $checks = append $checks (list (printf "routes[%d].upstream.url's password" $i) (regexReplaceAll "^[^:]*:" $userinfo "")) }}
{{- else }}
{{- $checks = append $checks (list (printf "routes[%d].upstream.url's user information" $i) $userinfo) }}
{{- end }}
{{- end }}
{{- with regexFind "\\?[^#]*" (trimPrefix $authority $rest) }}
{{- range splitList "&" (trimPrefix "?" .) }}
{{- if and (contains "=" .) (regexMatch $credentialName (regexReplaceAll "=.*$" . "")) }}
{{- $checks = append $checks (list (printf "routes[%d].upstream.url's query parameter %s" $i (regexReplaceAll "=.*$" . "")) (regexReplaceAll "^[^=]*=" . "")) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- /* The gateway wants host:port there: user information is a Redis URL's password. */}}
{{- $addrs := dig "screen" "redis" "addrs" list $c }}
{{- range $i, $a := (kindIs "slice" $addrs | ternary $addrs (list $addrs)) }}
{{- if contains "@" (toString $a) }}
{{- fail (printf "config.screen.redis.addrs[%d] holds user information, a password in the ConfigMap, which is not secret. Write host:port there and screen.redis.password: \"${REDIS_PASSWORD}\", and put REDIS_PASSWORD in secrets.env (or in secrets.existingSecret)" $i) }}
{{- end }}
{{- end }}
{{- range $checks }}
{{- $v := index . 1 | toString }}
{{- if regexMatch "^\\$\\{[A-Za-z_][A-Za-z0-9_]*:-.+\\}$" $v }}
{{- $name := regexFind "^\\$\\{[A-Za-z_][A-Za-z0-9_]*" $v | trimPrefix "${" }}
{{- fail (printf "config.%s holds a literal value, the default of ${%s:-…}: the ConfigMap is not secret. Write \"${%s}\" (or \"${%s:-}\" for an empty default) and put %s in secrets.env (or in secrets.existingSecret)" (index . 0) $name $name $name $name) }}
{{- else if not (include "hookstamp.isReference" $v) }}
{{- fail (printf "config.%s holds a literal value: the ConfigMap is not secret. Write \"${NAME}\" and put NAME in secrets.env (or in secrets.existingSecret)" (index . 0)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Every "${NAME}" without a default must be in the chart's Secret, or be one of
extraEnv's variables (a secretKeyRef to a Secret of the operator's).
*/}}
{{- define "hookstamp.checkSecretNames" -}}
{{- if not .Values.secrets.existingSecret }}
{{- $have := append (keys (.Values.secrets.env | default dict)) "HOOKSTAMP_ADMIN_TOKEN" }}
{{- range (.Values.extraEnv | default list) }}
{{- $have = append $have (.name | default "") }}
{{- end }}
{{- range regexFindAll "\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}" (include "hookstamp.configYAML" .) -1 }}
{{- $name := trimSuffix "}" (trimPrefix "${" .) }}
{{- if not (has $name $have) }}
{{- fail (printf "config references ${%s}, which neither secrets.env nor extraEnv sets (the gateway would not start)" $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Choices docs/production.md asks for, refused here rather than in production. */}}
{{- define "hookstamp.checkTopology" -}}
{{- $c := .Values.config }}
{{- $store := $c.store | default dict }}
{{- $screen := $c.screen | default dict }}
{{- $replicas := int .Values.replicaCount }}
{{- $what := "replicaCount > 1" }}
{{- if .Values.autoscaling.enabled }}
{{- include "hookstamp.checkAutoscaling" . }}
{{- $replicas = int .Values.autoscaling.maxReplicas }}
{{- $what = "autoscaling.maxReplicas > 1" }}
{{- end }}
{{- if gt $replicas 1 }}
{{- if ne ($store.driver | default "sqlite") "postgres" }}
{{- fail (printf "%s needs config.store.driver: postgres (a SQLite file is one replica's)" $what) }}
{{- end }}
{{- if eq ($screen.driver | default "memory") "memory" }}
{{- fail (printf "%s needs config.screen.driver: redis (or none): a memory screen is one process's" $what) }}
{{- end }}
{{- end }}
{{- if eq ($store.driver | default "sqlite") "sqlite" }}
{{- include "hookstamp.checkSQLite" . }}
{{- end }}
{{- $lease := include "hookstamp.milliseconds" (list "screen.lease" ($screen.lease | default "30s")) | int64 }}
{{- range $i, $r := $c.routes }}
{{- $up := $r.upstream | default dict }}
{{- $t := include "hookstamp.milliseconds" (list (printf "routes[%d].upstream.timeout" $i) ($up.timeout | default "10s")) | int64 }}
{{- if lt $lease (add $t 10000) }}
{{- fail (printf "config.screen.lease (%s) must be at least routes[%d].upstream.timeout (%s) + 10s: a forward still running when the lease ends is cut short and its retry forwarded again (docs/production.md \"Lease\")" ($screen.lease | default "30s") $i ($up.timeout | default "10s")) }}
{{- end }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not (dig "telemetry" "metrics" "prometheus" true $c)) }}
{{- fail "serviceMonitor.enabled needs config.telemetry.metrics.prometheus: true" }}
{{- end }}
{{- end }}

{{- define "hookstamp.checkAutoscaling" -}}
{{- $a := .Values.autoscaling }}
{{- if or (lt (int $a.minReplicas) 1) (lt (int $a.maxReplicas) (int $a.minReplicas)) }}
{{- fail (printf "autoscaling: minReplicas (%v) must be at least 1 and maxReplicas (%v) at least minReplicas" $a.minReplicas $a.maxReplicas) }}
{{- end }}
{{- if not (dig "requests" "cpu" "" (.Values.resources | default dict)) }}
{{- fail "autoscaling.targetCPUUtilizationPercentage is a share of resources.requests.cpu, which is not set" }}
{{- end }}
{{- end }}

{{/*
hookstamp.checkSQLite: the SQLite ledger is a file in /app/data. In an
emptyDir every new pod (a rollout, an eviction, a node lost) starts with an
empty ledger: the providers' retries of events already answered are
forwarded again, and deliveries acknowledged on an async route but not yet
delivered are lost with the old pod. So /app/data needs a volume that
outlives the pod (persistence.enabled), unless persistence.ephemeral says
the loss is accepted (a demo); async routes are refused on an ephemeral
ledger even then: the provider was told the delivery was taken.
*/}}
{{- define "hookstamp.checkSQLite" -}}
{{- $p := .Values.persistence | default dict }}
{{- $dsn := dig "store" "dsn" "data/hookstamp.db" .Values.config | toString }}
{{- if $p.enabled }}
{{- $path := regexReplaceAll "\\?.*$" (trimPrefix "file:" $dsn) "" }}
{{- if or (not (regexMatch "^(\\./|/app/)?data/[^/]" $path)) (contains "mode=memory" $dsn) }}
{{- fail (printf "config.store.dsn: %q is not a file in /app/data, the volume persistence mounts (write data/hookstamp.db)" $dsn) }}
{{- end }}
{{- else if not $p.ephemeral }}
{{- fail "config.store.driver sqlite keeps the ledger in /app/data: set persistence.enabled (a PersistentVolumeClaim). In an emptyDir every new pod starts with an empty ledger, and forwards again the provider retries of events already answered. For a demo, persistence.ephemeral: true accepts that" }}
{{- else }}
{{- if eq (dig "screen" "driver" "memory" .Values.config) "redis" }}
{{- fail "persistence.ephemeral with config.screen.driver redis: every new pod's empty ledger is a new deployment to Redis, which refuses it the prefix the last pod claimed (SPEC §5), so the pod would not start. Use the memory screen with an ephemeral ledger, or persistence.enabled" }}
{{- end }}
{{- range $i, $r := .Values.config.routes }}
{{- if eq ($r.delivery | default "sync") "async" }}
{{- fail (printf "config.routes[%d] (%s) is delivery: async on a SQLite ledger without persistence: deliveries acknowledged to the provider and not yet delivered would be lost with the pod. Set persistence.enabled" $i ($r.name | default "")) }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.migration.enabled }}
{{- fail "migration.enabled with config.store.driver sqlite: the Job would migrate a file of its own, not the pod's; leave config.store.auto_migrate on" }}
{{- end }}
{{- end }}

{{/*
hookstamp.singleProcess: true when two pods of the release must never run
together: a SQLite ledger (one file, one volume) or a memory screen (each
process's claims in its own memory).
*/}}
{{- define "hookstamp.singleProcess" -}}
{{- if or (eq (dig "store" "driver" "sqlite" .Values.config) "sqlite") (eq (dig "screen" "driver" "memory" .Values.config) "memory") }}true{{- end }}
{{- end }}

{{/*
hookstamp.checkTLS: the certificate files are on a volume the pod mounts
(the root filesystem has none; /etc/hookstamp is the ConfigMap's), and the
Service's two ports differ.
*/}}
{{- define "hookstamp.checkTLS" -}}
{{- $dirs := list }}
{{- if .Values.tls.secretName }}{{ $dirs = append $dirs (include "hookstamp.tlsDir" .) }}{{ end }}
{{- range (.Values.extraVolumeMounts | default list) }}{{ $dirs = append $dirs (.mountPath | default "" | trimSuffix "/") }}{{ end }}
{{- range $key := list "cert_file" "key_file" }}
{{- with dig "server" "tls" $key "" $.Values.config }}
{{- $file := . }}
{{- $mounted := false }}
{{- range $dirs }}{{ if and . (hasPrefix (printf "%s/" .) $file) }}{{ $mounted = true }}{{ end }}{{ end }}
{{- if not $mounted }}
{{- fail (printf "config.server.tls.%s: %q is on no volume the pod mounts: set tls.secretName (a kubernetes.io/tls Secret, mounted at %s: write %s/tls.crt and %s/tls.key) or extraVolumes and extraVolumeMounts" $key $file (include "hookstamp.tlsDir" $) (include "hookstamp.tlsDir" $) (include "hookstamp.tlsDir" $)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (include "hookstamp.redirectPort" .) (eq (int .Values.service.port) (int .Values.service.redirectPort)) }}
{{- fail (printf "service.port and service.redirectPort are both %d: with config.server.redirect_listen set, the Service's HTTPS port is service.port (443)" (int .Values.service.port)) }}
{{- end }}
{{- end }}

{{- define "hookstamp.checks" -}}
{{- include "hookstamp.checkSecretValues" . }}
{{- include "hookstamp.checkSecretNames" . }}
{{- include "hookstamp.checkTopology" . }}
{{- include "hookstamp.checkTLS" . }}
{{- end }}

{{/*
hookstamp.secretData: the chart's Secret, computed once per render (the hook
copy of the migration Job must hold the same generated token). The token is
read back from the cluster on upgrade, so it does not change.
*/}}
{{- define "hookstamp.secretData" -}}
{{- if not (hasKey .Values.secrets "_data") }}
{{- $data := dict }}
{{- range $k, $v := (.Values.secrets.env | default dict) }}
{{- $_ := set $data $k (toString $v) }}
{{- end }}
{{- $token := .Values.secrets.adminToken }}
{{- if not $token }}
{{- $old := lookup "v1" "Secret" .Release.Namespace (include "hookstamp.fullname" .) }}
{{- $token = dig "data" "HOOKSTAMP_ADMIN_TOKEN" "" ($old | default dict) | b64dec }}
{{- end }}
{{- $_ := set $data "HOOKSTAMP_ADMIN_TOKEN" ($token | default (randAlphaNum 32)) }}
{{- $_ := set .Values.secrets "_data" $data }}
{{- end }}
{{- range $k, $v := .Values.secrets._data }}
{{ $k }}: {{ $v | b64enc | quote }}
{{- end }}
{{- end }}

{{/* The pod's volumes and the container's environment, shared with the migration Job. */}}
{{- define "hookstamp.env" -}}
- name: HOOKSTAMP_CONFIG
  value: {{ include "hookstamp.configPath" . }}
{{- /* The image sets HOOKSTAMP_ADMIN__LISTEN=:9090, which would win over the file. */}}
- name: HOOKSTAMP_ADMIN__LISTEN
  value: {{ dig "admin" "listen" "" .Values.config | quote }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
GOMEMLIMIT from the container's memory limit, in bytes, unless extraEnv
sets it: without it the GC lets the heap grow to twice what is live
(GOGC), past the limit, before collecting.
*/}}
{{- define "hookstamp.goMemLimit" -}}
{{- $set := false }}
{{- range (.Values.extraEnv | default list) }}{{ if eq (.name | default "") "GOMEMLIMIT" }}{{ $set = true }}{{ end }}{{ end }}
{{- if and (dig "limits" "memory" "" (.Values.resources | default dict)) (not $set) }}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      containerName: gateway
      resource: limits.memory
{{- end }}
{{- end }}

{{- define "hookstamp.affinity" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "hookstamp.selectorLabels" . | fromYaml)) }}
{{- $anti := dict }}
{{- if eq .Values.podAntiAffinity "hard" }}
{{- $_ := set $anti "requiredDuringSchedulingIgnoredDuringExecution" (list $term) }}
{{- else if eq .Values.podAntiAffinity "soft" }}
{{- $_ := set $anti "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term)) }}
{{- else }}
{{- fail (printf "podAntiAffinity: %q is neither soft nor hard" .Values.podAntiAffinity) }}
{{- end }}
{{- toYaml (merge (dict "podAntiAffinity" $anti) (.Values.affinity | default dict)) }}
{{- end }}

{{- define "hookstamp.volumeMounts" -}}
- name: config
  mountPath: /etc/hookstamp
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.tls.secretName }}
{{- /* Not under /etc/hookstamp: a ConfigMap's volume takes no mount inside it. */}}
- name: tls
  mountPath: {{ include "hookstamp.tlsDir" . }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- if eq (dig "store" "driver" "sqlite" .Values.config) "sqlite" }}
{{- /* The embedded ledger's file (and ACME's directory beside it). */}}
- name: data
  mountPath: /app/data
{{- end }}
{{- end }}

{{/* Where tls.secretName is mounted: tls.crt and tls.key in it. */}}
{{- define "hookstamp.tlsDir" -}}/etc/hookstamp-tls{{- end }}

{{- define "hookstamp.dataClaim" -}}
{{- .Values.persistence.existingClaim | default (include "hookstamp.suffixedName" (list . "data")) }}
{{- end }}

{{/* Called with (dict "ctx" $ "configMap" NAME). */}}
{{- define "hookstamp.volumes" -}}
- name: config
  configMap:
    name: {{ .configMap }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- with .ctx.Values.tls.secretName }}
- name: tls
  secret:
    secretName: {{ . }}
{{- end }}
{{- with .ctx.Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- if eq (dig "store" "driver" "sqlite" .ctx.Values.config) "sqlite" }}
- name: data
  {{- if .ctx.Values.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "hookstamp.dataClaim" .ctx }}
  {{- else }}
  {{- /* persistence.ephemeral: the ledger lives as long as the pod. */}}
  emptyDir: {}
  {{- end }}
{{- end }}
{{- end }}

{{/*
The readiness probe's path: /readyz, with ?optional= naming each member
(SPEC §8) whose failure the replica serves through, as its configuration
chose. Taking a replica that still serves out of the Service would turn an
outage the operator chose to ride out into a full one:
- the screen, when Redis with on_unavailable store (claims go to the
  ledger) or pass (forwarded without deduplication);
- the ledger, when store.on_unavailable is pass (forwarded, not recorded);
- tls, with ACME: the CA reaches a replica's challenge only through the
  Service, which sends nothing to a replica not ready, so a replica waiting
  for its first certificate would never get it (the expiry metric and the
  chart's alert watch certificates instead).
A replica shutting down is never optional.
*/}}
{{- define "hookstamp.readyzOptional" -}}
{{- $c := .Values.config }}
{{- $optional := list }}
{{- if eq (dig "store" "on_unavailable" "reject" $c) "pass" }}
{{- $optional = append $optional "ledger" }}
{{- end }}
{{- if and (eq (dig "screen" "driver" "memory" $c) "redis") (has (dig "screen" "on_unavailable" "store" $c) (list "store" "pass")) }}
{{- $optional = append $optional "screen" }}
{{- end }}
{{- if dig "server" "tls" "acme" "domains" list $c }}
{{- $optional = append $optional "tls" }}
{{- end }}
{{- join "," $optional }}
{{- end }}

{{- define "hookstamp.readyzPath" -}}
/readyz{{ with include "hookstamp.readyzOptional" . }}?optional={{ . }}{{ end }}
{{- end }}
