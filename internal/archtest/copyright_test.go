package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNoCodeFromElsewhere: every file of the repository is written here.
// Code from elsewhere (the Go standard library included) is used as a
// dependency, never copied in; no file but a licence or the package's
// copyright file carries another author's copyright notice.
func TestNoCodeFromElsewhere(t *testing.T) {
	root := moduleRoot(t)
	notice := regexp.MustCompile(`(?i)copyright (\(c\) )?[0-9]{4}.*(go authors|google|the kubernetes|inc\.|llc|foundation|authors)`)
	var bad []string
	err := walkRepo(root, nil, func(p, rel string, d os.DirEntry) error {
		base := d.Name()
		if strings.HasPrefix(base, "LICENSE") || strings.Contains(base, "copyright") {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > 4<<20 {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, "internal/archtest/copyright_test.go") {
			return nil // the pattern itself
		}
		if m := notice.Find(b); m != nil {
			bad = append(bad, rel+": "+string(m))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("files that carry another author's copyright (use the code as a dependency, never a copy):\n  %s", strings.Join(bad, "\n  "))
	}
}

// walkRepo calls fn for every file of the repository at root, with its
// path relative to root (slash-separated), past hidden directories, bin,
// dist, and the directories skip names (skip may be nil).
func walkRepo(root string, skip func(rel string) bool, fn func(p, rel string, d os.DirEntry) error) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if !d.IsDir() {
			return fn(p, rel, d)
		}
		if strings.HasPrefix(d.Name(), ".") && rel != "." || rel == "bin" || rel == "dist" || skip != nil && skip(rel) {
			return filepath.SkipDir
		}
		return nil
	})
}
