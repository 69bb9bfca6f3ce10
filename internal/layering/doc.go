// Package layering holds only a test: the dependency rules of the design (DESIGN §3), checked
// against what the packages really import, pebble-style.
package layering
