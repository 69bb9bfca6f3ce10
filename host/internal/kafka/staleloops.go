package kafka

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// LeaveStaleLoops removes from group the static members of loops a host no longer runs: those
// whose group.instance.id is instanceID (its loop 0's) followed by "-loop<i>" with i >= loops.
// A host that ran a task as more loops and crashed, or was killed, or restarts with fewer
// loops left such members in the group (a loop's clean stop leaves by its instance id, a
// dead one cannot); nobody reads their partitions until their session times out, since a
// static member's partitions wait for it. It returns the instance ids it removed (none when
// there were none). Members with the other loops' ids are never touched: a loop that still
// runs replaces its own member when it joins.
func LeaveStaleLoops(ctx context.Context, cfg Config, group, instanceID string, loops int) ([]string, error) {
	if instanceID == "" {
		return nil, nil
	}
	var left []string
	err := withAdmin(cfg, func(_ *kgo.Client, adm *kadm.Client) error {
		gs, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return fmt.Errorf("kafka: describing group %s: %w", group, err)
		}
		g, ok := gs[group]
		if !ok || g.Err != nil {
			return nil // no such group yet: nothing to remove
		}
		for _, m := range g.Members {
			if m.InstanceID != nil && staleLoop(*m.InstanceID, instanceID, loops) {
				left = append(left, *m.InstanceID)
			}
		}
		if len(left) == 0 {
			return nil
		}
		resp, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(left...).
			Reason("wasmstream: the host runs fewer loops of the task"))
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("kafka: removing the static members %v from group %s: %w", left, group, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return left, nil
}

// loopMark separates a loop's number from its host's instance and transactional ids.
const loopMark = "-loop"

// LoopSuffix is what loop i of a task on a host appends to its group.instance.id and its
// transactional.id: nothing for loop 0 (an upgrade to loops keeps loop 0's ids), "-loop<i>"
// for the others.
func LoopSuffix(i int) string {
	if i == 0 {
		return ""
	}
	return loopMark + strconv.Itoa(i)
}

// staleLoop reports whether id is the instance id of loop i >= loops of the host whose loop 0
// has instanceID: instanceID + LoopSuffix(i).
func staleLoop(id, instanceID string, loops int) bool {
	s, ok := strings.CutPrefix(id, instanceID+loopMark)
	if !ok {
		return false
	}
	i, err := strconv.Atoi(s)
	return err == nil && strconv.Itoa(i) == s && i >= loops
}
