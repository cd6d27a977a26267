{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "sandcap.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every resource name. Kept to 50 characters so suffixes like "-webhook-tls" fit. */}}
{{- define "sandcap.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sandcap.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sandcap.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The labels of every object the chart renders: the chart's own, then commonLabels (values.yaml;
the schema refuses a key of the chart's own). Never part of a selector. */}}
{{- define "sandcap.labels" -}}
{{- include "sandcap.labelsWith" (list . dict) }}
{{- end }}

{{/* sandcap.labels and `extra`, a dict of labels of the object's own (e.g. serviceMonitor.labels),
which win over commonLabels. */}}
{{- define "sandcap.labelsWith" -}}
{{- $root := index . 0 }}
{{- $extra := index . 1 | default dict -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sandcap.selectorLabels" $root }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: sandcap
{{- include "sandcap.commonLabels" (list $root $extra) }}
{{- with $extra }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* commonLabels but for the keys of `extra` (labels the object carries of its own, which win), as
lines that start with a newline; nothing without them. `default` keeps `helm upgrade --reuse-values`
from a chart without the value rendering. */}}
{{- define "sandcap.commonLabels" -}}
{{- $root := index . 0 }}
{{- $extra := index . 1 }}
{{- $common := dict }}
{{- range $key, $value := $root.Values.commonLabels | default dict }}
{{- if not (hasKey $extra $key) }}
{{- $_ := set $common $key $value }}
{{- end }}
{{- end }}
{{- with $common }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "sandcap.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sandcap.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Service the apiserver calls; also the DNS names in the serving certificate. */}}
{{- define "sandcap.serviceName" -}}
{{ include "sandcap.fullname" . }}-webhook
{{- end }}

{{/* certManager mode: the cert-manager Certificate of the serving certificate; cainjector reads its CA. */}}
{{- define "sandcap.certificateName" -}}
{{ include "sandcap.fullname" . }}-webhook
{{- end }}

{{/* ValidatingWebhookConfiguration name; selfManaged mode patches the caBundle of this one only. */}}
{{- define "sandcap.webhookConfigName" -}}
{{ include "sandcap.fullname" . }}
{{- end }}

{{/* Secret with tls.crt/tls.key, mounted at /tls in both certificate modes. */}}
{{- define "sandcap.certSecretName" -}}
{{- if and (eq .Values.certificates.mode "selfManaged") .Values.certificates.selfManaged.secretName }}
{{- .Values.certificates.selfManaged.secretName }}
{{- else }}
{{- include "sandcap.fullname" . }}-webhook-tls
{{- end }}
{{- end }}

{{/* The image of sandcap's pods and the `helm test` pod: global.imageRegistry (the umbrella-chart
convention), if set, before image.repository. */}}
{{- define "sandcap.image" -}}
{{- $repository := .Values.image.repository }}
{{- with dig "imageRegistry" "" (.Values.global | default dict) }}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* imagePullSecrets of every pod: the chart's own, then global.imagePullSecrets (names or
{name: ...}, as umbrella charts give them), each name once. */}}
{{- define "sandcap.imagePullSecrets" -}}
{{- $names := list }}
{{- range concat (.Values.imagePullSecrets | default list) (dig "imagePullSecrets" list (.Values.global | default dict)) }}
{{- if kindIs "string" . }}
{{- $names = append $names . }}
{{- else if kindIs "map" . }}
{{- $names = append $names (get . "name") }}
{{- end }}
{{- end }}
{{- range $names | compact | uniq }}
- name: {{ . }}
{{- end }}
{{- end }}

{{/* The `helm test` pod: never the Deployment's selector labels, or the Service and the
PodDisruptionBudget would count it as a sandcap pod. */}}
{{- define "sandcap.checkLabels" -}}
app.kubernetes.io/name: {{ include "sandcap.name" . }}-check
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: helm-test
app.kubernetes.io/part-of: sandcap
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* sandcap's stop must fit its own timeout: the drain window, then up to 15 s for reviews in flight. */}}
{{- define "sandcap.checkShutdown" -}}
{{- $s := .Values.shutdown }}
{{- if lt (int $s.timeoutSeconds) (add $s.drainWindowSeconds 15 | int) }}
{{- fail (printf "shutdown.timeoutSeconds (%d) must be at least shutdown.drainWindowSeconds (%d) + 15: sandcap's stop takes the drain window, then up to 15 s for the reviews in flight" (int $s.timeoutSeconds) (int $s.drainWindowSeconds)) }}
{{- end }}
{{- end }}

{{/* The node selector of every pod: nodeSelector, whose defaults (values.yaml) are Linux and amd64,
the platform the image is built for. kubernetes.io/os: linux is merged in underneath as well, so
that a release upgraded with --reuse-values from a chart without those defaults keeps it; a key of
the admin's own wins. */}}
{{- define "sandcap.nodeSelector" -}}
{{- toYaml (merge (deepCopy (.Values.nodeSelector | default dict)) (dict "kubernetes.io/os" "linux")) }}
{{- end }}

{{/* The Deployment's strategy: updateStrategy (values.yaml), by default a rolling update that starts
the new pod before it stops an old one. rollingUpdate is dropped for `Recreate` (Kubernetes refuses
it there; Helm would keep the default's under an admin's `type: Recreate`). */}}
{{- define "sandcap.updateStrategy" -}}
{{- $default := dict "type" "RollingUpdate" "rollingUpdate" (dict "maxSurge" 1 "maxUnavailable" 0) }}
{{- $strategy := merge (deepCopy (.Values.updateStrategy | default dict)) $default }}
{{- if ne $strategy.type "RollingUpdate" }}
{{- $_ := unset $strategy "rollingUpdate" }}
{{- end }}
{{- toYaml $strategy }}
{{- end }}

{{/* Whether the chart renders sandcap's own RBAC (rbac.create; templates/rbac.yaml). */}}
{{- define "sandcap.rbacCreate" -}}
{{- if dig "create" true (.Values.rbac | default dict) }}true{{ end }}
{{- end }}

{{/* Whether sandcap observes workloads (values.yaml, workloads.enabled; `sandcap run
--observe-workloads`): its RBAC for Jobs, Sandboxes, Namespaces and the observed leases
(rbac.yaml) and the writes policy's rule for those leases (writespolicy.yaml) follow it. `dig`
gives the default to `helm upgrade --reuse-values` from a release of a chart without the value. */}}
{{- define "sandcap.observeWorkloads" -}}
{{- if dig "enabled" true (.Values.workloads | default dict) }}true{{ end }}
{{- end }}


{{/* The contract version sandcap enforces (values.yaml, contract.version): the default, v1, whose
CRDs are at the top of files/crds/, or a version with a directory of its own there. The schema
refuses any other first; this refusal holds where the schema is skipped (`--skip-schema-validation`),
so that no pod crash-loops on the version and no release goes without CRDs. `dig` gives the default
also to `helm upgrade --reuse-values` from a release of a chart without the value (it reuses that
release's values, not this chart's). */}}
{{- define "sandcap.contractVersion" -}}
{{- $default := "v1" }}
{{- $version := dig "version" $default (.Values.contract | default dict) }}
{{- $known := list $default }}
{{- range $path, $_ := .Files.Glob "files/crds/*/*.yaml" }}
{{- $known = append $known (base (dir $path)) }}
{{- end }}
{{- $known = uniq $known }}
{{- if not (has $version $known) }}
{{- fail (printf "contract.version %q is not a contract version of this chart (%s)" (toString $version) (join ", " $known)) }}
{{- end }}
{{- $version }}
{{- end }}

{{/* The repository's directory of the contract version's CRDs, as `sandcap crds --contract` writes
them and files/ mirrors: crds/<version>/ where the version has one, else crds/ (the default's). */}}
{{- define "sandcap.crdDir" -}}
{{- $version := include "sandcap.contractVersion" . }}
{{- ternary (printf "crds/%s/" $version) "crds/" (.Files.Glob (printf "files/crds/%s/*.yaml" $version) | len | lt 0) }}
{{- end }}
