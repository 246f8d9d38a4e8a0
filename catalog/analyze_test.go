package catalog

import (
	"slices"
	"testing"
)

func TestSplitWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"list_directory", []string{"list", "directory"}},
		{"read-file", []string{"read", "file"}},
		{"fs.readFile", []string{"fs", "read", "File"}},
		{"getHTTPResponse", []string{"get", "HTTP", "Response"}},
		{"HTTPServer", []string{"HTTP", "Server"}},
		{"utf8decode", []string{"utf", "8", "decode"}},
		{"s3_put_object2", []string{"s", "3", "put", "object", "2"}},
		{"GitHub:create_issue", []string{"Git", "Hub", "create", "issue"}},
		{"  spaces\tand\nnewlines ", []string{"spaces", "and", "newlines"}},
		{"Ünïcödé wörds", []string{"Ünïcödé", "wörds"}},
		{"", nil},
		{"__--..", nil},
	}
	for _, tt := range tests {
		if got := splitWords(tt.in, nil); !slices.Equal(got, tt.want) {
			t.Errorf("splitWords(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestStem(t *testing.T) {
	// Pairs that must meet, and words that must stay apart.
	same := [][]string{
		{"file", "files", "filed"},
		{"list", "lists", "listing", "listed"},
		{"delete", "deleted", "deletes", "deleting"},
		{"directory", "directories"},
		{"create", "creates", "created", "creating"},
		{"query", "queries", "queried"},
		{"process", "processes", "processed"},
		{"stop", "stops", "stopped", "stopping"},
		{"run", "runs", "running"},
		{"call", "calls", "called", "calling"},
		{"match", "matches", "matched"},
		{"image", "images"},
		{"copy", "copies", "copied"},
		{"write", "writes", "writing"},
		{"search", "searches", "searching", "searched"},
		{"detail", "details", "detailed"},
	}
	for _, group := range same {
		want := stem(group[0])
		for _, w := range group[1:] {
			if got := stem(w); got != want {
				t.Errorf("stem(%q) = %q, want %q (as stem(%q))", w, got, want, group[0])
			}
		}
	}
	apart := [][2]string{
		{"user", "use"},
		{"status", "stat"},
		{"need", "ne"},
		{"add", "ad"},
		{"bus", "bu"},
		{"analysis", "analys"},
		{"address", "addres"},
	}
	for _, p := range apart {
		if stem(p[0]) == stem(p[1]) {
			t.Errorf("stem(%q) == stem(%q) == %q, want them apart", p[0], p[1], stem(p[0]))
		}
	}
	// Short words and non-ASCII words are left alone.
	for _, w := range []string{"a", "is", "was", "ssh", "add", "k8s", "über", "façades"} {
		if got := stem(w); got != w {
			t.Errorf("stem(%q) = %q, want it unchanged", w, got)
		}
	}
}

func TestTokenize(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Get a detailed listing of all files", []string{"get", "detail", "list", "all", "fil"}},
		{"show me what files are in a folder", []string{"show", "fil", "folder"}},
		{"listDirectories", []string{"list", "directory"}},
		{"the of and", nil},
	}
	for _, tt := range tests {
		if got := tokenize(tt.in, nil); !slices.Equal(got, tt.want) {
			t.Errorf("tokenize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAnalyzeQuery(t *testing.T) {
	got := analyzeQuery("remove folder remove")
	weight := map[string]float64{}
	for _, qt := range got {
		if _, dup := weight[qt.term]; dup {
			t.Errorf("term %q appears twice in %v", qt.term, got)
		}
		weight[qt.term] = qt.weight
	}
	for term, want := range map[string]float64{
		stem("remove"): 1, stem("folder"): 1,
		stem("delete"): synonymWeight, stem("directory"): synonymWeight,
	} {
		if weight[term] != want {
			t.Errorf("weight of %q = %v, want %v (query terms %v)", term, weight[term], want, got)
		}
	}
	// A typed word keeps full weight even when it is also a synonym.
	for _, qt := range analyzeQuery("delete remove") {
		if (qt.term == stem("delete") || qt.term == stem("remove")) && qt.weight != 1 {
			t.Errorf("analyzeQuery(%q): %q has weight %v, want 1", "delete remove", qt.term, qt.weight)
		}
	}
}
