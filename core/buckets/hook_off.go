//go:build !narwhal_hooks

package buckets

// testHooks is false in every normal build: the hook calls below it
// compile to nothing, and Record's fast path carries no extra branch.
// Build with -tags narwhal_hooks for the tests that stop a writer between
// two of its steps (hook_test.go).
const testHooks = false

func fastPathHook() {}
