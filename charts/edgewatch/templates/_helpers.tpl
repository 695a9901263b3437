{{/* The edgewatch image, repository:tag (tag: image.tag, else the chart's appVersion). */}}
{{- define "edgewatch.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* imagePullPolicy, only when image.pullPolicy is set (deploy/ leaves it to the cluster's default). */}}
{{- define "edgewatch.pullPolicy" -}}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end -}}
{{- end -}}
