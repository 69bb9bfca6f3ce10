module github.com/wasmstream/wasmstream

go 1.26

require github.com/wasmstream/wasmstream/abi v0.0.0

replace github.com/wasmstream/wasmstream/abi => ./abi
