// Package store is the on-disk layout of a wasmstream host's state on Badger.
//
// It knows nothing of wasm, Kafka or configuration files: it stores opaque bytes
// under names that the host chooses. Badger never appears in its exported API.
//
// # Who it is for
//
// The host (package host and its internal packages) is the only writer. What is
// meant for users is offline inspection of a store no host is writing, for
// tools, tests and post-mortems (the host's own host.OpenState and the
// `wasmstream state` command are built on it):
//
//   - [Open] with [Options].ReadOnly, which shares the directory with other
//     readers, refuses every write with [ErrReadOnly], and refuses a store
//     newer than this binary ([ErrFormatTooNew]) or damaged ([ErrCorrupt]);
//   - the read methods of [DB]: [DB.Tasks], [DB.Streams], [DB.Position],
//     [DB.Get], [DB.Scan], [DB.Keys], [DB.ScanKeys], [DB.Mark], [DB.MarkInfo],
//     [DB.Marks], [DB.Applied], [DB.Timer], [DB.TimerCount], [DB.PendingTimers],
//     [DB.DueTimers], [DB.Snapshot], [DB.Snapshots], [DB.ModuleVersions],
//     [DB.ModuleVersion], [DB.ModuleBytes], [DB.ActiveModule];
//   - [DecodeSnapshot], which reads a record of a task's Kafka changelog topic;
//   - the sentinel errors of errors.go and [FormatVersion].
//
// The rest is the host's write path, exported only because the host lives in
// other packages: [DB.Commit] and its [Checkpoint], [DB.Restore],
// [DB.DropStream], [DB.MoveStream] and [DB.DropTask] (a reset's backup), [DB.SetReplay],
// [DB.StreamID] (which assigns IDs), the module registry's
// writers ([DB.AddModule], [DB.SetActiveModule], [DB.SetModuleStatus]), the
// cost and room functions ([StateWriteCost], [MarkCost], [TimerOpCost],
// [StateKeyRoom], [TimerKeyRoom], [DB.KeyLimits]), [EncodeSnapshot],
// [OuterMarker] and [CheckUnlocked]. Writing a host's store with them while
// the host is stopped bypasses its invariants (positions, marks and the
// changelog must agree): it is not supported. Their signatures follow the
// host's needs and may change in any release; the on-disk layout changes
// only with [FormatVersion].
//
// # Concepts
//
// A host runs one or more tasks, each named by a non-empty string (for example
// "wordcount"). A task reads streams; one stream is one (input, partition),
// named by a string such as "file:input/0" or "kafka:orders/3". [DB.StreamID]
// gives each (task, stream name) a durable uint32 stream ID, assigned on first
// use, monotonic per task (the first is 1; 0 is never assigned) and stable
// across restarts.
//
// For each (task, stream) the store holds:
//
//   - state: for each record key, a map of names to values,
//     state[task][stream][key][name] = value. Keys, names and values are
//     arbitrary bytes and may be empty.
//   - a [Position]: the committed prefix of the stream (Next), the highest
//     offset whose effects may be in state (Horizon) and a source-specific
//     resume token (Resume).
//   - applied marks: for each key, the highest offset of that key whose
//     effects are included in the key's persisted state. On replay a record
//     whose offset is at most its key's mark was already applied and must be
//     skipped. A mark of -1 ([NoneApplied]) is a real mark that says no record
//     offset of the key was applied: the host writes it for a key changed only
//     by work that is not a record (a timer firing, a partition callback), so
//     that every key with state has a mark. With the mark the store keeps the
//     key's state version: the state-format version (a uint32, 0 for unknown
//     or none) of the module that last wrote the key's state, so that a new
//     module can find the keys to migrate ([DB.KeysWithVersionNot]).
//   - an applied set ([DB.Applied], format 4): offsets at or above the
//     position's Next whose effects are in the state, which replay skips
//     like an offset at or below its key's mark (see "Applied sets").
//   - timers: for each key, named timers, timers[task][stream][key][name] =
//     (domain, due, payload). Setting a timer replaces it; deleting one
//     removes it. Each domain (0 or 1, for example event time and processing
//     time; the store does not interpret them) has a due index that
//     [DB.DueTimers] reads in order of due time with one seek, whatever the
//     number of pending timers.
//
// # Checkpoints and crash safety
//
// [DB.Commit] writes a [Checkpoint]: for each dirty (stream, key) its name
// writes, its timer operations and its new applied mark and state version,
// and new positions for streams. A checkpoint
// that fits in one Badger transaction (the usual case) is written atomically.
// A larger one is split into several transactions under two rules:
//
//  1. all writes and timer operations of one (stream, key) and that key's
//     mark go in the same transaction, so every key is always
//     self-consistent: its state, its timers, their due-index entries and
//     its mark are all old or all new (a split checkpoint writes every
//     mark but the unchanged ones: see "Applied marks below the position"
//     and "Unchanged marks");
//  2. positions go in the last transaction, committed after every key
//     transaction has committed; before the first key transaction, each
//     stream's horizon is raised to the new one in a transaction of its own.
//  3. with Checkpoint.Partial, each key transaction but the last also
//     carries, per stream, the furthest partial position at or below the
//     KeyWrites.First of every key of the stream not yet written: every
//     record below it is in a key already written (or one the checkpoint
//     does not change).
//
// A crash between transactions is harmless: a key with new state has its new
// mark, so replay skips the records already applied to it; a key with old
// state has its old mark; positions are old, or a partial position that no
// old key's record precedes, so replay starts at or before the first record
// a key still lacks. Replaying from there with per-key marks therefore
// yields exactly-once state, and a checkpoint cut short still saves the
// replay of what its written keys cover.
//
// A mark may be dropped (Mark: [DropMark], which is math.MinInt64) once it is
// below the stream's durable Position.Next, because replay never goes back
// that far. The key's state version goes with it.
//
// # Applied marks below the position
//
// For the same reason a mark need not be kept up to date once it is below the
// Next committed with it. A key's mark is read only for a replayed record of
// the key, and replay starts at the stream's durable Next: a record at offset
// o ≥ Next is skipped when o ≤ mark. If the key's true mark m (the highest
// offset whose effects are in its stored state) is below Next, no replayed
// record is at or below m, and any stored mark at most m skips none either.
// So Commit, for a key whose KeyWrites.MarkStored says the store already
// holds its mark entry with the same state version, leaves that entry as it
// is instead of writing the new mark when
//
//  1. the checkpoint is written in one transaction (the usual case: a split
//     one writes every mark, since its key transactions commit before the
//     positions, and a crash between them leaves the old Next); and
//  2. the checkpoint commits a position for the key's stream whose Next is
//     above the new mark (a stream whose position does not change keeps
//     writing marks).
//
// A counter's checkpoint then writes one Badger entry per changed key, its
// state, instead of two. Every key with state still has a mark entry, with
// its current state version ([DB.KeysWithVersionNot] finds the keys to
// migrate), and stored marks never decrease. The rule holds for every later
// store too: a durable Next only grows, except where a reset moves the
// stream's state and marks aside first ([DB.MoveStream]) or a restore writes
// each key's mark from its snapshot ([DB.Restore]); a snapshot that
// [DB.Snapshots] reads with the key's change (KeyRef.Written) carries the new
// mark, and one read from the store alone (a changelog record written again)
// carries the stored mark, below the Next of every position record written
// before it. A crash leaves a prefix of Badger's transactions, each of which
// keeps the rule.
//
// So the mark that [DB.Mark], [DB.MarkInfo] and [DB.Marks] return is a lower
// bound of the key's last applied offset: every applied offset of the key
// above it is below the stream's Position.Next, or in its applied set (next
// section). Replay, which skips an offset at or below its key's mark or in the
// set, skips exactly the applied ones either way.
//
// # Applied sets
//
// Under load the rule above hardly applies: a checkpoint's Next is the
// committed prefix, which trails the offsets completed by about a queue's
// depth, so a key's new mark is usually at or above it. So a checkpoint may
// also give, per stream with a new position, an applied set
// ([Checkpoint].Applied, [StreamApplied]): a bitmap of the offsets at or
// above the new Next whose records' effects are in the state it commits —
// every one of them (a host gives the offsets it completed), a few KiB.
// Commit writes it, with the stored set's offsets at or above the new Next
// added, in the transaction of the positions (table 'A'), and, in a checkpoint
// of one transaction, leaves the stored mark entry of a key with MarkStored as
// it is when the key's new mark is in the given set, wherever Next is. Replay
// skips a record whose offset is in the stored set ([DB.Applied], the bits at
// or above the stored Next) or at or below its key's mark.
//
// Why no record is applied twice: every applied offset o of a key at or above
// the durable Next is at or below the key's stored mark, or in the stored
// set. A checkpoint that keeps a key's mark gives a set holding every offset
// the key's new state includes at or above Next (the key's new mark, and so
// all its lower ones, is in the set); a key a checkpoint does not write keeps
// its state, and its offsets in the old set at or above the new Next stay in
// the new one (Commit adds them: after a restart the host's completed offsets
// lack those its replay has not reached yet). Why none is skipped: an offset
// in a set was applied in the state committed with it, and state only moves
// forward.
//
// Every writer of a position keeps or deliberately replaces the set:
//
//   - a split checkpoint writes every mark of the keys it writes and the set
//     only in its last transaction; its partial positions and raised
//     horizons, written before, leave the stored set as it is, which still
//     describes the keys not yet written (the keys written have their marks);
//   - a checkpoint without a set for a stream with a position (its host's
//     completed offsets span more than [MaxAppliedSpan] from Next, a key
//     retried for long holding Next back) keeps the stored set and writes
//     every mark at or above Next, as before sets;
//   - [DB.Restore] keeps the set, and [DB.RestoreApplied] replaces it with the
//     set a changelog's position record carries, in the position's
//     transaction (what it restores is newer than the local copy: a
//     changelog's tail; or the stream was dropped first);
//   - [DB.MoveStream] moves the set with the position (a reset's backup), and
//     [DB.DropStream] deletes it with the position.
//
// A changelog record of a checkpoint carries its key's true mark
// (KeyWrites.Mark), but one written again from the store alone (a key only
// timers changed after it was evicted, a published copy) carries the stored
// mark, which a set may have left low. So a host that writes a changelog
// writes, with each position record, the set the store holds with that
// position ([DB.AppliedAfter] for a checkpoint's, before it commits; [DB.Applied]
// for the stored one), and a restore writes it with the position
// ([DB.RestoreApplied]): the restored keys' marks are each at or above the
// store's, and at or below the key's true mark, with the same set. Where a
// host replays a changelog's tail over a local copy a run without the
// changelog changed (the changelog turned off, then on again), the changelog's
// set replaces the copy's: [DB.SettleApplied] first raises the stored marks of
// the keys whose records the copy's set holds to their true marks (the host
// reads the records' keys from its input) and deletes it.
//
// # Unchanged marks
//
// A key dirtied only by work that is not a record of its stream (a timer
// firing, a tick, a partition callback) keeps its mark, and usually its
// state version: its mark entry would be written again byte for byte. So
// Commit, for a key whose KeyWrites.MarkUnchanged says the store already holds
// the entry the checkpoint would write (the same mark and state version),
// writes no mark entry, in every checkpoint, one transaction or split, with
// or without a position for the key's stream. Leaving an entry as it is
// when it is what would be written changes nothing a crash could expose.
// The host sets MarkUnchanged only when it knows what the store holds: the
// key's load read the entry, or an earlier checkpoint of the key committed
// it (never one that failed: the host halts; nor one the host undid: an
// aborted exactly-once transaction, a reset, a restore or a DropStream make
// the host forget the stream's keys and read them again). A key that never
// had a mark gets its NoneApplied mark written once, the first time it
// changes, so that every key with state keeps a mark entry.
//
// The earlier checkpoint may have left a lower mark below its Next, or in its
// applied set, under the rules above; MarkUnchanged holds then too: the
// checkpoint's mark, equal to the new one, was below a Next that is durable
// now and only grows, so no replayed record is at or below it, or the key's
// offsets above that Next are in the set, whose offsets at or above the
// durable Next every later set keeps; and the stored mark, lower still,
// skips none it must not. Stored marks never decrease, and a version change
// always writes the entry, so [DB.KeysWithVersionNot] still finds every key
// to migrate.
//
// # Snapshots and restore
//
// A changelog carries the whole state of the keys a checkpoint changed, so
// that another host can rebuild a partition from it. After a checkpoint has
// committed, [DB.Snapshot] reads one key's [KeySnapshot] — its names and
// values, its timers, its applied mark and state version — from one Badger
// read transaction, so that all its parts come from the same commit;
// [DB.Snapshots] reads many keys' from one transaction, walking them in store
// order (a checkpoint's changed keys, for the changelog); a key whose change
// is its whole state (KeyWrites.Whole: the state cache read the key in and
// the checkpoint writes every name it has) has none of its state entries
// read, only its timers: applying the change gives its names.
// [EncodeSnapshot] and [DecodeSnapshot] turn a snapshot into a compact
// versioned byte string for the changelog record's value (layout below);
// DecodeSnapshot rejects malformed input with [ErrCorrupt].
//
// [DB.Restore] writes snapshots into a stream, replacing each key's whole
// state: names and timers absent from the snapshot are deleted (timers with
// their due-index entries), the snapshot's are written, and the mark and state
// version are set, or the mark deleted if the snapshot has none. It writes
// like Commit: one transaction when everything fits, otherwise several split
// between keys, so each key is replaced atomically, and the stream's new
// position, if given, goes in the last one after the stream's horizon has been
// raised first; the stream's applied set stays. Applying a snapshot twice is harmless, so an interrupted
// Restore is finished by running it again; when a key appears twice in one
// call, the later snapshot wins. Restore lowers the due floors below the
// timers it writes as Commit does, so DueTimers finds them. [DB.DropStream]
// deletes everything of one (task, stream) — position and applied set, timers
// and due index, state, marks — in as many transactions as it needs, keeping the stream's
// ID: a host that cannot trust its local copy of a partition drops it and
// restores it from the changelog. Restore and DropStream exclude every
// Commit, of any stream (see "Concurrency").
//
// An encoded snapshot (format version 1) is
//
//	u8 version (1) | u8 flags (bit 0: has a mark; the others 0)
//	[ varint mark | uvarint state version ]         only with a mark
//	uvarint len(key) | key
//	uvarint n | n × (uvarint len(name) | name | uvarint len(value) | value)
//	uvarint n | n × (uvarint len(name) | name | u8 domain | varint due
//	                 | uvarint len(payload) | payload)
//
// where uvarint and varint are those of encoding/binary (base-128 groups,
// least significant first; varint zigzag-encodes the sign, so a mark of -1 is
// one byte). Names are strictly ascending; timer names are distinct, in any
// order. A snapshot of a key with one 8-byte value under a 5-byte name, a
// 16-byte key and a mark below 64 takes 38 bytes. A change to this layout gets
// a new version byte; DecodeSnapshot refuses versions it does not know.
//
// # Module registry
//
// For each task the store also keeps the module versions deployed for it
// ([ModuleVersion]: number, hash, size, time, ABI version, exports, imports,
// origin) and which one is active ([ActiveModule]), so that a restarted host
// runs the version that was running. [DB.AddModule] stores a module's bytes
// content-addressed (SHA-256) and numbers the version; it keeps the newest N
// versions of the task (and always the active one) for rollback.
// [DB.SetActiveModule] switches the active version.
//
// # Concurrency
//
// A [DB] is safe for concurrent use. Commits of disjoint streams run
// concurrently: each builds its Badger transactions and hands them to
// Badger's write goroutine, which applies what queued together in one write.
// Commits that name a stream in common (a key's stream, a position's; or that
// both append to one task's chain logs) run one after the other, in the order
// they took the stream. Restore, DropStream and MoveStream run alone: they
// wait for the Commits in progress, and Commits wait for them (locks.go).
// Each Commit's last transaction carries the next checkpoint number and is
// handed to Badger in the order of the numbers, so that the store's number
// is that of the last checkpoint Badger applied, and a crash, which leaves a
// prefix of Badger's writes, never leaves a later number without the earlier
// checkpoints. Writes to the module registry are serialised with each other.
// Badger runs its own goroutines (compaction, memtable
// flushes) between [Open] and [DB.Close]. The only state a DB keeps in memory
// besides Badger's is, for each due index, where its live entries begin,
// which [DB.DueTimers] learns and Commit and Restore lower; it is lost at Close and
// learnt again after Open.
//
// # On-disk layout
//
// Every Badger key begins with a one-byte table tag. Integers are big-endian
// and fixed-width, so keys sort by number. A variable-length part that is
// followed by another part is length-prefixed, so a prefix scan never mixes
// task "a" with task "ab", or key "a" with key "ab". Signed integers (i64) are
// stored as the two's-complement bits of the value, big-endian.
//
//	table    key bytes, in order                              value
//	-----    -------------------------------------------      -------------------------------
//	version  'v' (0x76)                                        u32 format version
//	ckpt     'c' (0x63)                                        u64 number of the last checkpoint
//	task     't' (0x74) | task                                 u32 next stream ID of the task
//	stream   'i' (0x69) | u16 len(task) | task | stream name   u32 stream ID
//	position 'p' (0x70) | u16 len(task) | task | u32 stream    i64 Next | i64 Horizon | i64 Resume
//	                                                            | i64 Watermark (format 2; absent: -1)
//	                                                            | 16-byte TopicID (absent: zero;
//	                                                              added without a format change:
//	                                                              a host older than it refuses
//	                                                              the 48-byte value as corrupt)
//	                                                            | u64 changelog Epoch (written
//	                                                              only when not 0, likewise,
//	                                                              or with a LeaderEpoch)
//	                                                            | u32 LeaderEpoch (format 5:
//	                                                              the Kafka leader epoch + 1,
//	                                                              written only when known)
//	applied  'A' (0x41) | u16 len(task) | task | u32 stream    i64 base | n × u64 bits
//	                                                            (format 4: bit j of word i,
//	                                                            least significant first, is
//	                                                            offset base + 64i + j)
//	mark     'm' (0x6d) | u16 len(task) | task | u32 stream    i64 applied mark
//	                      | key                                 | u32 state version
//	state    's' (0x73) | u16 len(task) | task | u32 stream    value bytes
//	                      | u32 len(key) | key | name
//	timer    'T' (0x54) | u16 len(task) | task | u32 stream    u8 domain | i64 due
//	                      | u32 len(key) | key | name            | payload bytes
//	due      'D' (0x44) | u16 len(task) | task | u32 stream    empty
//	                      | u8 domain | u64 due ^ 1<<63
//	                      | u32 len(key) | key | name
//	module   'b' (0x62) | sha256 (32 bytes) | u32 piece         piece of the module's bytes
//	version  'r' (0x72) | u16 len(task) | task | u64 version   version record (below)
//	active   'a' (0x61) | u16 len(task) | task                 u64 version | i64 since
//	                                                            | u32 len | origin
//	replay   'R' (0x52) | u16 len(task) | task | u32 stream    i64 From | i64 Head | i64 At
//
// In the due index, due is stored with its sign bit flipped, so that due
// times sort as signed numbers (negative times first). Every timer has
// exactly one due-index entry, of its domain and due, and every entry has a
// timer: replacing a timer reads its old value in the commit's transaction
// and deletes its old entry. Within one (task, stream, domain), entries sort
// by due, then key (by length, then bytes), then name.
//
// A mark value written by format 1 is the 8-byte mark alone; it reads as
// state version 0.
//
// The module, version and active tables are the module registry
// ([DB.AddModule]). A module's bytes are stored once per content, split in
// pieces 0, 1, 2, … of at most 256 KiB whose concatenation hashes to the
// key's sha256. A version record's value is
//
//	u64 version | sha256 (32 bytes) | i64 size | i64 created (ms since epoch)
//	| u32 ABI version | u32 len | origin
//	| u32 n | n × (u32 len | export name)
//	| u32 n | n × (u32 len | import "module.name")
//	[ | u32 len | state ("good" or "bad") | i64 at (ms) | u32 len | reason ]
//
// where the bracketed status tail (format 3) is present once a host recorded
// how the version ran ([DB.SetModuleStatus]), and the version in the value equals the one in the key. Every version refers
// to stored bytes; bytes no version refers to are deleted by the next
// AddModule. The active version of a task, when it has one, has a record.
//
// The chain table (added without a format change, chain.go) holds each task's
// chain logs: 'L' | u16 len(task) | task | u16 len(output) | output | u64
// offset → an opaque entry. [Checkpoint].Chain appends entries in the
// checkpoint's one transaction (a checkpoint with entries is never split),
// [DB.ChainRead] reads them in order, [DB.ChainTrim] deletes a prefix but never
// the last entry, whose offset + 1 [DB.ChainHead] returns as the next.
//
// For example, the state entry of task "wc", stream 1, key "ab", name "n" is
// the Badger key
//
//	73 00 02 77 63 00 00 00 01 00 00 00 02 61 62 6e
//	s  len=2 w  c  stream=1    len(key)=2  a  b  n
//
// and the position of the same stream is the key 70 00 02 77 63 00 00 00 01
// with a 24-byte value.
//
// Within one (task, stream), state entries sort by key length, then key bytes,
// then name bytes; the names of one key sort bytewise ([DB.Keys] and
// [DB.ScanKeys] return keys in this order). Task names are at most
// [MaxTaskLen] bytes and stream names at most [MaxStreamNameLen] bytes; Badger
// limits a key to 65000 bytes, so len(task)+len(key)+len(name) of a state entry
// is at most [MaxStateKeyLen], and that of a timer at most [MaxTimerKeyLen].
//
// The version key is written when a store is created. [Open] refuses a store
// whose version is newer than [FormatVersion] with [ErrFormatTooNew]. Any
// change to the layout of an existing table bumps [FormatVersion]. Adding a
// table is a compatible change and does not: an older reader never looks at
// keys of a tag it does not know. The module registry was added this way, in
// format 1; a host that predates it opening a store that holds one ignores it
// and runs the module file its configuration names.
//
// Format 2 added the state version to the mark value, and
// the timer and due tables. A read-write [Open] of a format-1 store upgrades
// it in place by rewriting the version key alone, since this version reads
// 8-byte marks as they are; a read-only Open reads it without upgrading.
// From then on a binary that knows only format 1 refuses the store with
// ErrFormatTooNew, as it must: it could not read the 12-byte marks.
//
// The replay table (replay.go, added without a format change) keeps the replay a reset
// started on a stream ([DB.SetReplay], [DB.ReplayOf]): where it restarted, the head it must
// reach, when; the host deletes it once the stream's position reaches the head.
//
// Format 3 added the optional status tail to a version
// record. A format-1 or format-2 store is upgraded the same way, by rewriting
// the version key alone: its version records have no tail, which reads as
// "nothing known". A binary that knows only format 2 then refuses the store
// with ErrFormatTooNew instead of failing on a version record it cannot
// decode.
//
// Format 4 added the applied table. A new table is
// compatible for a reader, but not here: a binary that ignores the applied
// sets would replay, and apply again, the records a set covers whose keys'
// marks are older. So the format changes, and a binary that knows only
// format 3 refuses the store with ErrFormatTooNew. An older store is upgraded
// by rewriting the version key alone: its streams have no set, and every
// key's mark covers its applied offsets at or above Next, as the sets' rule
// requires.
//
// Format 5 (the current one) added the leader epoch to a position's value: the
// Kafka partition leader epoch of the last record below Next, plus one (so
// that 0, and a value written before it, reads as unknown: [LeaderEpoch]). A
// binary that knows only format 4 would refuse the 60-byte value as corrupt,
// so the format changes and such a binary refuses the store with
// ErrFormatTooNew instead. An older store is upgraded by rewriting the version
// key alone: its positions read with an unknown leader epoch, which the host
// resumes as before (without asking the broker where its log diverged).
//
// # Damage
//
// Badger, given a damaged directory, loses data quietly or crashes: without a
// MANIFEST it starts afresh and deletes the tables the new one does not list,
// it skips a table whose checksum fails, and it panics, in a goroutine of its
// own, on a truncated table. So [Open] verifies the files first (checkFiles):
// the MANIFEST must parse, every table it lists must exist, and every block of
// every table must match its checksum, which reads the whole store once. An
// empty log file, left by a crash between Badger creating it and sizing it,
// makes Badger refuse the store; it never held a record, and Open removes it
// (checkFiles).
// Beside the database, [MarkerFile] records that the directory holds a store
// that has had data; a directory with the marker whose database opens without
// its version key is a lost MANIFEST or replaced files, not a new store; the
// same marker beside the directory ([OuterMarker]) says so when the directory
// itself was deleted or emptied. Each
// such problem, and any panic of Badger's in Open or a read, is an
// [ErrCorrupt] that names the file or directory. Badger writes through
// memory-mapped files, where a full disk raises SIGBUS instead of an error,
// so a writer checks the free space ([Options.MinFreeBytes]) at Open and
// before every transaction and returns [ErrDiskFull] below it.
//
// Damage inside Badger's write-ahead log is the one kind Badger's own replay
// hides: it stops at the first entry whose checksum fails, as at the torn
// tail of a crash, and every later checkpoint is gone. So Commit numbers its
// checkpoints, in Badger (table 'c') and, once committed, in [JournalFile]
// beside it; an Open that finds the journal ahead of Badger logs at error
// level how many checkpoints were lost and where each stream resumes, and
// [DB.Rollback] reports it (journal.go).
package store
