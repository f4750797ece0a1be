{{- define "accord-agent.namespace" -}}
{{- default .Release.Namespace .Values.namespace -}}
{{- end -}}

{{- define "accord-agent.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "accord-agent.selector" -}}
app.kubernetes.io/component: agent
app.kubernetes.io/name: accord-agent
{{- end -}}

{{- define "accord-agent.podLabels" -}}
{{ include "accord-agent.selector" . }}
app.kubernetes.io/part-of: accord
{{- end -}}

{{- define "accord-agent.labels" -}}
{{ include "accord-agent.podLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
