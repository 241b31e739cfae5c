package main

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/leasebridge/leasebridge/routes"
)

// routesSource is the routes package as seen from this directory; its field
// comments become the descriptions of docs/configuration.md.
const routesSource = "../../routes"

// module is the import path prefix of this repository's packages.
const module = "github.com/leasebridge/leasebridge/"

// fieldDocs maps "Type.Field" to the field's doc comment in routes.
func fieldDocs() (map[string]string, map[string]string, error) {
	return packageDocs(routesSource, module+"routes")
}

// packageDocs maps "Type.Field" to the field's doc comment, and "Type" to
// the type's, in the package in dir.
func packageDocs(dir, importPath string) (map[string]string, map[string]string, error) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, nil, err
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return nil, nil, fmt.Errorf("parse %s: %w", p, err)
		}
		files = append(files, f)
	}
	d, err := doc.NewFromFiles(fset, files, importPath, doc.AllDecls)
	if err != nil {
		return nil, nil, err
	}
	fields, types := map[string]string{}, map[string]string{}
	for _, t := range d.Types {
		types[t.Name] = oneLine(t.Doc)
		for _, spec := range t.Decl.Specs {
			st, ok := spec.(*ast.TypeSpec).Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, f := range st.Fields.List {
				text := f.Doc.Text()
				if text == "" {
					text = f.Comment.Text()
				}
				for _, n := range f.Names {
					fields[t.Name+"."+n.Name] = oneLine(text)
				}
				if len(f.Names) == 0 { // embedded
					if id, ok := f.Type.(*ast.Ident); ok {
						fields[t.Name+"."+id.Name] = oneLine(text)
					}
				}
			}
		}
	}
	return fields, types, nil
}

// withoutTypeName drops the Go type name a type's doc comment starts
// with ("LeaseStore is the etcd cluster ..."): the page's readers know
// the YAML keys, and the section title already names the block.
func withoutTypeName(doc, name string) string {
	rest, ok := strings.CutPrefix(doc, name+" is ")
	if !ok || rest == "" {
		return doc
	}
	return strings.ToUpper(rest[:1]) + rest[1:]
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

var (
	durationType     = reflect.TypeOf(routes.Duration(0))
	brokerHealthType = reflect.TypeOf(routes.BrokerHealth{})
)

func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t == brokerHealthType:
		return "`off` or duration"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.Slice:
		return "list of " + typeName(t.Elem())
	case reflect.Map:
		return "map of name to " + typeName(t.Elem())
	case reflect.Struct:
		return strings.ToLower(t.Name())
	case reflect.Float64:
		return "number"
	case reflect.Int:
		return "integer"
	}
	return t.Kind().String()
}

type section struct {
	title string
	path  string
	t     reflect.Type
}

// configReference renders one table per configuration block, with every
// key's type, default and documentation, then one section per device kind.
func configReference() (string, error) {
	fields, types, err := fieldDocs()
	if err != nil {
		return "", err
	}
	defaults := routes.DefaultValues()
	var b strings.Builder
	queue := []section{{"Top level", "", reflect.TypeOf(routes.Config{})}}
	seen := map[reflect.Type]bool{}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if seen[s.t] {
			continue
		}
		seen[s.t] = true
		fmt.Fprintf(&b, "## %s\n\n", s.title)
		if d := types[s.t.Name()]; d != "" {
			fmt.Fprintf(&b, "%s\n\n", withoutTypeName(d, s.t.Name()))
		}
		queue = append(queue, table(&b, s, fields, defaults)...)
	}
	kinds, err := kindSections(defaults, fields)
	if err != nil {
		return "", err
	}
	return b.String() + kinds, nil
}

// table writes the key table of section s and returns the sections of
// the structs below it.
func table(b *strings.Builder, s section, fields, defaults map[string]string) []section {
	var queue []section
	b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
	var rows func(t reflect.Type, owner string)
	rows = func(t reflect.Type, owner string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if opts == "inline" {
				rows(f.Type, f.Type.Name())
				continue
			}
			path := name
			if s.path != "" {
				path = s.path + "." + name
			}
			def := defaults[path]
			if def == "" {
				def = "-"
			} else {
				def = "`" + def + "`"
			}
			// Go doc comments start with the field name; the page
			// names the key instead.
			desc := fields[owner+"."+f.Name]
			if rest, ok := strings.CutPrefix(desc, f.Name+" "); ok {
				desc = "`" + name + "` " + rest
			} else if rest, ok := strings.CutPrefix(desc, f.Name+", "); ok {
				desc = "`" + name + "`, " + rest
			}
			fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", name, typeName(f.Type), def, strings.ReplaceAll(desc, "|", "\\|"))
			inner := f.Type
			for inner.Kind() == reflect.Pointer || inner.Kind() == reflect.Slice || inner.Kind() == reflect.Map {
				suffix := ".*"
				if inner.Kind() == reflect.Slice {
					suffix = "[*]"
				}
				if inner.Kind() != reflect.Pointer {
					path += suffix
				}
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct && inner != durationType && inner != brokerHealthType {
				queue = append(queue, section{"`" + path + "`", path, inner})
			}
		}
	}
	rows(s.t, s.t.Name())
	b.WriteString("\n")
	return queue
}

// kindSections lists the registered device kinds with the keys each adds
// to `devices.*`, to its groups and to its tags, and a key table for each
// settings struct of a kind, documented from the comments of its package
// (and of routes, routesFields, for a routes type it inlines); kinds
// sharing one struct share its table.
func kindSections(defaults, routesFields map[string]string) (string, error) {
	var b strings.Builder
	b.WriteString("## Device kinds\n\n")
	b.WriteString("A device's `kind` decides which keys beyond the common ones (`kind`, `address`, the timeouts, `groups`) it may carry, on the device, its groups and its tags; a key of another kind is an error naming the kinds it belongs to.\n\n")
	b.WriteString("| kind | device keys | group keys | tag keys | meaning |\n|---|---|---|---|---|\n")
	type own struct {
		path  string
		t     reflect.Type
		kinds []string
	}
	var owns []*own
	add := func(kind, path string, mk func() any) []string {
		if mk == nil {
			return nil
		}
		t := reflect.TypeOf(mk()).Elem()
		i := slices.IndexFunc(owns, func(o *own) bool { return o.t == t && o.path == path })
		if i < 0 {
			owns = append(owns, &own{path: path, t: t})
			i = len(owns) - 1
		}
		owns[i].kinds = append(owns[i].kinds, kind)
		return yamlKeys(t)
	}
	for _, name := range routes.Kinds() {
		k := routes.LookupKind(name)
		keys := add(name, "devices.*", k.Settings)
		groupKeys := add(name, "devices.*.groups[*]", k.GroupSettings)
		tagKeys := add(name, "devices.*.groups[*].tags[*]", k.TagSettings)
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", name, codeList(keys), codeList(groupKeys), codeList(tagKeys), k.Doc)
	}
	b.WriteString("\n")
	// The device tables, then the group and the tag tables.
	slices.SortStableFunc(owns, func(a, b *own) int { return len(a.path) - len(b.path) })
	docs := map[string]kindDocs{} // by package, each parsed once
	for _, o := range owns {
		pkg := o.t.PkgPath()
		d, ok := docs[pkg]
		if !ok {
			var err error
			if d, err = packageKindDocs(pkg, routesFields); err != nil {
				return "", err
			}
			docs[pkg] = d
		}
		settingsTables(&b, o.kinds, section{"`" + o.path + "`", o.path, o.t}, d, defaults)
	}
	return b.String(), nil
}

// kindDocs are the field and type comments of a kind's package.
type kindDocs struct{ fields, types map[string]string }

// packageKindDocs reads the comments of the kind package pkg; a field it
// lacks takes routes' (a kind's settings may inline Credentials).
func packageKindDocs(pkg string, routesFields map[string]string) (kindDocs, error) {
	fields, types, err := packageDocs("../../"+strings.TrimPrefix(pkg, module), pkg)
	if err != nil {
		return kindDocs{}, err
	}
	for k, v := range routesFields {
		if _, ok := fields[k]; !ok {
			fields[k] = v
		}
	}
	return kindDocs{fields, types}, nil
}

// settingsTables writes the key table of a settings struct of kinds, and
// those of the structs below it.
func settingsTables(b *strings.Builder, kinds []string, s section, d kindDocs, defaults map[string]string) {
	pkg := s.t.PkgPath()
	what := "kind"
	if len(kinds) > 1 {
		what = "kinds"
	}
	for queue := []section{s}; len(queue) > 0; queue = queue[1:] {
		s := queue[0]
		fmt.Fprintf(b, "## %s of %s %s\n\n", s.title, what, codeList(kinds))
		if doc := d.types[s.t.Name()]; doc != "" {
			fmt.Fprintf(b, "%s (%s)\n\n", doc, strings.TrimPrefix(pkg, module))
		}
		queue = append(queue, table(b, s, d.fields, defaults)...)
	}
}

// yamlKeys are the keys of the struct t in order, those of its inline
// structs in their place.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		key, opts, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		switch {
		case opts == "inline":
			keys = append(keys, yamlKeys(t.Field(i).Type)...)
		case key != "-" && key != "":
			keys = append(keys, key)
		}
	}
	return keys
}

// codeList renders keys as `a`, `b`; - when there are none.
func codeList(keys []string) string {
	if len(keys) == 0 {
		return "-"
	}
	return "`" + strings.Join(keys, "`, `") + "`"
}
