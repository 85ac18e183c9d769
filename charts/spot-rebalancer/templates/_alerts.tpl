{{/*
The one source of the project's alert rules. templates/prometheusrule.yaml puts them in a
PrometheusRule; scripts/render-chart-files writes the same groups, rendered with the default
values, to deploy/prometheus/alerts.yaml for Prometheus setups without the operator, and a test
fails when that file is not current. Thresholds come from .Values.prometheusRule.rules.

Agent aggregations use `without (...)` rather than `by (...)`: the target labels (instance, job,
pod, node, ...) differ between scrape setups, and keeping all of them lets an alert name the agent.
Controller alerts aggregate `by` the label they are about (pool, workload) with `max`: both
replicas count what they observe (notices, replica deficit), so a sum would count twice, and one
alert per pool or workload is what a person acts on, whichever replica leads. What only the
leader counts (blocked fail-overs, missed drains, fail-over latency) is summed instead.
Every controller aggregation keeps `cluster` too: on a Prometheus (or Thanos, Mimir ruler) that
holds several clusters, each cluster's series carry it (a target label set by the scrape, or the
external label of the cluster's own Prometheus when it remote-writes), and without it one
cluster's leader would hide another's absence. On a Prometheus of one cluster without that
label, `by (cluster)` is the same as no `by` at all.
Every alert has a `runbook_url` into docs/runbooks.md (a section per alert, anchored by the
alert's name in lower case) once prometheusRule.runbookURL says where those are published
(scripts/release sets it in the chart it publishes).
Prometheus template markers are written as {{`{{ ... }}`}} so Helm leaves them alone.
*/}}
{{- define "spot-rebalancer.alertGroups" -}}
{{- $rules := .Values.prometheusRule.rules }}
{{- $extra := .Values.prometheusRule.alertLabels }}
{{- $where := `{{ $labels.instance }}{{ with $labels.node }} (node {{ . }}){{ end }}` }}
{{- $inCluster := `{{ with $labels.cluster }} in cluster {{ . }}{{ end }}` }}
{{- $runbook := .Values.prometheusRule.runbookURL }}
groups:
  - name: spot-rebalancer-agent
    rules:
      {{- with $rules.agentNotPolling }}
      {{- if .enabled }}
      - alert: SpotRebalancerAgentNotPolling
        # The gauge is 0 until the first readable answer, so an agent that never reaches IMDS
        # fires too; `for` covers the first call, which Azure says may take 2 minutes.
        expr: time() - rebalancer_agent_imds_last_success_timestamp_seconds > {{ .staleSeconds }}
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalanceragentnotpolling
          {{- end }}
          summary: A spot-rebalancer agent has not read Azure Scheduled Events for over {{ .staleSeconds }}s.
          description: >-
            The agent {{ $where }} last read Scheduled Events
            {{`{{ $value | humanizeDuration }}`}} ago. Eviction notices for that VM go unseen.
            Its /readyz says why (IMDS unreachable, rate limited, timeouts).
      {{- end }}
      {{- end }}
      {{- with $rules.agentNodeWritesFailing }}
      {{- if .enabled }}
      - alert: SpotRebalancerAgentNodeWritesFailing
        # A failed write is retried on the next poll, so failures outnumber successes quickly
        # while the API server rejects the agent; 0/0 (no writes at all) is NaN and never fires.
        expr: |-
          sum without (outcome) (rate(rebalancer_agent_node_writes_total{outcome="error"}[5m]))
            / sum without (outcome) (rate(rebalancer_agent_node_writes_total[5m]))
            > {{ .errorRatio }}
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalanceragentnodewritesfailing
          {{- end }}
          summary: A spot-rebalancer agent cannot write its Node.
          description: >-
            {{`{{ $value | humanizePercentage }}`}} of the Node writes of the agent {{ $where }}
            failed over 5 minutes. The controller does not see eviction notices for that node.
            Check the agent's RBAC (nodes get/patch, nodes/status patch) and its log.
      {{- end }}
      {{- end }}
      {{- with $rules.agentAcknowledgementsFailing }}
      {{- if .enabled }}
      - alert: SpotRebalancerAgentAcknowledgementsFailing
        # Acknowledgements are rare (one per drained event), so look at a long window and
        # require that none succeeded in it, rather than a rate.
        expr: |-
          sum without (event_type, outcome) (increase(rebalancer_agent_acknowledgements_total{outcome="error"}[{{ .window }}])) > 0
            unless
          sum without (event_type, outcome) (increase(rebalancer_agent_acknowledgements_total{outcome="ok"}[{{ .window }}])) > 0
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalanceragentacknowledgementsfailing
          {{- end }}
          summary: A spot-rebalancer agent's acknowledgements to Azure fail.
          description: >-
            The agent {{ $where }} failed to acknowledge drained events to Azure in the last
            {{ .window }} and none succeeded. Events still start at their NotBefore, only not
            earlier.
      {{- end }}
      {{- end }}
{{- if .Values.controller.enabled }}
  - name: spot-rebalancer-controller
    rules:
      {{- with $rules.controllerNoLeader }}
      {{- if .enabled }}
      - alert: SpotRebalancerControllerNoLeader
        # No replica leads (or none is scraped at all): notices are seen but nobody cordons,
        # surges or drains. A takeover needs at most the lease duration (15 s by default).
        # Per cluster: a cluster whose replicas all follow; one whose agents are scraped but no
        # controller is; and no controller anywhere (absent() cannot say which cluster).
        expr: |-
          max by (cluster) (rebalancer_controller_leader) < 1
            or
          count by (cluster) (rebalancer_build_info{component="agent"})
            unless on (cluster)
          count by (cluster) (rebalancer_controller_leader)
            or
          absent(rebalancer_controller_leader)
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalancercontrollernoleader
          {{- end }}
          summary: No spot-rebalancer controller replica leads{{ $inCluster }}.
          description: >-
            No controller replica has held the leader Lease for {{ .for }}, or no controller is
            scraped. Eviction notices are published on the Nodes but nothing acts on them. Check
            the controller pods, their log ("became leader") and the Lease in the release
            namespace.
      {{- end }}
      {{- end }}
      {{- with $rules.evictionRateHigh }}
      {{- if .enabled }}
      - alert: SpotRebalancerEvictionRateHigh
        # Per replica, sum over the other labels; then max over the replicas, which both count
        # the notices they see.
        expr: |-
          max by (cluster, pool) (
            sum without (event_type, source, zone, sku, priority) (
              increase(rebalancer_controller_notices_total{event_type=~"{{ .eventTypes }}"}[{{ .window }}])
            )
          ) > {{ .threshold }}
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalancerevictionratehigh
          {{- end }}
          summary: Spot pool {{`{{ $labels.pool }}`}} is being evicted often.
          description: >-
            {{`{{ $value | humanize }}`}} notices ({{ .eventTypes }}) for nodes of pool
            {{`{{ $labels.pool }}`}} in the last {{ .window }}, more than {{ .threshold }}. Spot
            capacity of this VM size and region is scarce: consider another size or zone, or a
            larger on-demand share.
      {{- end }}
      {{- end }}
      {{- with $rules.failoverBlocked }}
      {{- if .enabled }}
      - alert: SpotRebalancerFailoverBlocked
        # Counted once per workload and cause by the leader that found it: summed over the
        # replicas, so a change of leader loses nothing.
        expr: |-
          sum by (cluster, workload, reason) (increase(rebalancer_controller_failovers_blocked_total[{{ .window }}])) > 0
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalancerfailoverblocked
          {{- end }}
          summary: "{{`{{ $labels.workload }}`}} could not fail over{{ $inCluster }}."
          description: >-
            {{`{{ $value | humanize }}`}} fail-over(s) of {{`{{ $labels.workload }}`}} blocked
            ({{`{{ $labels.reason }}`}}) in the last {{ .window }}: NoCompatibleOnDemandPool means
            no on-demand pool fits the workload's tolerations, nodeSelector, affinity or GPUs;
            SurgeNotHeld, that its owner set replicas back during the surge. The Warning Events
            on the Deployment say why, per pool:
            kubectl get events -A --field-selector reason=SpotRebalancerFailoverBlocked
      {{- end }}
      {{- end }}
      {{- with $rules.drainMissedDeadline }}
      {{- if .enabled }}
      - alert: SpotRebalancerDrainMissedDeadline
        expr: |-
          sum by (cluster, pool) (increase(rebalancer_controller_drain_missed_deadline_total[{{ .window }}])) > 0
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalancerdrainmisseddeadline
          {{- end }}
          summary: A node of pool {{`{{ $labels.pool }}`}} went before it was drained.
          description: >-
            {{`{{ $value | humanize }}`}} node(s) of pool {{`{{ $labels.pool }}`}} were cordoned
            for an eviction but gone before they were drained, in the last {{ .window }}: their
            pods died with the VM. Look at the controller's log for that node (evictions blocked,
            API errors) and at deadlineMarginSeconds.
      {{- end }}
      {{- end }}
      {{- with $rules.replicaDeficit }}
      {{- if .enabled }}
      - alert: SpotRebalancerReplicaDeficit
        # The counter grows by (base replicas - Ready) per second while a surge is open; its
        # rate is the average number of replicas missing. Both replicas count it: max.
        expr: |-
          max by (cluster, workload) (rate(rebalancer_controller_replica_deficit_replica_seconds_total[{{ .window }}])) > {{ .averageReplicas }}
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalancerreplicadeficit
          {{- end }}
          summary: "{{`{{ $labels.workload }}`}} runs with fewer Ready replicas than it should."
          description: >-
            {{`{{ $labels.workload }}`}} missed {{`{{ $value | humanize }}`}} Ready replicas on
            average over {{ .window }} while being failed over, for {{ .for }}: its replacements
            do not become Ready (no capacity, slow model load, image pull). Check its pending
            pods and the on-demand pool.
      {{- end }}
      {{- end }}
      {{- with $rules.fallbackCostHigh }}
      {{- if .enabled }}
      - alert: SpotRebalancerFallbackCostHigh
        # Both replicas account the same cost: max, not sum.
        expr: |-
          max by (cluster) (rate(rebalancer_fallback_cost_dollars_total[{{ .window }}])) * 3600 > {{ .dollarsPerHour }}
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalancerfallbackcosthigh
          {{- end }}
          summary: On-demand fallback costs more than the budget.
          description: >-
            Replicas that could run on spot ran on on-demand nodes at
            {{`{{ $value | printf "%.2f" }}`}} USD per hour on average over {{ .window }}, above
            the budget of {{ .dollarsPerHour }} USD per hour. Spot capacity is short (see the
            eviction rate) or returns to spot are held back (returnEnabled, returnWindow,
            returnQuietSeconds).
      {{- end }}
      {{- end }}
      {{- with $rules.failoverSlow }}
      {{- if .enabled }}
      - alert: SpotRebalancerFailoverSlow
        # Only the leader observes the latency (it applies the scale-back): the buckets are
        # summed over the replicas. No fail-over in the window is 0/0, NaN, and never fires.
        expr: |-
          histogram_quantile({{ .quantile }}, sum by (cluster, pool, le) (increase(rebalancer_controller_notice_to_replacement_ready_seconds_bucket[{{ .window }}]))) > {{ .seconds }}
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalancerfailoverslow
          {{- end }}
          summary: Fail-overs from spot pool {{`{{ $labels.pool }}`}} take long to be Ready{{ $inCluster }}.
          description: >-
            The {{ .quantile }} quantile of the time from a surge to its replacements Ready, for
            notices on pool {{`{{ $labels.pool }}`}}, was {{`{{ $value | humanizeDuration }}`}}
            over the last {{ .window }}, above {{ .seconds }}s. Replicas are missing meanwhile:
            the on-demand pool scales up from zero, images pull slowly or models load slowly.
      {{- end }}
      {{- end }}
      {{- with $rules.targetBudgetSpent }}
      {{- if .enabled }}
      - alert: SpotRebalancerTargetBudgetSpent
        # Both replicas read the same record and set the gauge: max, not sum.
        expr: |-
          max by (cluster, namespace, workload) (rebalancer_target_budget_spent_ratio) > {{ .spentRatio }}
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalancertargetbudgetspent
          {{- end }}
          summary: "{{`{{ $labels.namespace }}/{{ $labels.workload }}`}} has spent its availability target's error budget{{ $inCluster }}."
          description: >-
            {{`{{ $labels.namespace }}/{{ $labels.workload }}`}} was below its owner's replica
            count for {{`{{ $value | humanizePercentage }}`}} of the time its availability target
            allows so far, for {{ .for }}: the target is missed so far, and the controller plans
            it for a tenth of its budget until it is met again (more replicas on on-demand).
            kubectl spot-rebalancer status says why (spot capacity lost, waves of evictions,
            on-demand replicas that did not come).
      {{- end }}
      {{- end }}
      {{- with $rules.doctorFindings }}
      {{- if .enabled }}
      - alert: SpotRebalancerDoctorFindings
        # Every replica runs the doctor and sets the gauge: max, not sum.
        expr: |-
          max by (cluster, check) (rebalancer_doctor_findings) > 0
        for: {{ .for }}
        labels:
          severity: {{ .severity }}
          {{- with $extra }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          {{- with $runbook }}
          runbook_url: {{ . }}#spotrebalancerdoctorfindings
          {{- end }}
          summary: The doctor finds {{`{{ $labels.check }}`}}{{ $inCluster }}.
          description: >-
            {{`{{ $value | humanize }}`}} finding(s) of the check {{`{{ $labels.check }}`}} for
            {{ .for }}: a spot GPU setup that loses replicas on the next eviction (a device
            plugin or agent that cannot run on spot, a workload without a spot or on-demand
            pool). kubectl spot-rebalancer doctor names the object and prints the YAML that
            fixes it; the Warning Event SpotRebalancerMisconfigured is on that object.
      {{- end }}
      {{- end }}
{{- end }}
{{- end }}
