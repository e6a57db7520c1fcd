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
{{- $files = append $files (dict "secret" .password_secret.name "key" (.password_secret.key | default "password") "path" "sasl-password") }}
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
{{- $_ := set $out "sasl" (dict "mechanism" .mechanism "username" .username "password_file" (printf "%s/sasl-password" $dir)) }}
{{- end }}
{{- $clusters = append $clusters $out }}
{{- end }}
{{- $web := dict "listen_address" .Values.config.web.listen_address "port" (int .Values.config.web.port) }}
{{- $log := dict "format" .Values.config.log.format "level" .Values.config.log.level }}
{{- toYaml (dict "clusters" $clusters "web" $web "log" $log) }}
{{- end }}
