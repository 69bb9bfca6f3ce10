package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/host/devkafka"
)

// newDevCommand builds `wasmstream dev`: the tasks against an embedded development broker, or
// the broker alone.
func newDevCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	cf := configFlags{embedded: true}
	var brokerOnly bool
	var port, partitions int
	var dir string
	var topics []string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the tasks against an embedded Kafka broker (or run the broker alone)",
		Long: `Dev starts an in-process Kafka-protocol broker on a loopback port (9092 by default), creates
every topic the configuration names (4 partitions each), and runs the tasks against it, exactly
as run does with kafka.brokers pointing there. Its records and group offsets are kept in a
directory (kafka.embedded.dir, default <data_dir>/kafka), so they survive a restart. Any Kafka
client can talk to it meanwhile, e.g. kcat -b 127.0.0.1:9092.

With --broker-only it starts just the broker (with the topics given by --topic) and serves
until SIGINT or SIGTERM.

` + configHelp,
		Example: `  wasmstream dev -c kafka.yaml
  wasmstream dev --broker-only --topic words --topic counts --dir data/kafka
  kcat -b 127.0.0.1:9092 -P -t words -K: <<< 'alice:hello world'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !brokerOnly && cmd.Flags().Changed("topic") {
				// Without --broker-only, dev creates the topics the configuration names: a
				// --topic would be ignored.
				return usageError("--topic needs --broker-only: with a configuration, dev creates every topic the configuration names")
			}
			if brokerOnly {
				if port < 0 || port > 65535 {
					return usageError("--port: must be a port from 1 to 65535 (0: a free one), got %d", port)
				}
				if partitions < 0 {
					return usageError("--partitions: must be positive, got %d", partitions)
				}
				for _, tp := range topics {
					if err := host.CheckTopicName(tp); err != nil {
						return usageError("--topic: %v", err)
					}
				}
				return runBroker(cmd.Context(), stdout, devkafka.Config{Dir: dir, Port: port, Partitions: partitions, Topics: topics})
			}
			s, err := cf.load(cmd.Flags())
			if err != nil {
				return exitFor(err)
			}
			e := &s.Host.Kafka.Embedded
			e.Enable = true
			if cmd.Flags().Changed("port") {
				e.Port = port
			}
			if cmd.Flags().Changed("partitions") {
				e.Partitions = partitions
			}
			if cmd.Flags().Changed("dir") {
				e.Dir = dir
			}
			return runHost(cmd.Context(), s, false, stdin, stdout, stderr)
		},
	}
	addConfigFlags(cmd.Flags(), &cf)
	cmd.Flags().BoolVar(&brokerOnly, "broker-only", false, "run only the broker, until interrupted")
	cmd.Flags().IntVar(&port, "port", 9092, "the broker's loopback port")
	cmd.Flags().IntVar(&partitions, "partitions", 4, "partitions of the topics it creates")
	cmd.Flags().StringVar(&dir, "dir", "data/kafka", "where the broker keeps its data")
	cmd.Flags().StringSliceVar(&topics, "topic", nil, "a topic to create (with --broker-only; repeatable)")
	return cmd
}

// runBroker is dev --broker-only: it serves the embedded broker of cfg until ctx ends.
func runBroker(ctx context.Context, stdout io.Writer, cfg devkafka.Config) error {
	b, err := devkafka.Start(cfg)
	if err != nil {
		return failure(err)
	}
	// One line, which scripts wait for; the crash note goes on its end.
	var crashed string
	if n := b.CrashAborted(); n > 0 {
		crashed = fmt.Sprintf("; aborted %d transaction(s) that a kill of its last run left open", n)
	}
	if n := b.CrashCommitted(); n > 0 {
		crashed += fmt.Sprintf("; committed %d transaction(s) that a kill of its last run left half committed", n)
	}
	fmt.Fprintf(stdout, "broker listening on %v (data in %s); topics %v%s\n", b.Addrs(), cfg.Dir, cfg.Topics, crashed)
	<-ctx.Done()
	b.Close()
	return nil
}
