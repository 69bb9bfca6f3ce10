// Package store is the on-disk layout of a wasmstream host's state on Badger.
//
// It knows nothing of wasm, Kafka or configuration files: it stores opaque bytes
// under names that the host chooses. Badger never appears in its exported API.
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
//     skipped.
//
// # Checkpoints and crash safety
//
// [DB.Commit] writes a [Checkpoint]: for each dirty (stream, key) its name
// writes and its new applied mark, and new positions for streams. A checkpoint
// that fits in one Badger transaction (the usual case) is written atomically.
// A larger one is split into several transactions under two rules:
//
//  1. all writes of one (stream, key) and that key's mark go in the same
//     transaction, so every key is always self-consistent;
//  2. positions go in the last transaction, committed after every key
//     transaction has committed.
//
// A crash between transactions is harmless: a key with new state has its new
// mark, so replay skips the records already applied to it; a key with old
// state has its old mark; positions are old, so replay starts where the
// previous checkpoint left off. Replaying from the old position with per-key
// marks therefore yields exactly-once state.
//
// A mark may be dropped (Mark: [DropMark]) once it is below the stream's
// durable Position.Next, because replay never goes back that far.
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
// A [DB] is safe for concurrent use. Commits are serialised, and so are writes
// to the module registry. Badger runs its own
// goroutines (compaction, memtable flushes) between [Open] and [DB.Close].
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
//	task     't' (0x74) | task                                 u32 next stream ID of the task
//	stream   'i' (0x69) | u16 len(task) | task | stream name   u32 stream ID
//	position 'p' (0x70) | u16 len(task) | task | u32 stream    i64 Next | i64 Horizon | i64 Resume
//	mark     'm' (0x6d) | u16 len(task) | task | u32 stream    i64 applied mark
//	                      | key
//	state    's' (0x73) | u16 len(task) | task | u32 stream    value bytes
//	                      | u32 len(key) | key | name
//	module   'b' (0x62) | sha256 (32 bytes) | u32 piece         piece of the module's bytes
//	version  'r' (0x72) | u16 len(task) | task | u64 version   version record (below)
//	active   'a' (0x61) | u16 len(task) | task                 u64 version | i64 since
//	                                                            | u32 len | origin
//
// The last three tables are the module registry ([DB.AddModule]). A module's
// bytes are stored once per content, split in pieces 0, 1, 2, … of at most
// 256 KiB whose concatenation hashes to the key's sha256. A version record's
// value is
//
//	u64 version | sha256 (32 bytes) | i64 size | i64 created (ms since epoch)
//	| u32 ABI version | u32 len | origin
//	| u32 n | n × (u32 len | export name)
//	| u32 n | n × (u32 len | import "module.name")
//
// and the version in the value equals the one in the key. Every version refers
// to stored bytes; bytes no version refers to are deleted by the next
// AddModule. The active version of a task, when it has one, has a record.
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
// then name bytes; the names of one key sort bytewise. Task names are at most
// [MaxTaskLen] bytes and stream names at most [MaxStreamNameLen] bytes; Badger
// limits a key to 65000 bytes, so len(task)+len(key)+len(name) of a state entry
// is at most [MaxStateKeyLen].
//
// The version key is written when a store is created. [Open] refuses a store
// whose version is newer than [FormatVersion] with [ErrFormatTooNew]. Any
// change to the layout of an existing table bumps [FormatVersion]. Adding a
// table is a compatible change and does not: an older reader never looks at
// keys of a tag it does not know. The module registry was added this way, in
// format 1; a host that predates it opening a store that holds one ignores it
// and runs the module file its configuration names.
package store
