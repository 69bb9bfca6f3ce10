// Command wasmstream runs stateful stream tasks written as WebAssembly modules.
//
// # Commands
//
//	wasmstream run     [-c FILE] [--data-dir D] [--cache-dir D] [--checkpoint-interval 1s]
//	                   [--sync-writes] [--log-format text|json] [--log-level info]
//	                   [--admin-addr HOST:PORT] [--admin-token T] [--metrics-addr HOST:PORT]
//	                   [--watch] [--reset-state]
//	wasmstream run     --module M.wasm --input IN.ndjson [--input -] [--output OUT.ndjson]
//	                   [--task NAME] [--format json|text] [--key-field F] [--value-field F]
//	                   [--timestamp-field F] [--key-separator S] [--max-line-bytes N]
//	                   [--continue-stdin] [--task-config JSON]
//	wasmstream check   (the same flags as run, without --watch and --reset-state) [--dev]
//	wasmstream dev     (the same flags as run, without --watch and --reset-state) [--port P]
//	                   [--partitions N] [--dir D]
//	wasmstream dev     --broker-only [--topic T]... [--port P] [--partitions N] [--dir D]
//	wasmstream state   [--task NAME [--key K | --prefix P]] [-c FILE] [--data-dir D]
//	                   [--format text|json] [--decode NAME=TYPE]...
//	                   [--admin-addr HOST:PORT [--admin-token T]]
//	wasmstream init    go|tinygo|rust NAME [--dir D] [--sdk PATH]
//	wasmstream version
//	wasmstream deploy   --task NAME FILE.wasm     (the admin client: see below)
//	wasmstream rollback --task NAME [--to V] [--data-dir D]
//	wasmstream versions --task NAME [--json] [--data-dir D]
//	wasmstream status   [--json]
//	wasmstream top      [--once] [--interval D]
//	wasmstream pause    --task NAME
//	wasmstream resume   --task NAME
//	wasmstream restart  --task NAME [--json]
//	wasmstream reset    --task NAME --to earliest|latest|TIME|P:O,... [--dry-run] [--json] [-c FILE]
//	                    [--data-dir D | --admin-addr HOST:PORT [--admin-token T]]
//	wasmstream reset    --drop-backup TASK.reset-TIME [-c FILE] [--data-dir D]
//
// docs/operating.md ("The commands") lists every command and flag; a test keeps it complete.
//
// run runs the tasks until their inputs are exhausted or SIGINT/SIGTERM asks it to stop (it
// then finishes the batches in flight and commits a last checkpoint; a second signal kills
// the process). A task that fails halts alone and run exits 1 once the others finished; with
// on_task_failure: halt_host the first failure stops every task, and with restart the host
// restarts a halted task by itself after a back-off. check validates the configuration and compiles every module
// without running anything, printing what each imports and exports and its ABI version.
// state prints the state of a stopped host, or lists the tasks that have state. A damaged
// state store fails run and state with exit status 1, a message naming the file and a hint;
// run --reset-state moves the store aside (deleting nothing) and starts with empty state. check
// notes the capabilities a module imports but its task is not granted (http_request without
// grants.http, WASI path_* calls without grants.dirs); deploy prints the same as warnings.
// init scaffolds a task project from templates embedded in the binary: a keyed counter, its
// unit test, a config.yaml over a sample input, a Makefile and a README, into NAME (or --dir),
// refusing a directory that is not empty; the project builds against the wasmstream checkout
// --sdk names, else $WASMSTREAM_SDK, else one holding the binary or the current directory. version
// prints the wasmstream, ABI and Go versions; the wasmstream version is set at build time
// with -ldflags "-X main.version=v1.2.3".
//
// deploy, rollback, versions, status, top, pause, resume and restart (of a halted task) talk to a running host's admin API
// (admin.addr), with --admin-addr and --admin-token, WASMSTREAM_ADMIN_ADDR and
// WASMSTREAM_ADMIN_TOKEN, or the admin section of the configuration file; versions and
// rollback with --data-dir work on a stopped host's data directory instead. run --watch reloads
// a task's module when its file changes, through the same validation and switch as deploy.
// top redraws the status every second as a table (rates from two successive answers, the
// last errors) until Ctrl-C; --once prints one frame without escape codes.
//
// Exit status: 0 success, 1 runtime failure (a task failed, a module was refused, no state),
// 2 usage or configuration error.
//
// # Configuration
//
// The configuration is a YAML file (--config, or wasmstream.yaml in the current directory if
// it exists); config.example.yaml at the repository root documents every key with its
// default. Keys are host.Config's fields in snake_case, plus a log section (format, level)
// for the CLI's logger. A key that does not exist, at any depth, is an error naming it
// ("tasks[0].inputs[0].kye_field: unknown key (did you mean key_field?)"), and so is a value
// of the wrong type or a bad duration; every problem is listed at once, with those
// host.Config.Validate finds. Only tasks[].config, the guest's own settings, is free-form.
//
// The keys data_dir, cache_dir, checkpoint_interval, sync_writes, log.format, log.level,
// admin.addr, admin.token, admin.read_token and metrics.addr can be overridden by environment
// variables named WASMSTREAM_ and the key in upper case with "." as "_" (WASMSTREAM_DATA_DIR,
// WASMSTREAM_LOG_LEVEL), and those, except admin.read_token, by the flags of the same names
// (--data-dir, --log-level). Tasks come only from the file or from --module.
//
// Relative paths in the file (data_dir, cache_dir, module, inputs[].path, output.path,
// dead_letter.path) are relative to the file's directory, and so is the default data
// directory ("data" next to the file); relative paths given by flags or environment
// variables are relative to the current directory.
//
// # Design
//
// main only calls run, which turns signals into a cancelled context and returns the exit
// status; everything else takes its input and output as arguments, so tests run commands in
// process. Viper is used through a local instance to layer the file, the environment and the
// flags for the overridable keys. The file itself is decoded by this package (decode.go),
// against host.Config's fields by reflection: viper lower-cases every key, including the
// guest's, and reports no unknown keys with their full path.
package main
