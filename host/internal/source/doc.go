// Package source reads the embedded inputs — files and standard input — and turns their lines
// into records.
//
// A Reader owns one goroutine (started by Run, which returns when it has stopped) that reads
// lines, decodes them with a Decoder and sends them in chunks to the task loop. The loop never
// blocks on a source: it pauses a Reader when its queues are full (Pause) and resumes it below
// the low-water mark (Resume); a paused Reader stops after the chunk it is sending.
//
// Offsets are line numbers, counted from 0 at the start of the file. Each record carries the byte
// position just after its line (End), so a checkpoint can resume the file exactly after the last
// committed line. A UTF-8 byte order mark at the very start of the input is dropped (its bytes
// still count in End). Blank lines carry no record; their offsets are skipped. A line that cannot be
// decoded is still delivered, with Err set and the raw line, so that nothing is dropped silently.
package source
