package refdocs

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/narwhal-io/narwhal/agent"
	"github.com/narwhal-io/narwhal/agent/kubediscover"
)

// AgentConfiguration renders docs/agent-configuration.md: every key of
// the agent's YAML file with its type, default and field comment.
func AgentConfiguration(root string) ([]byte, error) {
	cm := newComments(root)
	var b bytes.Buffer
	b.WriteString(generatedHeader)
	b.WriteString(`# narwhal-agent configuration reference

The agent reads one YAML file (` + "`-config FILE`" + `, default
` + "`/etc/narwhal/agent.yaml`" + `; unknown keys are errors); its listener, connection
cap and log level are flags (` + "`narwhal-agent -h`" + `). Intervals and timeouts
are seconds, and 0 takes the default. Invalid values are refused at start
with the field, the value and the rule. With the Helm chart, set any of
these under ` + "`agent.settings`" + ` (charts/narwhal/README.md).

| key | type | default | description |
|---|---|---|---|
`)
	var def agent.Config
	def.Defaults()
	var kdef kubediscover.Config
	kdef.Defaults()
	roles, err := kdef.Roles.Resolve()
	if err != nil {
		return nil, fmt.Errorf("refdocs: agent roles: %w", err)
	}
	kdef.Roles = roles
	var lists []fileOnly
	w := agentWalker{cm: cm, b: &b, lists: &lists}
	if err := w.rows(reflect.ValueOf(def), ""); err != nil {
		return nil, err
	}
	if err := w.rows(reflect.ValueOf(kdef), "kubernetes"); err != nil {
		return nil, err
	}
	for _, l := range lists {
		desc, err := cm.field(l.owner, l.field)
		if err != nil {
			return nil, err
		}
		et := structOf(l.typ)
		td, err := cm.typeDoc(et)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "\n## `%s` (%s)\n\n%s\n\n| field | type | description |\n|---|---|---|\n",
			l.path, typeName(l.typ), strings.TrimSpace(desc+" "+td))
		if err := structTable(&b, cm, et, "yaml", ""); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

type agentWalker struct {
	cm    *comments
	b     *bytes.Buffer
	lists *[]fileOnly
}

// rows writes one row per scalar of the struct v (defaults from v),
// nested structs as dotted keys; lists are collected for their own
// section, and the raw kubernetes node is left to its own walk.
func (w agentWalker) rows(v reflect.Value, prefix string) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() || f.Type == reflect.TypeFor[yaml.Node]() {
			continue
		}
		path := joinPath(prefix, name)
		switch {
		case f.Type.Kind() == reflect.Struct:
			if err := w.rows(v.Field(i), path); err != nil {
				return err
			}
			continue
		case f.Type.Kind() == reflect.Slice && structOf(f.Type) != nil:
			*w.lists = append(*w.lists, fileOnly{path: path, field: f.Name, owner: t, typ: f.Type})
			continue
		}
		desc, err := w.cm.field(t, f.Name)
		if err != nil {
			return err
		}
		def := defaultText(v.Field(i))
		if path == "node" {
			def = "$NODE_NAME, else the host name"
		}
		fmt.Fprintf(w.b, "| `%s` | %s | `%s` | %s |\n", path, typeName(f.Type), def, desc)
	}
	return nil
}

func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// defaultText writes a default as YAML would read it.
func defaultText(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return `""`
		}
		return v.String()
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Slice:
		if v.Len() == 0 {
			return "[]"
		}
	}
	return fmt.Sprint(v.Interface())
}
