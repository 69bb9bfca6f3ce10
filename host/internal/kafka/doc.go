// Package kafka is wasmstream's only door to Apache Kafka (through franz-go): a consumer-group
// source, a producer for outputs and dead letters, state changelogs, and the embedded development
// broker.
//
// The Consumer runs one goroutine (Run) that polls with rebalances blocked while a poll's
// records are being handed over (franz-go's BlockRebalanceOnPoll), so every record of a poll is
// in the task loop's hands before any rebalance callback runs. The callbacks call the Handler
// synchronously: Assigned decides where each new partition starts (the local checkpoint wins
// over the group's committed offset when it is further along), Revoked returns only after the
// task drained and checkpointed the partitions and gives the offsets to commit, which the
// callback commits synchronously before the rebalance goes on; Lost drops the partitions
// without committing. The Handler must not call back into the Consumer's blocking methods.
//
// The consumer reads its topics' metadata every DefaultMetadataMaxAge (not franz-go's 5 minutes),
// so that partitions added to an input topic are rebalanced in soon; with StartAt "latest" such
// a partition, added after the first assignment and without a committed offset, starts at its
// beginning (addedFromStart).
//
// A transactional consumer (ConsumerConfig.Txn) pauses its topics while its group joins and
// syncs (join.go): franz-go holds a transaction's offset commit for as long, so a transaction
// that had polled records then could outlast its timeout and get the producer fenced.
//
// A consumer keeps control records (transaction markers) and tells the task, as
// Fetch.ControlEnd, where the markers after a fetch's last record end, so that the committed
// offset can pass them (a transactional consumer's client commits past them too, and its task's
// position does). A bounded run ends each partition at its last stable offset.
//
// When the log moves under a position: one below the log start (retention, DeleteRecords)
// resumes at the log start, whatever StartAt says (the client's reset offset), and each Fetch
// carries the partition's log start (Fetch.LogStart; -1 for a topic compacted alone, whose log
// start compaction moves) so that the task can count what it lost, as does the log start listed
// at each assignment (Consumer.LogStart), for a partition no fetch follows; a log that lost records below
// the position (kgo.ErrDataLoss: truncated, an unclean leader election) fails Run, naming the
// reset to run, unless the cluster, asked again, says the log still holds every offset below
// where the task read (logHolds: a fetch answered OFFSET_OUT_OF_RANGE at an offset the partition
// holds, which franz-go moves to the log start): the partition then goes back to the offset the
// task reads next (an abort's rewind included), keeping its real committed offset for a later
// rewind. A fetch answered UNKNOWN_SERVER_ERROR is fetched again (serverError), for at most
// ConsumerConfig.UnreachableTimeout in a row. Each Record carries its leader epoch; Handler.Assigned returns, and Commit and
// Revoked's offsets carry, the leader epoch of the record before each offset (EpochOffset), so
// that a consumer starting there — from the task's position or the group's committed offset —
// has the leader say where its log for that epoch ends (OffsetForLeaderEpoch): a log truncated
// and grown back past the position while no member read it is a kgo.ErrDataLoss too. The
// changelog's position records carry it in a header (LeaderEpochHeader, RecordMeta).
//
// The Producer produces asynchronously; Flush waits until every record produced so far is
// acknowledged, at most ProducerConfig.DeliveryTimeout from when the first of them was produced
// (never from record timestamps, which are event time), and returns the first delivery error.
// A failure is sticky: every later Flush returns it (a transactional producer's until its
// transaction aborts), so no checkpoint ever covers an output the brokers have not got; a Flush
// that timed out names the topics with records unacknowledged. Every client that produces or
// consumes a task's records refreshes its metadata at most every RetryMetadataMinAge, which
// paces its retries of what a broker refused with a retriable error.
// Consumer.EndTxn counts a transaction whose offset commit the cluster refused with a retriable
// error, and which the client then aborted, as aborted (TxnOutcome.Cause), not as a failure.
// TopicLimits.Learn reads the max.message.bytes of the topics a task produces to (when the task
// starts); the producers, a transactional consumer's client included, cap each topic's batches
// at it (ProducerConfig.Limits), and the host fails an emit over it in the guest.
//
// Run rides out a cluster it cannot reach: fetch failures for want of a connection are left to
// the client's retries, ConsumerConfig.Reachable is told when the cluster stops and starts
// answering (a ping ends an outage), and Run fails once an outage lasted
// ConsumerConfig.UnreachableTimeout. Assigned is given each new partition's end offset and its
// topic's id, so that the task can tell a recreated topic (another id, or its end below the task's
// position) from the old one. With
// ConsumerConfig.InstanceID the consumer is a static group member; one fenced by another member
// with the same instance id fails Run saying so (two hosts with one host_id) and does not leave
// the group by that id. A member the coordinator no longer knows (UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION) has had its partitions dropped through Handler.Lost and joins again: Run
// goes on.
//
// Changelogs back up task state so that it follows its partition to another host: a compacted
// topic whose partition p holds the state changes of input partition p (EnsureChangelog creates
// or checks it, and adds the partitions it lacks once partitions were added to the inputs). A ChangelogWriter appends changes to explicit partitions; its Flush gives each
// partition's next offset, which the checkpoint records. ReadChangelog restores a partition from
// an offset up to the committed end (read_committed) taken when it starts. WriteEpoch stamps a
// record with its owner's epoch (the EpochHeader header) and ReadChangelog hands each record's
// epoch over (0 without the header); Gaps names the partitions where another writer's records
// came between this writer's, for the task's check that no later owner took its partitions over.
// Consumer.Generation is the group generation a partition was assigned in, from which the task
// derives its epoch.
//
// StartDevBroker runs kfake on a directory. A broker killed with a transaction open comes back
// with that transaction aborted in kfake's index but without an abort marker, which would hide
// from read_committed readers what the same producer commits next; before letting clients in
// (its listener hands out only in-memory connections until then) the start scans the batch
// headers of every partition and writes an abort marker for each such transaction
// (devrecover.go).
package kafka
