//go:build narwhal_hooks

package buckets

// testHooks is true only under -tags narwhal_hooks (hook_test.go).
const testHooks = true

// onFastPath, when set, runs inside Record's fast path after the shape's
// keys were read and before its count word is: where a drain of the
// bucket by another goroutine can fall.
var onFastPath func()

func fastPathHook() {
	if f := onFastPath; f != nil {
		f()
	}
}
