{{/*
The one source of the project's alert rules. templates/prometheusrule.yaml puts them in a
PrometheusRule; scripts/render-chart-files writes the same groups, rendered with the default
values, to deploy/prometheus/alerts.yaml for Prometheus setups without the operator, and a test
fails when that file is not current. Thresholds come from .Values.prometheusRule.rules.

Aggregations use `without (...)` rather than `by (...)`: the target labels (instance, job, pod,
node, ...) differ between scrape setups, and keeping all of them lets an alert name the agent.
Prometheus template markers are written as {{`{{ ... }}`}} so Helm leaves them alone.
*/}}
{{- define "spot-rebalancer.alertGroups" -}}
{{- $rules := .Values.prometheusRule.rules }}
{{- $extra := .Values.prometheusRule.alertLabels }}
{{- $where := `{{ $labels.instance }}{{ with $labels.node }} (node {{ . }}){{ end }}` }}
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
          summary: A spot-rebalancer agent's acknowledgements to Azure fail.
          description: >-
            The agent {{ $where }} failed to acknowledge drained events to Azure in the last
            {{ .window }} and none succeeded. Events still start at their NotBefore, only not
            earlier.
      {{- end }}
      {{- end }}
{{- end }}
