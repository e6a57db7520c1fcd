{{/*
Names, labels and the exporter configuration shared by the templates.
*/}}

{{- define "kte.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kte.fullname" -}}
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

{{- define "kte.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kte.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kte.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kte.labels" -}}
helm.sh/chart: {{ include "kte.chart" . }}
{{ include "kte.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: exporter
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "kte.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kte.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kte.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* Where the config file and the per-cluster credential files live in the container. */}}
{{- define "kte.configDir" -}}/etc/kafka-txn-exporter{{- end }}
{{- define "kte.credentialsDir" -}}/var/run/secrets/kafka-txn-exporter{{- end }}
{{- define "kte.webDir" -}}{{ include "kte.credentialsDir" . }}/web{{- end }}

{{/*
Files of the web config volume (TLS and basic auth of /metrics), as a list of
{secret, key, path}; empty when no web config comes from a Secret.
*/}}
{{- define "kte.webFiles" -}}
{{- $web := .Values.config.web }}
{{- $files := list }}
{{- with $web.web_config_secret }}{{- if .name }}
{{- $files = append $files (dict "secret" .name "key" (.key | default "web-config.yml") "path" "web-config.yml") }}
{{- end }}{{- end }}
{{- with $web.tls_secret }}{{- if .name }}
{{- $files = append $files (dict "secret" .name "key" (.cert_key | default "tls.crt") "path" "tls.crt") }}
{{- $files = append $files (dict "secret" .name "key" (.key_key | default "tls.key") "path" "tls.key") }}
{{- end }}{{- end }}
{{- with $web.client_ca_secret }}{{- if .name }}
{{- $files = append $files (dict "secret" .name "key" (.key | default "ca.crt") "path" "client-ca.crt") }}
{{- end }}{{- end }}
{{- with $web.probe_client_cert_secret }}{{- if .name }}
{{- $files = append $files (dict "secret" .name "key" (.cert_key | default "tls.crt") "path" "probe-client.crt") }}
{{- $files = append $files (dict "secret" .name "key" (.key_key | default "tls.key") "path" "probe-client.key") }}
{{- end }}{{- end }}
{{- toJson $files }}
{{- end }}

{{/* "true" when /metrics is served over TLS (config.web.tls_secret is set). */}}
{{- define "kte.webTls" -}}
{{- if (.Values.config.web.tls_secret | default dict).name }}true{{ end }}
{{- end }}

{{/* "true" when the web port requires client certificates (config.web.client_ca_secret). */}}
{{- define "kte.webMutualTls" -}}
{{- if (.Values.config.web.client_ca_secret | default dict).name }}true{{ end }}
{{- end }}

{{/*
One probe of the exporter container, for .path (/healthz or /readyz) with .settings (the
livenessProbe or readinessProbe values). An httpGet probe, except with mutual TLS on the web
port: the kubelet's HTTP probes send no client certificate and would be refused, so an exec
probe runs `kafka-txn-exporter probe` in the container with config.web.probe_client_cert_secret.
*/}}
{{- define "kte.probe" -}}
{{- $root := .root }}
{{- $web := $root.Values.config.web }}
{{- if include "kte.webMutualTls" $root }}
{{- if not (($web.probe_client_cert_secret | default dict).name) }}
{{- fail "config.web.client_ca_secret: the kubelet's HTTP probes send no client certificate, so with mutual TLS the probes are exec probes that need one: set config.web.probe_client_cert_secret.name (a Secret with a client certificate the client CA signed)" }}
{{- end }}
{{- $host := $web.listen_address | default "0.0.0.0" }}
{{- if eq $host "0.0.0.0" }}{{ $host = "127.0.0.1" }}{{ else if eq $host "::" }}{{ $host = "[::1]" }}{{ else if contains ":" $host }}{{ $host = printf "[%s]" $host }}{{- end }}
{{- $scheme := "http" }}
{{- if include "kte.webTls" $root }}{{ $scheme = "https" }}{{- end -}}
exec:
  command:
    - kafka-txn-exporter
    - probe
    - {{ printf "%s://%s:%d%s" $scheme $host (int $web.port) .path | quote }}
    - --cert
    - {{ include "kte.webDir" $root }}/probe-client.crt
    - --key
    - {{ include "kte.webDir" $root }}/probe-client.key
    - --timeout
    - {{ .settings.timeoutSeconds | default 5 | quote }}
{{- else -}}
httpGet:
  path: {{ .path }}
  port: http
  scheme: {{ if include "kte.webTls" $root }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}
{{ toYaml .settings }}
{{- end }}

{{/* The directory the history is written to, on the history volume. */}}
{{- define "kte.historyDir" -}}/var/lib/kafka-txn-exporter/history{{- end }}

{{/* The name of the history PersistentVolumeClaim (an existing one, or the chart's). */}}
{{- define "kte.historyClaim" -}}
{{- .Values.config.history.storage.existingClaim | default (printf "%s-history" (include "kte.fullname" .)) }}
{{- end }}

{{/* The web_config_file the exporter is given, or "" for plain HTTP without auth. */}}
{{- define "kte.webConfigFile" -}}
{{- $web := .Values.config.web }}
{{- $fromSecret := (($web.web_config_secret | default dict).name) }}
{{- if and $fromSecret $web.web_config_file }}
{{- fail "config.web: set web_config_secret.name or web_config_file, not both" }}
{{- end }}
{{- if and (or (include "kte.webTls" .) ($web.client_ca_secret | default dict).name) (not (or $fromSecret $web.web_config_file)) }}
{{- fail "config.web.tls_secret/client_ca_secret: they are used by a web config; set config.web.web_config_secret (or web_config_file) too" }}
{{- end }}
{{- if $fromSecret }}{{ include "kte.webDir" . }}/web-config.yml{{ else }}{{ $web.web_config_file }}{{ end }}
{{- end }}

{{/*
Credential files of cluster number .index, as a list of
{secret, key, path} where path is relative to the cluster's credentials directory.
Clusters are numbered by their position in config.clusters (their names may hold characters
that are not valid in volume names).
*/}}
{{- define "kte.clusterCredentialFiles" -}}
{{- $c := .cluster }}
{{- $files := list }}
{{- $tls := $c.tls | default dict }}
{{- if $tls.enabled }}
{{- with $tls.ca_secret }}
{{- $files = append $files (dict "secret" .name "key" (.key | default "ca.crt") "path" "ca.crt") }}
{{- end }}
{{- with $tls.client_cert_secret }}
{{- $files = append $files (dict "secret" .name "key" (.cert_key | default "tls.crt") "path" "tls.crt") }}
{{- $files = append $files (dict "secret" .name "key" (.key_key | default "tls.key") "path" "tls.key") }}
{{- end }}
{{- end }}
{{- with $c.sasl }}
{{- with .password_secret }}
{{- $files = append $files (dict "secret" .name "key" (.key | default "password") "path" "sasl-password") }}
{{- end }}
{{- with .oauthbearer }}
{{- with .client_secret_secret }}
{{- $files = append $files (dict "secret" .name "key" (.key | default "client-secret") "path" "oauth-client-secret") }}
{{- end }}
{{- with .token_secret }}
{{- $files = append $files (dict "secret" .name "key" (.key | default "token") "path" "oauth-token") }}
{{- end }}
{{- with .ca_secret }}
{{- $files = append $files (dict "secret" .name "key" (.key | default "ca.crt") "path" "oauth-ca.crt") }}
{{- end }}
{{- end }}
{{- with .gssapi }}
{{- with .keytab_secret }}
{{- $files = append $files (dict "secret" .name "key" (.key | default "krb5.keytab") "path" "krb5.keytab") }}
{{- end }}
{{- with .krb5_conf_configmap }}
{{- $files = append $files (dict "configMap" .name "key" (.key | default "krb5.conf") "path" "krb5.conf") }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $files }}
{{- end }}

{{/*
The exporter's YAML configuration (schema: exporter/config.py). Credential references become
file paths under kte.credentialsDir/<index>/; nothing secret is rendered.
*/}}
{{- define "kte.exporterConfig" -}}
{{- $root := . }}
{{- $clusters := list }}
{{- $names := dict }}
{{- range $index, $c := .Values.config.clusters }}
{{- if hasKey $names $c.name }}
{{- fail (printf "config.clusters[%d].name: duplicate cluster name %q" $index $c.name) }}
{{- end }}
{{- $_ := set $names $c.name true }}
{{- $dir := printf "%s/%d" (include "kte.credentialsDir" $root) $index }}
{{- $out := omit $c "tls" "sasl" }}
{{- $tls := $c.tls | default dict }}
{{- if $tls.enabled }}
{{- $outTls := dict }}
{{- if hasKey $tls "check_hostname" }}
{{- $_ := set $outTls "check_hostname" $tls.check_hostname }}
{{- end }}
{{- if $tls.ca_secret }}
{{- $_ := set $outTls "ca_file" (printf "%s/ca.crt" $dir) }}
{{- end }}
{{- if $tls.client_cert_secret }}
{{- $_ := set $outTls "cert_file" (printf "%s/tls.crt" $dir) }}
{{- $_ := set $outTls "key_file" (printf "%s/tls.key" $dir) }}
{{- end }}
{{- $_ := set $out "tls" $outTls }}
{{- end }}
{{- with $c.sasl }}
{{- if has .mechanism (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512") }}
{{- $_ := set $out "sasl" (dict "mechanism" .mechanism "username" .username "password_file" (printf "%s/sasl-password" $dir)) }}
{{- else if eq .mechanism "OAUTHBEARER" }}
{{- $o := .oauthbearer | default dict }}
{{- $oauth := omit $o "client_secret_secret" "token_secret" "ca_secret" }}
{{- if $o.client_secret_secret }}
{{- $_ := set $oauth "client_secret_file" (printf "%s/oauth-client-secret" $dir) }}
{{- end }}
{{- if $o.token_secret }}
{{- $_ := set $oauth "token_file" (printf "%s/oauth-token" $dir) }}
{{- end }}
{{- if $o.ca_secret }}
{{- $_ := set $oauth "ca_file" (printf "%s/oauth-ca.crt" $dir) }}
{{- end }}
{{- $_ := set $out "sasl" (dict "mechanism" .mechanism "oauthbearer" $oauth) }}
{{- else if eq .mechanism "GSSAPI" }}
{{- $g := .gssapi | default dict }}
{{- $krb := omit $g "keytab_secret" "krb5_conf_configmap" }}
{{- if $g.keytab_secret }}
{{- $_ := set $krb "keytab_file" (printf "%s/krb5.keytab" $dir) }}
{{- end }}
{{- if $g.krb5_conf_configmap }}
{{- $_ := set $krb "krb5_conf_file" (printf "%s/krb5.conf" $dir) }}
{{- end }}
{{- $_ := set $out "sasl" (dict "mechanism" .mechanism "gssapi" $krb) }}
{{- else if eq .mechanism "AWS_MSK_IAM" }}
{{- if not $tls.enabled }}
{{- fail (printf "config.clusters[%d].tls.enabled: required with sasl.mechanism AWS_MSK_IAM (MSK's IAM listeners are TLS only)" $index) }}
{{- end }}
{{- $_ := set $out "sasl" (dict "mechanism" .mechanism "aws_msk_iam" (.aws_msk_iam | default dict)) }}
{{- end }}
{{- end }}
{{- $clusters = append $clusters $out }}
{{- end }}
{{- $web := dict "listen_address" .Values.config.web.listen_address "port" (int .Values.config.web.port) "telemetry_path" (.Values.config.web.telemetry_path | default "/metrics") }}
{{- with include "kte.webConfigFile" . }}
{{- $_ := set $web "web_config_file" . }}
{{- end }}
{{- $log := dict "format" .Values.config.log.format "level" .Values.config.log.level }}
{{- $out := dict "clusters" $clusters "web" $web "log" $log }}
{{- with .Values.config.history }}{{- if .enabled }}
{{- $_ := set $out "history" (dict "directory" (include "kte.historyDir" $root) "retention_days" (int (.retention_days | default 30))) }}
{{- end }}{{- end }}
{{- toYaml $out }}
{{- end }}
