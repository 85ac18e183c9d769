/*
Copyright The Kubernetes Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Karpenter core with its KWOK cloud provider, as sigs.k8s.io/karpenter/kwok's main.go (v1.15.0)
// builds it, and one change (spot-rebalancer, tests/cluster/build.sh): the cloud provider also
// declares karpenter-provider-azure's repair policy for a spot eviction notice, so that with
// FEATURE_GATES=NodeRepair=true Karpenter repairs a node AKS's node-problem-detector marks
// PreemptionScheduled=True, as AKS node auto-provisioning does. Without the gate nothing differs.
package main

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/samber/lo"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"
)

// preemptionScheduled is karpenter-provider-azure's policy (pkg/cloudprovider/cloudprovider.go
// RepairPolicies, at 352646f5, Aug 2026): the PreemptionScheduled condition, True, toleration 0,
// no drain bound of its own (the NodeClaim's terminationGracePeriod applies). The provider
// writes it for core v1.14, whose RepairPolicy has neither ReasonRegex nor Action; core v1.15
// asks both of a policy that is not the set's default fallback: ".*" and ReplaceNode, which
// is what v1.14's repair did.
var preemptionScheduled = cloudprovider.RepairPolicy{
	ConditionType:      "PreemptionScheduled",
	ConditionStatus:    corev1.ConditionTrue,
	ReasonRegex:        ".*",
	TolerationDuration: 0,
	Action:             cloudprovider.ReplaceNode,
}

// withAzureRepair is the KWOK cloud provider with that policy added to its own.
type withAzureRepair struct {
	*kwok.CloudProvider
}

func (c withAzureRepair) RepairPolicies() []cloudprovider.RepairPolicy {
	return append(c.CloudProvider.RepairPolicies(), preemptionScheduled)
}

func main() {
	ctx, op := operator.NewOperator()
	instanceTypes, err := kwok.ConstructInstanceTypes(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "failed constructing instance types")
	}

	overlayUndecoratedCloudProvider := withAzureRepair{kwok.NewCloudProvider(ctx, op.GetClient(), instanceTypes)}
	cloudProvider := overlay.Decorate(overlayUndecoratedCloudProvider, op.GetClient(), op.InstanceTypeStore)
	repairPolicyMatcher := lo.Must(health.NewRepairPolicyMatcher(ctx, cloudProvider))
	clusterState := state.NewCluster(op.Clock, op.GetClient(), cloudProvider, state.WithRepairPolicyMatcher(repairPolicyMatcher))
	op.
		WithControllers(ctx, controllers.NewControllers(
			ctx,
			op.Manager,
			op.Clock,
			op.GetClient(),
			op.EventRecorder,
			cloudProvider,
			overlayUndecoratedCloudProvider,
			clusterState,
			op.InstanceTypeStore,
			op.PredictionStore,
		)...).Start(ctx)
}
