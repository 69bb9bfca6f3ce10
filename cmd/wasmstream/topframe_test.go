package main

import (
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
)

// writeTopFrame on fixed snapshots: rates from the snapshot before, a task new since then, a
// halted and a paused task, Kafka and file inputs with and without a known lag, a replay, and
// recent errors (escaped, newest first, at most topRecentErrors of a task).
func TestTopFrame(t *testing.T) {
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.Local)
	prev := topSnapshot{at: at, st: wireStatus{Tasks: []host.TaskStats{
		{Task: "clicks", Records: 100, Processed: 90, Inputs: []host.InputStats{
			{Name: "in", Topic: "clicks", Partition: 0, Records: 60},
			{Name: "in", Topic: "clicks", Partition: 1, Records: 40},
		}},
		{Task: "files", Records: 10, Processed: 10, Inputs: []host.InputStats{{Name: "input0", Records: 10}}},
	}}}
	var recent []host.RecentError
	for i := range topRecentErrors + 2 {
		recent = append(recent, host.RecentError{Time: at.Add(time.Duration(i) * time.Second), Kind: "retry",
			Where: "process", Key: "k\x1b[2J" + strings.Repeat("x", i), Err: "boom"})
	}
	recent[len(recent)-1].KeyNull, recent[len(recent)-1].Key = true, ""
	cur := topSnapshot{at: at.Add(2 * time.Second), st: wireStatus{Tasks: []host.TaskStats{
		{Task: "clicks", Version: 3, Records: 150, Processed: 130, Pending: 4, Outputs: 7, DeadLetters: 1, Retries: 2,
			Failures: 1, Recent: recent, Inputs: []host.InputStats{
				{Name: "in", Topic: "clicks", Partition: 0, Records: 90, Committed: 85, Lag: 5,
					ReplayFrom: 10, ReplayHead: 110, ReplayRemaining: 20},
				{Name: "in", Topic: "clicks", Partition: 1, Records: 60, Committed: 60, Lag: -1},
			}},
		{Task: "files", Halted: true, Error: "input gone\x07", Records: 8, Processed: 8,
			Inputs: []host.InputStats{{Name: "input0", Records: 8, Lag: -1}}},
		{Task: "fresh", Paused: true, Records: 5, Inputs: []host.InputStats{{Name: "input0", Records: 5}}},
	}}}
	var b strings.Builder
	writeTopFrame(&b, "127.0.0.1:7070", prev, cur, "a note")
	const want = `wasmstream top: 127.0.0.1:7070 at 09:00:02, rates over 2.0s
a note

    TASK    STATE  VERSION  RECORDS  READ/S  PROCESSED  PROC/S  PENDING  LAG  OUTPUTS  DEAD  RETRIES  FAILURES
  clicks  running        3      150    25.0        130    20.0        4    5        7     1        2         1
   files   HALTED        0        8       -          8       -        0    -        0     0        0         0
   fresh   paused        0        5       -          0       -        0    0        0     0        0         0

    TASK   INPUT  PARTITION  RECORDS  READ/S  COMMITTED  LAG  REPLAY
  clicks      in   clicks/0       90    15.0         85    5  20/100
  clicks      in   clicks/1       60    10.0         60    -       -
   files  input0          -        8       -          0    -       -
   fresh  input0          -        5       -          0    0       -

task files halted: input gone\a

RECENT ERRORS
09:00:06 clicks retry: process key (null): boom
09:00:05 clicks retry: process key k\x1b[2Jxxxxx: boom
09:00:04 clicks retry: process key k\x1b[2Jxxxx: boom
09:00:03 clicks retry: process key k\x1b[2Jxxx: boom
09:00:02 clicks retry: process key k\x1b[2Jxx: boom
`
	if got := b.String(); got != want {
		t.Errorf("frame:\n%s\nwant:\n%s", got, want)
	}
}
