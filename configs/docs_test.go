package configs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// schemaKeys lists every key path of the schema, with list elements as
// "[]": version, node.name, uplinks[].name, report.mqtt.tls.ca, ...
func schemaKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := tagName(f)
		if name == "" {
			continue
		}
		key := joinKey(prefix, name)
		ft := f.Type
		switch {
		case ft == durationType || ft == peersType:
			out = append(out, key)
		case ft.Kind() == reflect.Struct:
			out = append(out, schemaKeys(ft, key)...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, key)
			out = append(out, schemaKeys(ft.Elem(), key+"[]")...)
		default:
			out = append(out, key)
		}
	}
	return out
}

// TestEveryKeyIsInTheConfigurationReference: a key the reference does not
// name is a key operators cannot find.
func TestEveryKeyIsInTheConfigurationReference(t *testing.T) {
	ref := filepath.Join("..", "docs", "configuration.md")
	doc, err := os.ReadFile(ref)
	if err != nil {
		t.Fatal(err)
	}
	keys := schemaKeys(reflect.TypeOf(Config{}), "")
	if len(keys) < 40 {
		t.Fatalf("only %d keys found in the schema: the walk is broken", len(keys))
	}
	for _, k := range keys {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("%s does not name `%s`", ref, k)
		}
	}
}
