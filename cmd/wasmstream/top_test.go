package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
)

// top --once against a running host: the table holds the host's figures, and a wrong token or
// a host that is gone is a clear error.
func TestTopOnce(t *testing.T) {
	h, _, _, feed, wait := adminHost(t, "tok")
	addr := h.AdminAddr()
	const n = 25
	for i := range n {
		fmt.Fprintf(feed, `{"k":"k%d","v":"%d"}`+"\n", i%5, i)
	}
	deadline := time.Now().Add(time.Minute) // a guard against hanging, not a measurement
	for h.Stats()[0].Processed != n {
		if time.Now().After(deadline) {
			t.Fatalf("records not processed: %+v", h.Stats()[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := h.Stats()[0]
	code, stdout, stderr := runCLI(t, "top", "--once", "--interval", "50ms", "--admin-addr", addr, "--admin-token", "tok")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout, "\x1b") {
		t.Errorf("--once printed escape codes:\n%q", stdout)
	}
	var row, input []string
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) == 13 && f[0] == "versioned" {
			row = f
		}
		if len(f) == 8 && f[0] == "versioned" {
			input = f
		}
	}
	// TASK STATE VERSION RECORDS READ/S PROCESSED PROC/S PENDING LAG OUTPUTS DEAD RETRIES FAILURES
	want := []string{"versioned", "running", fmt.Sprint(st.Version), fmt.Sprint(st.Records), "0.0", fmt.Sprint(n), "0.0",
		"0", "-", fmt.Sprint(st.Outputs), "0", "0", "0"}
	if strings.Join(row, " ") != strings.Join(want, " ") {
		t.Errorf("task row %q, want %q\n%s", row, want, stdout)
	}
	// TASK INPUT PARTITION RECORDS READ/S COMMITTED LAG REPLAY
	if len(input) != 8 || input[3] != fmt.Sprint(st.Inputs[0].Records) || input[2] != "-" || input[6] != "-" || input[7] != "-" {
		t.Errorf("input row %q, want %d records\n%s", input, st.Inputs[0].Records, stdout)
	}

	// While records flow, --once shows them read, however its interval and the checkpoints fall.
	stop := make(chan struct{})
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			fmt.Fprintf(feed, `{"k":"k%d","v":"%d"}`+"\n", i%5, i)
			time.Sleep(2 * time.Millisecond) // a steady feed, not a synchronisation
		}
	}()
	code, stdout, stderr = runCLI(t, "top", "--once", "--interval", "50ms", "--admin-addr", addr, "--admin-token", "tok")
	close(stop)
	<-fed
	row = nil
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) == 13 && f[0] == "versioned" {
			row = f
		}
	}
	if code != 0 || len(row) != 13 || row[4] == "0.0" {
		t.Errorf("top --once while records flow: exit %d, task row %q, want a READ/S above 0\n%s%s", code, row, stdout, stderr)
	}

	code, _, stderr = runCLI(t, "top", "--once", "--admin-addr", addr, "--admin-token", "nope")
	if code != 1 || !strings.Contains(stderr, "wrong bearer token (HTTP 401)") {
		t.Errorf("wrong token: exit %d\n%s", code, stderr)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, "top", "--once", "--admin-addr", addr)
	if code != 1 || !strings.Contains(stderr, "is the host running") {
		t.Errorf("host gone: exit %d\n%s", code, stderr)
	}
}

// status names a Kafka input's topic and partition, and says offset rather than line.
func TestStatusInputLine(t *testing.T) {
	for _, c := range []struct {
		in   host.InputStats
		want string
	}{
		{host.InputStats{Name: "feed", Partition: -1, Records: 7, Committed: 5}, "  input feed: read 7, committed line 5"},
		{host.InputStats{Name: "words", Topic: "words", Partition: 2, Records: 9, Committed: 41}, "  input words: topic words partition 2: read 9, committed offset 41"},
		{host.InputStats{Name: "words", Topic: "words", Partition: 2, Records: 9, Committed: 41, ReplayFrom: 10, ReplayHead: 110, ReplayRemaining: 69},
			"  input words: topic words partition 2: read 9, committed offset 41; replaying from 10 after a reset: 69 of 100 to the head at the reset to go"},
	} {
		if got := statusInputLine(c.in); got != c.want {
			t.Errorf("statusInputLine(%+v) = %q, want %q", c.in, got, c.want)
		}
	}
}
