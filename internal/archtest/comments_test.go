package archtest

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCommentsNameNoIssuesOrCommits: a comment says why in its own words;
// an issue number or a commit means nothing to a reader of the code (the
// figures and their commits live in docs/performance.md). Every Go file's
// comments are read; a hex word is a commit when this repository's git
// knows it as one.
func TestCommentsNameNoIssuesOrCommits(t *testing.T) {
	root := moduleRoot(t)
	issue := regexp.MustCompile(`(?i)\b(issues?|pr) #?[0-9]+\b`)
	hexWord := regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)
	var bad []string
	hexAt := map[string][]string{} // word -> where
	fset := token.NewFileSet()
	testdata := func(rel string) bool { return path.Base(rel) == "testdata" }
	err := walkRepo(root, testdata, func(p, rel string, d os.DirEntry) error {
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				at := fset.Position(c.Pos())
				where := rel + ":" + strings.TrimPrefix(at.String(), p+":")
				if m := issue.FindString(c.Text); m != "" {
					bad = append(bad, where+": "+m)
				}
				for _, w := range hexWord.FindAllString(c.Text, -1) {
					if strings.ContainsAny(w, "0123456789") && strings.ContainsAny(w, "abcdef") {
						hexAt[w] = append(hexAt[w], where)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for w, where := range commits(t, root, hexAt) {
		bad = append(bad, where+": commit "+w)
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Errorf("comments that name an issue or a commit (say why in words; figures and their commits go in docs/performance.md):\n  %s", strings.Join(bad, "\n  "))
	}
}

// commits returns the words of hexAt that name a commit of the repository
// at root, each with the first place it was found. Without git or a
// history (a source tarball) it finds none.
func commits(t *testing.T, root string, hexAt map[string][]string) map[string]string {
	t.Helper()
	if len(hexAt) == 0 {
		return nil
	}
	var in bytes.Buffer
	var words []string
	for w := range hexAt {
		words = append(words, w)
		in.WriteString(w + "^{commit}\n")
	}
	cmd := exec.Command("git", "-C", root, "cat-file", "--batch-check=%(objecttype)")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Logf("git cat-file: %v: commits in comments not checked", err)
		return nil
	}
	found := map[string]string{}
	for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if i < len(words) && line == "commit" {
			found[words[i]] = hexAt[words[i]][0]
		}
	}
	return found
}
