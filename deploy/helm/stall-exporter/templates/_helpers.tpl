{{/* The chart's name, as app.kubernetes.io/name. */}}
{{- define "stall-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release name, followed by the chart name unless the release name holds it. */}}
{{- define "stall-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "stall-exporter.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "stall-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/* Labels that select the pods: stable across upgrades (a DaemonSet's selector cannot change). */}}
{{- define "stall-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stall-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "stall-exporter.labels" -}}
{{ include "stall-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of a Prometheus Operator object: the common ones, `release` when set, then the object's own. */}}
{{- define "stall-exporter.operatorLabels" -}}
{{ include "stall-exporter.labels" .root }}
{{- with .root.Values.prometheus.release }}
release: {{ . | quote }}
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "stall-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "stall-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* registry/repository:tag[@digest]; the tag defaults to the chart's appVersion. */}}
{{- define "stall-exporter.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- $image := printf "%s/%s:%s" .Values.image.registry .Values.image.repository $tag }}
{{- with .Values.image.digest }}
{{- $image = printf "%s@%s" $image . }}
{{- end }}
{{- $image }}
{{- end }}

{{/* On the node's network: asked for, or needed by the dns collector's capture. */}}
{{- define "stall-exporter.hostNetwork" -}}
{{- if or .Values.hostNetwork .Values.dns.enabled }}true{{ else }}false{{ end }}
{{- end }}

{{/* The address Prometheus reaches /probe at: the headless Service. */}}
{{- define "stall-exporter.proberURL" -}}
{{- printf "%s.%s.svc:%v" (include "stall-exporter.fullname" .) (include "stall-exporter.namespace" .) .Values.service.port }}
{{- end }}

{{/* A monitor's relabelings (called with prometheus.podMonitor or prometheus.monitor): the job the
rules match, instance and node = the node name (a host keeps its series across pod restarts, as
deploy/prometheus/prometheus.yml's stall-kubernetes job does), then the user's. */}}
{{- define "stall-exporter.monitorRelabelings" -}}
- targetLabel: job
  replacement: {{ .jobName | quote }}
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: instance
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: node
{{- with .relabelings }}
{{ toYaml . }}
{{- end }}
{{- end }}
