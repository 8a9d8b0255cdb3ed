{{/* Labels every object carries; the Services select on the name label. */}}
{{- define "cnpool.labels" -}}
app.kubernetes.io/name: cnpool-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The first YAML document of a file under files/, as a map. */}}
{{- define "cnpool.firstDocument" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- index (regexSplit "(?m)^---$" ($root.Files.Get $path) -1) 0 | fromYaml | toJson -}}
{{- end }}
