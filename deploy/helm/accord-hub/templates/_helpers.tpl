{{/* Namespace of the hub: .Values.namespace, else the release namespace. */}}
{{- define "accord-hub.namespace" -}}
{{- default .Release.Namespace .Values.namespace -}}
{{- end -}}

{{/* The hub CA as caBundle of the admission and conversion webhooks, base64-encoded PEM:
   .Values.webhook.caBundle, else the CA Secret's certificate if it exists already (lookup
   sees nothing under `helm template`), else empty and the hub sets it on start. */}}
{{- define "accord-hub.caBundle" -}}
{{- $secret := lookup "v1" "Secret" (include "accord-hub.namespace" .) "accord-hub-ca" | default dict -}}
{{- .Values.webhook.caBundle | default (dig "data" "tls.crt" "" $secret) -}}
{{- end -}}

{{/* The hub image: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "accord-hub.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Labels Helm adds on top of those `accord-hub install` sets. */}}
{{- define "accord-hub.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "accord-hub.selector" -}}
app.kubernetes.io/component: hub
app.kubernetes.io/name: accord-hub
{{- end -}}

{{- define "accord-hub.podLabels" -}}
{{ include "accord-hub.selector" . }}
app.kubernetes.io/part-of: accord
{{- end -}}

{{- define "accord-hub.labels" -}}
{{ include "accord-hub.podLabels" . }}
{{ include "accord-hub.helmLabels" . }}
{{- end -}}

{{- define "accord-etcd.selector" -}}
app.kubernetes.io/component: etcd
app.kubernetes.io/name: accord-etcd
{{- end -}}

{{- define "accord-etcd.podLabels" -}}
{{ include "accord-etcd.selector" . }}
app.kubernetes.io/part-of: accord
{{- end -}}

{{- define "accord-etcd.labels" -}}
{{ include "accord-etcd.podLabels" . }}
{{ include "accord-hub.helmLabels" . }}
{{- end -}}

{{/* The etcd client URLs given to the hub; exactly one of etcdEndpoints and etcd.enabled. */}}
{{- define "accord-hub.etcdEndpoints" -}}
{{- if and .Values.etcd.enabled .Values.etcdEndpoints -}}
{{- fail "set either etcdEndpoints (your etcd) or etcd.enabled=true (evaluation etcd), not both" -}}
{{- else if .Values.etcd.enabled -}}
{{- printf "http://accord-etcd.%s.svc:2379" (include "accord-hub.namespace" .) -}}
{{- else if .Values.etcdEndpoints -}}
{{- join "," .Values.etcdEndpoints -}}
{{- else -}}
{{- fail "the hub needs etcd: set etcdEndpoints (production) or etcd.enabled=true (evaluation)" -}}
{{- end -}}
{{- end -}}

{{/* Container security settings shared by the hub and the evaluation etcd. */}}
{{- define "accord-hub.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop:
    - ALL
{{- end -}}
