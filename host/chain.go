package host

import (
	"fmt"
	"slices"
	"strings"

	"github.com/wasmstream/wasmstream/host/internal/chain"
	"github.com/wasmstream/wasmstream/host/internal/task"
	"github.com/wasmstream/wasmstream/store"
)

// Task chaining: an input of type "task" reads another task's output on this host through a
// chain log in the host's store (package chain). The host opens one log per (task, output)
// that some input reads, before any task starts, and gives the upstream task its logs and the
// downstream task a reader per chained input.

// chains are the host's chain logs.
type chains struct {
	logs    map[string]map[string]*chain.Log // by upstream task, then output name
	readers map[string]map[int]*chain.Reader // by downstream task, then input index
}

// openChains opens the chain log of every (task, output) an input of cfg reads and a reader
// for each such input. cfg is valid.
func openChains(cfg Config, db *store.DB) (*chains, error) {
	c := &chains{logs: map[string]map[string]*chain.Log{}, readers: map[string]map[int]*chain.Reader{}}
	for _, tc := range cfg.Tasks {
		for j, in := range tc.Inputs {
			if in.Type != InputTask {
				continue
			}
			if c.logs[in.Task] == nil {
				c.logs[in.Task] = map[string]*chain.Log{}
			}
			l := c.logs[in.Task][in.Output]
			if l == nil {
				var err error
				if l, err = chain.Open(db, in.Task, in.Output); err != nil {
					return nil, fmt.Errorf("wasmstream: %w", err)
				}
				c.logs[in.Task][in.Output] = l
			}
			if c.readers[tc.Name] == nil {
				c.readers[tc.Name] = map[int]*chain.Reader{}
			}
			c.readers[tc.Name][j] = l.AddReader(tc.Name, in.Name, in.MaxBacklog)
		}
	}
	return c, nil
}

// outputs are the chain logs of task's outputs that other tasks read (nil: none).
func (c *chains) outputs(task string) map[string]*chain.Log {
	if c == nil {
		return nil
	}
	return c.logs[task]
}

// withChained adds to the output names a task may emit to (none: any) those other tasks read:
// a kafka output whose topics map restricts the names must not refuse a chained one.
func withChained(names []string, logs map[string]*chain.Log) []string {
	if len(names) == 0 {
		return names
	}
	for name := range logs {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// input is the task.Input of tc's chained input j.
func (c *chains) input(tc TaskConfig, j int) task.Input {
	return task.Input{Name: tc.Inputs[j].Name, Chain: c.readers[tc.Name][j]}
}

// validateChains checks the inputs of type task: each names another task of the host and one
// of its outputs, no two inputs of a task read the same output, the upstream keeps its state in
// this host's store (no changelog, no exactly-once), and the chains form no cycle.
func validateChains(c Config, bad func(key, format string, args ...any)) {
	byName := map[string]int{}
	for i, t := range c.Tasks {
		if _, dup := byName[t.Name]; !dup {
			byName[t.Name] = i
		}
	}
	upstreams := make([][]int, len(c.Tasks)) // task index → the tasks it reads, in input order
	for i, t := range c.Tasks {
		p := fmt.Sprintf("tasks[%d].", i)
		read := map[[2]string]bool{}
		for j, in := range t.Inputs {
			q := fmt.Sprintf("%sinputs[%d].", p, j)
			if in.Type != InputTask {
				if in.Task != "" {
					bad(q+"task", "applies to inputs of type task only, not %s", in.Type)
				}
				if in.Output != "" {
					bad(q+"output", "applies to inputs of type task only, not %s", in.Type)
				}
				if in.MaxBacklog != 0 {
					bad(q+"max_backlog", "applies to inputs of type task only, not %s", in.Type)
				}
				continue
			}
			for _, f := range []struct{ key, v string }{{"path", in.Path}, {"key_field", in.KeyField}, {"value_field", in.ValueField},
				{"timestamp_field", in.TimestampField}, {"key_separator", in.KeySeparator}, {"group", in.Group}, {"start_at", in.StartAt}} {
				if f.v != "" {
					bad(q+f.key, "does not apply to an input of type task: its records are the other task's outputs, with their keys, values and timestamps")
				}
			}
			if len(in.Topics) > 0 {
				bad(q+"topics", "does not apply to an input of type task")
			}
			if in.MaxBacklog < 0 {
				bad(q+"max_backlog", "must be positive, got %d", in.MaxBacklog)
			}
			if in.Output == "" {
				bad(q+"output", "is required: the output name of task %q this input reads", in.Task)
			} else if !validName(in.Output) {
				bad(q+"output", "%q may hold only letters, digits, '-', '_' and '.'", in.Output)
			}
			up, ok := byName[in.Task]
			switch {
			case in.Task == "":
				bad(q+"task", "is required: the task whose output this input reads")
				continue
			case in.Task == t.Name:
				bad(q+"task", "task %q cannot read its own output", t.Name)
				continue
			case !ok:
				bad(q+"task", "no task is named %q (tasks: %s)", in.Task, taskNames(c))
				continue
			}
			if read[[2]string{in.Task, in.Output}] {
				bad(q+"output", "another input of this task reads output %q of task %q already", in.Output, in.Task)
			}
			read[[2]string{in.Task, in.Output}] = true
			ut := c.Tasks[up]
			if names := ut.Output.Names; len(names) > 0 && in.Output != "" && !slices.Contains(names, in.Output) {
				bad(q+"output", "task %q cannot emit to %q: its output.names are %s", in.Task, in.Output, strings.Join(names, ", "))
			}
			if ut.Delivery == ExactlyOnce || ut.Changelog.Enabled {
				bad(q+"task", "task %q keeps its state in Kafka (delivery exactly_once or changelog.enabled): the outputs of a chained task are committed with its state in this host's store, so it must run without them", in.Task)
			}
			upstreams[i] = append(upstreams[i], up)
		}
	}
	// Cycles: a depth-first search from each task; a task met again on the current path closes
	// one. Each cycle is reported once, at the input of its first task (in configuration order)
	// that reads the next.
	const (
		unseen = iota
		onPath
		finished
	)
	state := make([]int, len(c.Tasks))
	var path []int
	var visit func(i int)
	visit = func(i int) {
		state[i] = onPath
		path = append(path, i)
		for _, up := range upstreams[i] {
			switch state[up] {
			case onPath:
				k := slices.Index(path, up)
				var names []string
				for _, x := range path[k:] {
					names = append(names, c.Tasks[x].Name)
				}
				names = append(names, c.Tasks[up].Name)
				j := slices.IndexFunc(c.Tasks[i].Inputs, func(in InputConfig) bool { return in.Type == InputTask && in.Task == c.Tasks[up].Name })
				bad(fmt.Sprintf("tasks[%d].inputs[%d].task", i, j), "the chain forms a cycle: %s (each task reads the output of the next): a task may read only tasks that do not read it back", strings.Join(names, " ← "))
			case unseen:
				visit(up)
			}
		}
		path = path[:len(path)-1]
		state[i] = finished
	}
	for i := range c.Tasks {
		if state[i] == unseen {
			visit(i)
		}
	}
}

// taskNames lists the tasks' names for a message.
func taskNames(c Config) string {
	var names []string
	for _, t := range c.Tasks {
		names = append(names, fmt.Sprintf("%q", t.Name))
	}
	return strings.Join(names, ", ")
}
