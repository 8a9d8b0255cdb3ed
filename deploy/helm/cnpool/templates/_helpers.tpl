{{/* The chart's name (nameOverride), the base of the name label. */}}
{{- define "cnpool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" -}}
{{- end }}

{{/* The prefix of every object's name. A release named `cnpool` (or
anything containing the chart's name) gives `cnpool`, so that the objects
keep deploy/'s names: cnpool-operator, cnpool-webhook, ServiceAccount cnpool.
Room is left for the longest suffix, `-leader-election`. */}}
{{- define "cnpool.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 47 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 47 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 47 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* What the Deployment, the Services, the PodDisruptionBudget and the
anti-affinity select the operator's pods by. */}}
{{- define "cnpool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cnpool.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "cnpool.labels" -}}
{{ include "cnpool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The ServiceAccount; the webhook lets only this user bind claims
(--operator-user). */}}
{{- define "cnpool.serviceAccountName" -}}
{{- include "cnpool.fullname" . -}}
{{- end }}

{{/* The webhook's Service. Its DNS names are the serving certificate's
subjectAltNames. */}}
{{- define "cnpool.webhookServiceName" -}}
{{- include "cnpool.fullname" . }}-webhook
{{- end }}

{{/* The Secret with the serving certificate (tls.crt, tls.key). */}}
{{- define "cnpool.webhookSecretName" -}}
{{- .Values.webhook.secretName | default (printf "%s-webhook-tls" (include "cnpool.fullname" .)) -}}
{{- end }}

{{/* Where the serving certificate comes from: helm, cert-manager or
secret. `auto` is cert-manager when the cluster serves its API, else helm. */}}
{{- define "cnpool.certificateSource" -}}
{{- $source := .Values.webhook.certificate.source -}}
{{- if eq $source "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1" }}cert-manager{{ else }}helm{{ end -}}
{{- else if has $source (list "helm" "cert-manager" "secret") -}}
{{- $source -}}
{{- else -}}
{{- fail (printf "webhook.certificate.source is %q: set it to auto, helm, cert-manager or secret" $source) -}}
{{- end -}}
{{- end }}

{{/* The first YAML document of a file under files/, as a map. */}}
{{- define "cnpool.firstDocument" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- index (regexSplit "(?m)^---$" ($root.Files.Get $path) -1) 0 | fromYaml | toJson -}}
{{- end }}
