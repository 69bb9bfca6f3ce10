package main

import (
	"encoding/json"
	"fmt"

	"github.com/wasmstream/wasmstream/internal/statedecode"
)

// stateDecoder decodes state values by name with the typed layout both SDKs share
// (statedecode: the admin API's ?decode= uses the same rules).
type stateDecoder = statedecode.Decoder

// parseStateDecoder reads --decode flags, "PATTERN=TYPE" each.
func parseStateDecoder(flags []string) (stateDecoder, error) {
	return statedecode.Parse("--decode", flags)
}

// decodedText is a decoded value in the text output: a string escaped as the other columns are.
func decodedText(v any) string {
	if s, ok := v.(string); ok {
		return escape([]byte(s))
	}
	return fmt.Sprint(v)
}

// decodedJSON is a decoded value in the JSON output (a float JSON cannot hold, as a string).
func decodedJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(fmt.Sprint(v))
	}
	return b
}
