// Package sink writes a task's outputs and dead letters as newline-delimited JSON to a file or
// to standard output.
//
// A Writer buffers; Flush makes everything written so far durable against a killed process
// (and, with sync, against a power loss) and is called by the task loop before every checkpoint,
// so that a checkpoint never covers an output the sink has not got (S11: outputs at least once).
// A file Writer holds its lines until Flush (the task checkpoints early once its sinks hold 8 MiB):
// the lines of work a crash makes the host redo never reach the file, so after a SIGKILL only the
// outputs of a checkpoint whose commit was cut short appear twice. A stream Writer (standard
// output) writes out every 64 KiB.
// When a file is opened after a crash that tore its last line, the torn tail is cut off: it was
// never covered by a checkpoint, so the records that produced it run again. A file is written
// in append mode: each flush lands at the end of the file as it is then, so two writers of one
// file (two hosts) interleave whole flushes rather than overwrite each other's lines.
//
// Output lines look like
//
//	{"output":"counts","key":"alice","value":"hello 1","ts":1700000000000}
//
// with "headers" appended when the output has some. A key or value that is not valid UTF-8 is
// written base64-encoded under "key_b64" / "value_b64" instead.
package sink
