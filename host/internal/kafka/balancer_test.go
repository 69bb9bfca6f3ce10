package kafka

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestProgressRoundTrip(t *testing.T) {
	inner := []byte("sticky user data")
	progress := map[TopicPartition]int64{{"a", 0}: 7, {"a", 3}: -1, {"bb", 1}: 1 << 40}
	ud := appendProgress(inner, progress)
	got, gotProgress, ok := splitProgress(ud)
	if !ok || !bytes.Equal(got, inner) || !maps.Equal(gotProgress, progress) {
		t.Fatalf("splitProgress = %q %v %v; want %q %v", got, gotProgress, ok, inner, progress)
	}
	// User data without progress, or damaged, is left as it is.
	for _, ud := range [][]byte{nil, inner, ud[:len(ud)-1], append(bytes.Repeat([]byte{0xff}, 4), progressMagic...)} {
		if got, _, ok := splitProgress(ud); ok || !bytes.Equal(got, ud) {
			t.Errorf("splitProgress(%q) = %q, %v; want it unchanged", ud, got, ok)
		}
	}
}

// member makes a member's join metadata as a host with this progress and current assignment
// sends it; nil progress: an older host with plain cooperative-sticky metadata.
func member(id string, owned []int32, progress map[TopicPartition]int64) kmsg.JoinGroupResponseMember {
	m := kmsg.NewJoinGroupResponseMember()
	m.MemberID = id
	cur := map[string][]int32{"t": owned}
	if progress == nil {
		m.ProtocolMetadata = kgo.CooperativeStickyBalancer().JoinGroupMetadata([]string{"t"}, cur, 3)
	} else {
		m.ProtocolMetadata = StandbyBalancer(func() map[TopicPartition]int64 { return progress }).JoinGroupMetadata([]string{"t"}, cur, 3)
	}
	return m
}

func balance(t *testing.T, members ...kmsg.JoinGroupResponseMember) map[string][]int32 {
	t.Helper()
	mb, _, err := StandbyBalancer(nil).MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"t": 6})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int32{}
	for _, a := range into.IntoSyncAssignment() {
		var ca kmsg.ConsumerMemberAssignment
		if err := ca.ReadFrom(a.MemberAssignment); err != nil {
			t.Fatal(err)
		}
		for _, tp := range ca.Topics {
			out[a.MemberID] = append(out[a.MemberID], tp.Partitions...)
		}
		slices.Sort(out[a.MemberID])
	}
	return out
}

func pp(offsets ...int64) map[TopicPartition]int64 {
	m := map[TopicPartition]int64{}
	for i, o := range offsets {
		if o >= 0 {
			m[TopicPartition{"t", int32(i)}] = o
		}
	}
	return m
}

// TestStandbyBalancer: a dead member's partitions 0 and 1 go to the survivors, one each (sticky's
// balance); which one each gets follows how far each survivor's copy is — both ways round, so it
// is not sticky's own order. What survivors own stays theirs.
func TestStandbyBalancer(t *testing.T) {
	for _, tc := range []struct {
		name         string
		bProg, cProg map[TopicPartition]int64
		want         map[string][]int32
	}{
		{"b ahead on 0", pp(100, 5), pp(10, 200), map[string][]int32{"b": {0, 2, 3}, "c": {1, 4, 5}}},
		{"c ahead on 0", pp(5, 100), pp(200, 10), map[string][]int32{"b": {1, 2, 3}, "c": {0, 4, 5}}},
		{"only c has copies", pp(), pp(50, 60), nil}, // one each still: sticky's balance wins; checked below
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := balance(t, member("b", []int32{2, 3}, tc.bProg), member("c", []int32{4, 5}, tc.cProg))
			if tc.want != nil && fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("plan %v, want %v", got, tc.want)
			}
			if len(got["b"]) != 3 || len(got["c"]) != 3 || !slices.Contains(got["b"], 2) || !slices.Contains(got["c"], 4) {
				t.Fatalf("plan %v: want 3 partitions each, owned ones kept", got)
			}
		})
	}
	// A member of an older version (no progress) in the group: the balance still works.
	got := balance(t, member("b", []int32{2, 3}, nil), member("c", []int32{4, 5}, pp(0, 9)))
	if len(got["b"])+len(got["c"]) != 6 {
		t.Fatalf("plan %v does not assign all 6 partitions", got)
	}
}
