{{/* Name prefix: the release name, or "narwhal" inside it. */}}
{{- define "narwhal.fullname" -}}
{{- if contains "narwhal" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-narwhal" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "narwhal.core" -}}{{ include "narwhal.fullname" . }}-core{{- end -}}
{{- define "narwhal.agent" -}}{{ include "narwhal.fullname" . }}-agent{{- end -}}

{{- define "narwhal.labels" -}}
app.kubernetes.io/part-of: narwhal
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end -}}

{{- define "narwhal.image" -}}
{{- $tag := .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{ .root.Values.image.registry }}/{{ .name }}:{{ $tag }}
{{- end -}}

{{- define "narwhal.engineNamespace" -}}
{{- .Values.engines.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* TLS on the core's API listener: its scheme, where pods mount the
  Secret, and the environment that makes Go trust its CA (SSL_CERT_FILE
  replaces the system roots). */}}
{{- define "narwhal.scheme" -}}
{{- if .Values.tls.existingSecret }}https{{ else }}http{{ end -}}
{{- end -}}

{{- define "narwhal.tlsDir" -}}
/var/run/secrets/narwhal-tls
{{- end -}}

{{- define "narwhal.tlsEnv" -}}
{{- if and .Values.tls.existingSecret .Values.tls.caKey -}}
- name: SSL_CERT_FILE
  value: {{ include "narwhal.tlsDir" . }}/ca.crt
{{- end -}}
{{- end -}}

{{- define "narwhal.tokenSecret" -}}
{{- .Values.auth.existingSecret | default (printf "%s-token" (include "narwhal.fullname" .)) -}}
{{- end -}}

{{/* The role label: the preset's, overridden field by field. */}}
{{- define "narwhal.roleKey" -}}
{{- $presets := dict "narwhal" "narwhal.io/role" "llm-d" "llm-d.ai/role" -}}
{{- if not (hasKey $presets .Values.roles.preset) -}}
{{- fail (printf "roles.preset must be narwhal or llm-d, got %q" .Values.roles.preset) -}}
{{- end -}}
{{- .Values.roles.key | default (get $presets .Values.roles.preset) -}}
{{- end -}}
{{- define "narwhal.rolePrefill" -}}{{ .Values.roles.prefill | default "prefill" }}{{- end -}}
{{- define "narwhal.roleDecode" -}}{{ .Values.roles.decode | default "decode" }}{{- end -}}

{{/* Engine pod selector: role label in (prefill, decode), plus engines.selector. */}}
{{- define "narwhal.engineSelector" -}}
{{- $s := printf "%s in (%s,%s)" (include "narwhal.roleKey" .) (include "narwhal.rolePrefill" .) (include "narwhal.roleDecode" .) -}}
{{- if .Values.engines.selector -}}
{{- $s = printf "%s,%s" $s .Values.engines.selector -}}
{{- end -}}
{{- $s -}}
{{- end -}}

{{/* The mount path of core.profiles' file. */}}
{{- define "narwhal.profilesPath" -}}/etc/narwhal/profiles.json{{- end -}}
