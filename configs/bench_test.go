package configs

import (
	"os"
	"testing"
)

// BenchmarkLoad measures loading and merging the shipped example over the defaults.
func BenchmarkLoad(b *testing.B) {
	data, err := os.ReadFile("examples/edge-node.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("edge-node.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseAliasBomb measures how fast a hostile file is refused.
func BenchmarkParseAliasBomb(b *testing.B) {
	data := []byte(bomb())
	for b.Loop() {
		if _, err := Parse("bomb.yaml", data); err == nil {
			b.Fatal("want an error")
		}
	}
}
