package archtest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsLinksResolve: every relative link in the README and docs/ points
// at a file that exists and, with a #fragment, at one of its headings (as
// GitHub makes anchors of them). The manual is split over several files;
// a heading that moves or is renamed must not leave a dead link behind.
func TestDocsLinksResolve(t *testing.T) {
	root := moduleRoot(t)
	var files []string
	files = append(files, filepath.Join(root, "README.md"))
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchors := map[string]map[string]bool{}
	var bad []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(src)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
			}
			rel, _ := filepath.Rel(root, f)
			if _, err := os.Stat(dest); err != nil {
				bad = append(bad, fmt.Sprintf("%s: %s: no such file", rel, target))
				continue
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors[dest] == nil {
				anchors[dest] = headingAnchors(t, dest)
			}
			if !anchors[dest][frag] {
				bad = append(bad, fmt.Sprintf("%s: %s: no such heading", rel, target))
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("dead links in the documentation:\n  %s", strings.Join(bad, "\n  "))
	}
}

// stripCode removes fenced code blocks, where brackets are not links.
func stripCode(s string) string {
	var out []string
	in := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if !in {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// headingAnchors are a Markdown file's heading anchors as GitHub makes
// them: lower case, punctuation dropped, spaces to hyphens, and -1, -2 ...
// for a repeated one.
func headingAnchors(t *testing.T, path string) map[string]bool {
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range strings.Split(stripCode(string(src)), "\n") {
		h, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " ")
		if !ok || !strings.HasPrefix(l, "#") {
			continue
		}
		a := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
