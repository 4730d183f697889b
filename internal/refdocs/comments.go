package refdocs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// Module is the Go module path; a type's package directory is its path
// relative to the module root.
const Module = "github.com/narwhal-io/narwhal"

// comments reads field doc comments from the sources under a module root.
type comments struct {
	root  string
	cache map[string]map[string]string // package path -> "Type.Field" -> text
}

func newComments(root string) *comments {
	return &comments{root: root, cache: map[string]map[string]string{}}
}

// field returns the doc (or line) comment of owner's field, one line.
func (c *comments) field(owner reflect.Type, field string) (string, error) {
	pkg := owner.PkgPath()
	m, ok := c.cache[pkg]
	if !ok {
		var err error
		if m, err = c.load(pkg); err != nil {
			return "", err
		}
		c.cache[pkg] = m
	}
	return m[owner.Name()+"."+field], nil
}

func (c *comments) load(pkg string) (map[string]string, error) {
	rel, ok := strings.CutPrefix(pkg, Module)
	if !ok {
		return nil, nil // outside the module: no comments
	}
	dir := filepath.Join(c.root, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
	fset := token.NewFileSet()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("refdocs: reading %s: %w", dir, err)
	}
	out := map[string]string{}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("refdocs: %w", err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				typeDoc := ts.Doc.Text()
				if typeDoc == "" && len(gd.Specs) == 1 {
					typeDoc = gd.Doc.Text()
				}
				out[ts.Name.Name+"."] = oneLine(typeDoc)
				structFields(ts, oneLine(typeDoc), out)
			}
		}
	}
	return out, nil
}

// structFields records the comment of every field of a struct type spec.
func structFields(ts *ast.TypeSpec, typeDoc string, out map[string]string) {
	st, ok := ts.Type.(*ast.StructType)
	if !ok {
		return
	}
	var undocumented []string
	docs := map[string]string{}
	defer func() {
		// A field without a comment takes the comment of a
		// sibling that names it ("MinPrefillEngines and
		// MinDecodeEngines are the role floors").
		for _, name := range undocumented {
			for _, fl := range st.Fields.List {
				if d := docs[fieldKey(fl)]; d != "" && containsWord(d, name) {
					out[ts.Name.Name+"."+name] = d
					break
				}
			}
			if out[ts.Name.Name+"."+name] == "" && typeDoc != "" && (len(typeDoc) <= 160 || containsWord(typeDoc, name)) {
				out[ts.Name.Name+"."+name] = "(" + typeDoc + ")"
			}
		}
	}()
	for _, fl := range st.Fields.List {
		text := fl.Doc.Text()
		if text == "" {
			text = fl.Comment.Text()
		}
		text = oneLine(text)
		docs[fieldKey(fl)] = text
		for _, id := range fl.Names {
			out[ts.Name.Name+"."+id.Name] = text
			if text == "" {
				undocumented = append(undocumented, id.Name)
			}
		}
		if len(fl.Names) == 0 { // embedded
			if id := embeddedName(fl.Type); id != "" {
				out[ts.Name.Name+"."+id] = text
			}
		}
	}
}

func embeddedName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.StarExpr:
		return embeddedName(t.X)
	}
	return ""
}

// typeDoc returns the doc comment of a type, one line.
func (c *comments) typeDoc(t reflect.Type) (string, error) { return c.field(t, "") }

// oneLine joins a comment's lines, for a table cell.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// FindRoot walks up from dir to the directory holding go.mod.
func FindRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("refdocs: no go.mod above %s", dir)
		}
		d = up
	}
}

func fieldKey(fl *ast.Field) string {
	if len(fl.Names) > 0 {
		return fl.Names[0].Name
	}
	return embeddedName(fl.Type)
}

// containsWord reports whether name appears in text as a whole word.
func containsWord(text, name string) bool {
	for _, w := range strings.FieldsFunc(text, func(r rune) bool {
		return !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		if w == name {
			return true
		}
	}
	return false
}
