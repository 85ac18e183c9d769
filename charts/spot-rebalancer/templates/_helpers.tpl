{{/*
Names and labels shared by every component (agent, controller). Component templates
live in templates/<component>/ and call these with a dict: (dict "root" $ "component" "agent").
*/}}

{{/* Chart name, overridable. */}}
{{- define "spot-rebalancer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name prefix of every resource: fullnameOverride, else "<release>-<name>" (or the release
name alone when it already contains the chart name). Truncated to leave room for "-controller".
*/}}
{{- define "spot-rebalancer.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of one component's resources, e.g. "<fullname>-agent". */}}
{{- define "spot-rebalancer.componentName" -}}
{{- printf "%s-%s" (include "spot-rebalancer.fullname" .root) .component }}
{{- end }}

{{- define "spot-rebalancer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of one component: stable across upgrades (a selector is immutable). */}}
{{- define "spot-rebalancer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spot-rebalancer.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* All standard labels of one component's resources. */}}
{{- define "spot-rebalancer.labels" -}}
helm.sh/chart: {{ include "spot-rebalancer.chart" .root }}
{{ include "spot-rebalancer.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: spot-rebalancer
{{- include "spot-rebalancer.userLabels" .root }}
{{- end }}

{{/* Standard labels of resources that belong to no single component (PrometheusRule). */}}
{{- define "spot-rebalancer.commonLabels" -}}
helm.sh/chart: {{ include "spot-rebalancer.chart" . }}
app.kubernetes.io/name: {{ include "spot-rebalancer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: spot-rebalancer
{{- include "spot-rebalancer.userLabels" . }}
{{- end }}

{{/*
The user's `commonLabels`, on a new line each; never one of the chart's own (a duplicate key would
make the YAML invalid, and `app.kubernetes.io/*` says what the chart installed).
*/}}
{{- define "spot-rebalancer.userLabels" -}}
{{- $own := list "helm.sh/chart" "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "app.kubernetes.io/part-of" }}
{{- range $key, $value := .Values.commonLabels }}
{{- if not (has $key $own) }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The agent's tolerations: `agent.tolerations`, or the top-level `tolerations` of chart 0.2 when a
values file still sets it (NOTES warn; read for one release).
*/}}
{{- define "spot-rebalancer.agentTolerations" -}}
{{- if kindIs "slice" .Values.tolerations }}
{{- toYaml .Values.tolerations }}
{{- else if .Values.agent.tolerations }}
{{- toYaml .Values.agent.tolerations }}
{{- end }}
{{- end }}

{{/*
Labels a ServiceMonitor or PodMonitor carries for Prometheus to select it by: `labels`, and the
0.2 name `additionalLabels` (NOTES warn). A key `commonLabels` already sets is left to it.
Called with (dict "root" $ "monitor" .Values.serviceMonitor).
*/}}
{{- define "spot-rebalancer.monitorLabels" -}}
{{- $labels := merge (dict) (.monitor.labels | default dict) (.monitor.additionalLabels | default dict) }}
{{- $common := .root.Values.commonLabels | default dict }}
{{- range $key, $value := $labels }}
{{- if not (hasKey $common $key) }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The one image of both processes: repository:tag, or repository@digest. */}}
{{- define "spot-rebalancer.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "spot-rebalancer.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (include "spot-rebalancer.componentName" (dict "root" . "component" "agent")) .Values.agent.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "spot-rebalancer.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (include "spot-rebalancer.componentName" (dict "root" . "component" "controller")) .Values.controller.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
One agent or controller setting as an environment value the process's pydantic settings read back unchanged:
strings as they are; numbers, booleans and lists as JSON. Helm reads every YAML number as a
float64, and `toString` would print 1048576 as "1.048576e+06", which is no integer; JSON prints
"1048576".
*/}}
{{- define "spot-rebalancer.envValue" -}}
{{- if kindIs "string" . }}
{{- . }}
{{- else }}
{{- toJson . }}
{{- end }}
{{- end }}
