package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWriteWritesEachFileWithMode0644(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	in := []File{{Node: "a", Name: "a.yaml", Data: []byte("version: 1\n")}, {Node: "b", Name: "b.yaml", Data: []byte("version: 1\n# b\n")}}
	written, err := Write(dir, in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true, true}, written); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	want := []string{"a.yaml -rw-r--r-- version: 1\n", "b.yaml -rw-r--r-- version: 1\n# b\n"}
	if diff := cmp.Diff(want, dirListing(t, dir)); diff != "" {
		t.Errorf("output directory (-want +got):\n%s", diff)
	}
}

// dirListing is every entry of dir (temporary files included) with its
// mode and content.
func dirListing(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		got = append(got, e.Name()+" "+info.Mode().String()+" "+string(data))
	}
	return got
}

// An operator re-renders a whole fleet in which a few nodes changed: only
// those files are written; the others keep their inode and their
// modification time (a deployment tool that compares times sees nothing
// to ship).
func TestWriteWritesOnlyTheFilesThatChanged(t *testing.T) {
	dir := t.TempDir()
	first := []File{
		{Node: "a", Name: "a.yaml", Data: []byte("version: 1\n# a\n")},
		{Node: "b", Name: "b.yaml", Data: []byte("version: 1\n# b\n")},
		{Node: "c", Name: "c.yaml", Data: []byte("version: 1\n# c\n")},
	}
	if _, err := Write(dir, first); err != nil {
		t.Fatal(err)
	}
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	before := map[string]os.FileInfo{}
	for _, r := range first {
		p := filepath.Join(dir, r.Name)
		if err := os.Chtimes(p, past, past); err != nil {
			t.Fatal(err)
		}
		before[r.Name], _ = os.Stat(p)
	}
	again := append([]File(nil), first...)
	again[1].Data = []byte("version: 1\n# b, changed\n")
	written, err := Write(dir, again)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{false, true, false}, written); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	for _, r := range again {
		after, err := os.Stat(filepath.Join(dir, r.Name))
		if err != nil {
			t.Fatal(err)
		}
		kept := os.SameFile(before[r.Name], after) && after.ModTime().Equal(past)
		if changed := r.Name == "b.yaml"; kept == changed {
			t.Errorf("%s: same inode and time %v (%v), want %v", r.Name, kept, after.ModTime(), !changed)
		}
	}
	want := []string{"a.yaml -rw-r--r-- version: 1\n# a\n", "b.yaml -rw-r--r-- version: 1\n# b, changed\n", "c.yaml -rw-r--r-- version: 1\n# c\n"}
	if diff := cmp.Diff(want, dirListing(t, dir)); diff != "" {
		t.Errorf("output directory (-want +got):\n%s", diff)
	}
}

// A file with the right bytes is not yet the rendered file when it has
// another mode or is a link to somewhere else: it is replaced.
func TestWriteReplacesTheRightBytesInTheWrongFile(t *testing.T) {
	dir := t.TempDir()
	data := []byte("version: 1\n")
	if err := os.WriteFile(filepath.Join(dir, "private.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "elsewhere.yaml")
	if err := os.WriteFile(elsewhere, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "longer.yaml"), append(data, '#'), 0o644); err != nil {
		t.Fatal(err)
	}
	written, err := Write(dir, []File{
		{Node: "link", Name: "link.yaml", Data: data},
		{Node: "longer", Name: "longer.yaml", Data: data},
		{Node: "private", Name: "private.yaml", Data: data},
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true, true, true}, written); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	want := []string{"link.yaml -rw-r--r-- version: 1\n", "longer.yaml -rw-r--r-- version: 1\n", "private.yaml -rw-r--r-- version: 1\n"}
	if diff := cmp.Diff(want, dirListing(t, dir)); diff != "" {
		t.Errorf("output directory (-want +got):\n%s", diff)
	}
}

// A file that cannot be written leaves no partial or temporary file, and
// when its temporary file cannot even be made, no file is replaced.
func TestWriteLeavesNoPartialFile(t *testing.T) {
	old := []byte("version: 1\n# old\n")
	tests := []struct {
		name    string
		files   []File
		wantErr string
		want    []string // the directory afterwards
	}{
		{
			name: "a rename that fails replaces the files before it and no other",
			files: []File{
				{Node: "a", Name: "a.yaml", Data: []byte("version: 1\n# new a\n")},
				{Node: "b", Name: "b.yaml", Data: []byte("version: 1\n# new b\n")}, // b.yaml is a directory
				{Node: "c", Name: "c.yaml", Data: []byte("version: 1\n# new c\n")},
			},
			wantErr: "b.yaml",
			want:    []string{"a.yaml -rw-r--r-- version: 1\n# new a\n", "b.yaml drwxr-xr-x ", "c.yaml -rw-r--r-- version: 1\n# old\n"},
		},
		{
			name: "a temporary file that cannot be made replaces nothing",
			files: []File{
				{Node: "a", Name: "a.yaml", Data: []byte("version: 1\n# new a\n")},
				{Node: "c", Name: "c.yaml", Data: []byte("version: 1\n# new c\n")},
				{Node: "long", Name: strings.Repeat("n", 250) + ".yaml", Data: []byte("version: 1\n")}, // its temporary name is too long
			},
			wantErr: strings.Repeat("n", 250) + ".yaml",
			want:    []string{"a.yaml -rw-r--r-- version: 1\n# old\n", "b.yaml drwxr-xr-x ", "c.yaml -rw-r--r-- version: 1\n# old\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"a.yaml", "c.yaml"} {
				if err := os.WriteFile(filepath.Join(dir, f), old, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Join(dir, "b.yaml", "x"), 0o755); err != nil {
				t.Fatal(err)
			}
			written, err := Write(dir, tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || written != nil {
				t.Errorf("Write = %v, %v; want no result and an error naming %s", written, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, dirListing(t, dir)); diff != "" {
				t.Errorf("output directory (-want +got):\n%s", diff)
			}
		})
	}
}
