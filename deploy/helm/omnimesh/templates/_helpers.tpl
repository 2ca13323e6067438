{{/* Names, labels and small lookups shared by every template of the chart. */}}

{{- define "omnimesh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped base name; stage objects append "-<stage>", so it stays well under the 63-char limit. */}}
{{- define "omnimesh.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else if contains (include "omnimesh.name" .) .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "omnimesh.name" .) | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "omnimesh.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "omnimesh.labels" -}}
helm.sh/chart: {{ include "omnimesh.chart" . }}
app.kubernetes.io/name: {{ include "omnimesh.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: omnimesh
{{- end }}

{{/* Selector labels of one stage; call with (dict "root" $ "stage" "thinker"). */}}
{{- define "omnimesh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "omnimesh.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .stage }}
{{- end }}

{{- define "omnimesh.stageLabels" -}}
{{ include "omnimesh.labels" .root }}
app.kubernetes.io/component: {{ .stage }}
{{- end }}

{{/* Object name of one stage: its Deployment, headless Service, PDB and autoscaler. */}}
{{- define "omnimesh.stageName" -}}
{{- printf "%s-%s" (include "omnimesh.fullname" .root) .stage }}
{{- end }}

{{/* The Python module a stage runs (`python -m <module>`). */}}
{{- define "omnimesh.module" -}}
{{- if eq . "gateway" }}gateway{{ else }}services.{{ . }}{{ end }}
{{- end }}

{{/* The dns:/// target other processes dial to reach a stage: its headless Service, balanced round_robin. */}}
{{- define "omnimesh.stageTarget" -}}
{{- printf "dns:///%s.%s.svc.%s:%d" (include "omnimesh.stageName" .) .root.Release.Namespace .root.Values.clusterDomain (int .root.Values.ports.grpc) }}
{{- end }}

{{- define "omnimesh.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "omnimesh.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "omnimesh.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "omnimesh.apiKeysSecret" -}}
{{- default (printf "%s-api-keys" (include "omnimesh.fullname" .)) .Values.gateway.apiKeys.existingSecret }}
{{- end }}

{{- define "omnimesh.stageTokenSecret" -}}
{{- default (printf "%s-stage-token" (include "omnimesh.fullname" .)) .Values.stageToken.existingSecret }}
{{- end }}

{{/* True ("true") when the Prometheus operator's CRDs are served, or assumed to be. */}}
{{- define "omnimesh.hasMonitoringAPI" -}}
{{- if or .Values.monitoring.assumeCRDs (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") }}true{{ end }}
{{- end }}

{{/* The per-pod autoscaling signal of a stage as a PromQL query over its pods (KEDA sums, then divides by the target). */}}
{{- define "omnimesh.autoscalingQuery" -}}
{{- printf "sum(%s{namespace=%q,stage=%q})" .cfg.autoscaling.metric .root.Release.Namespace .stage }}
{{- end }}
