package service

import (
	"reflect"
	"strings"
)

// joinBoolValues lets a boolean setting take its value as the next
// argument, as every other setting does: `--auth.allow_unauthenticated
// true` becomes `--auth.allow_unauthenticated=true` (Go's flag package
// would read "true" as a stray argument). Only the literals true and false
// are joined, so `--agents.required --listen :0` keeps meaning true.
func joinBoolValues(args []string, leaves []setting) []string {
	isBool := map[string]bool{}
	for _, s := range leaves {
		if s.v.Kind() == reflect.Bool {
			isBool[s.path] = true
		}
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name := strings.TrimLeft(a, "-")
		if strings.HasPrefix(a, "-") && !strings.Contains(name, "=") && isBool[name] && i+1 < len(args) {
			if v := args[i+1]; v == "true" || v == "false" {
				out = append(out, a+"="+v)
				i++
				continue
			}
		}
		out = append(out, a)
	}
	return out
}
