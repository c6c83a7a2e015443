{{/* Names: <release>-fleetjob unless the release name already says fleetjob. */}}
{{- define "fleetjob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fleetjob.fullname" -}}
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

{{- define "fleetjob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fleetjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "fleetjob.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "fleetjob.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fleetjob
{{- end -}}

{{- define "fleetjob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fleetjob.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespace the operator serves in scope=namespace. */}}
{{- define "fleetjob.watchNamespace" -}}
{{- default .Release.Namespace .Values.watchNamespace -}}
{{- end -}}

{{/* An image reference from {registry, repository, tag, digest}: (list IMAGE-VALUES APP-VERSION). */}}
{{- define "fleetjob.imageRef" -}}
{{- $image := index . 0 -}}
{{- $repo := $image.repository -}}
{{- if $image.registry -}}{{- $repo = printf "%s/%s" $image.registry $repo -}}{{- end -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repo $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default (index . 1) $image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "fleetjob.image" -}}
{{- include "fleetjob.imageRef" (list .Values.image .Chart.AppVersion) -}}
{{- end -}}

{{/* What the operator injects into FleetJob pods (--sidecar-image). */}}
{{- define "fleetjob.sidecarImage" -}}
{{- include "fleetjob.imageRef" (list .Values.sidecarImage .Chart.AppVersion) -}}
{{- end -}}

{{/*
What fleet-operator does, hence all it may do (docs/operator.md, "What it needs from the cluster").
The leader-election Lease is granted apart, in the release's namespace only.
*/}}
{{- define "fleetjob.operatorRules" -}}
- apiGroups: [fleet.paddlepaddle.org]
  resources: [fleetjobs]
  verbs: [get, list, watch, update, delete]
- apiGroups: [fleet.paddlepaddle.org]
  resources: [fleetjobs/status]
  verbs: [get, update]
- apiGroups: [""]
  resources: [configmaps, services, serviceaccounts]
  verbs: [get, list, watch, create, update, delete]
# patch: a pod's run label, when a job restarts in place (runPolicy.restartStrategy InPlace).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, update, patch, delete]
# Not used by the operator itself: Kubernetes lets it grant the sidecar's Role (read the job's
# endpoints ConfigMap and its own pod, patch its pod's TrainingProgress condition) only what it holds.
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, update, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- if .Values.rbac.gangScheduling }}
- apiGroups: [scheduling.volcano.sh, scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [get, create, delete]
{{- end }}
{{- if .Values.rbac.kubernetesGangScheduling }}
- apiGroups: [scheduling.k8s.io]
  resources: [workloads, podgroups]
  verbs: [get, list, watch, create, delete]
{{- end }}
{{- if .Values.kueue.enabled }}
# Kueue admission (docs/kueue.md): the jobs' Workloads, and their status (quota release, PodsReady,
# Finished). The cluster-scoped objects it reads are granted apart (kueue-rbac.yaml).
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [get, list, watch, create, update, delete]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [get, update]
{{- end }}
{{- end -}}

{{- define "fleetjob.validate" -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) -}}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true: without it every replica would act on every job" -}}
{{- end -}}
{{- end -}}

{{/* The chart's etcd (values: etcd): its name, and labels apart from the operator's. */}}
{{- define "fleetjob.etcdName" -}}
{{- printf "%s-etcd" (include "fleetjob.fullname" .) | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "fleetjob.etcdSelectorLabels" -}}
app.kubernetes.io/name: {{ include "fleetjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end -}}

{{- define "fleetjob.etcdLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "fleetjob.etcdSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fleetjob
{{- end -}}
