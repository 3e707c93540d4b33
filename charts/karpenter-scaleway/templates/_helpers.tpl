{{/* Names and labels shared by every template. */}}

{{- define "kps.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kps.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kps.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kps.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kps.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kps.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kps.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kps.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the Scaleway credentials: an existing one, or the chart's. */}}
{{- define "kps.credentialsSecret" -}}
{{- if .Values.scaleway.existingSecret -}}
{{- .Values.scaleway.existingSecret -}}
{{- else -}}
{{- printf "%s-scaleway" (include "kps.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* image: repository[:tag][@digest]; the tag defaults to the chart's appVersion. */}}
{{- define "kps.image" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion -}}
{{- if .image.digest -}}
{{- printf "%s:%s@%s" .image.repository $tag .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Karpenter core's FEATURE_GATES, every gate spelled out. */}}
{{- define "kps.featureGates" -}}
{{- $g := .Values.settings.featureGates -}}
{{- printf "NodeRepair=%t,ReservedCapacity=%t,SpotToSpotConsolidation=%t,NodeOverlay=%t,StaticCapacity=%t,CapacityBuffer=%t,TerminateFirstDrift=%t,TerminateFirstRepair=%t,PodDeletionCostManagement=%t" $g.nodeRepair $g.reservedCapacity $g.spotToSpotConsolidation $g.nodeOverlay $g.staticCapacity $g.capacityBuffer $g.terminateFirstDrift $g.terminateFirstRepair $g.podDeletionCostManagement -}}
{{- end -}}

{{/* The directory of the provider's Unix socket, shared by both containers. */}}
{{- define "kps.socketDir" -}}/var/run/karpenter{{- end -}}

{{/* The label matchers of an alert's selector: the given ones (a string, may be
empty) and prometheusRule.selector, in braces; nothing when both are empty. */}}
{{- define "kps.alertSelector" -}}
{{- $root := index . 0 -}}
{{- $matchers := compact (list (index . 1) $root.Values.prometheusRule.selector) -}}
{{- if $matchers -}}{{ printf "{%s}" (join "," $matchers) }}{{- end -}}
{{- end -}}
