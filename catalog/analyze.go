package catalog

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokenize splits s into lower-cased, stemmed terms with stop words dropped.
// Words break on anything that is not a letter or digit, on a lower-to-upper
// case change ("listFiles"), before the last capital of an upper-case run
// followed by lower case ("HTTPServer" → "http", "server") and between letters
// and digits ("utf8" → "utf", "8"), so tool names written in any convention
// meet the prose of descriptions and queries.
func tokenize(s string, out []string) []string {
	for _, w := range splitWords(s, nil) {
		w = strings.ToLower(w)
		if stopWords[w] {
			continue
		}
		out = append(out, stem(w))
	}
	return out
}

// splitWords returns the words of s before case folding.
func splitWords(s string, out []string) []string {
	const (
		other = iota
		lower
		upper
		digit
	)
	class := func(r rune) int {
		switch {
		case unicode.IsDigit(r):
			return digit
		case unicode.IsUpper(r):
			return upper
		case unicode.IsLetter(r):
			return lower
		}
		return other
	}
	start := -1
	prev := other
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		c := class(r)
		if c == other {
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			prev, i = c, i+size
			continue
		}
		if start < 0 {
			start = i
		} else {
			split := false
			switch {
			case c == digit && prev != digit, c != digit && prev == digit:
				split = true
			case c == upper && prev == lower:
				split = true
			case c == lower && prev == upper:
				// "HTTPServer": the "S" starts a new word unless it is the
				// run's first letter.
				_, psize := utf8.DecodeLastRuneInString(s[:i])
				if j := i - psize; j > start {
					out = append(out, s[start:j])
					start = j
				}
			}
			if split {
				out = append(out, s[start:i])
				start = i
			}
		}
		prev, i = c, i+size
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// stem reduces an English word to a light stem: plurals, -ed and -ing, and a
// final silent e, so that "files"/"file", "listing"/"list",
// "deleted"/"delete" and "directories"/"directory" share a term. It is
// deliberately weaker than Porter's algorithm: tool vocabulary is full of
// jargon that aggressive suffix stripping merges wrongly ("user"/"use").
func stem(w string) string {
	if len(w) <= 3 || !isASCIILower(w) {
		return w
	}
	// Plurals.
	switch {
	case strings.HasSuffix(w, "ies") && len(w) > 4:
		w = w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "sses"):
		w = w[:len(w)-2]
	case strings.HasSuffix(w, "ss"), strings.HasSuffix(w, "us"), strings.HasSuffix(w, "is"):
	case strings.HasSuffix(w, "s"):
		w = w[:len(w)-1]
	}
	// Past tense and gerund.
	switch {
	case strings.HasSuffix(w, "ied") && len(w) > 4:
		w = w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "eed"):
	case strings.HasSuffix(w, "ed"):
		w = stripVerbSuffix(w, 2)
	case strings.HasSuffix(w, "ing"):
		w = stripVerbSuffix(w, 3)
	}
	// Silent e: "create" meets "creating".
	if len(w) > 3 && w[len(w)-1] == 'e' && w[len(w)-2] != 'e' {
		w = w[:len(w)-1]
	}
	return w
}

// stripVerbSuffix removes an -ed or -ing ending of n bytes when what is left
// still looks like a word (three letters, a vowel), then undoubles a final
// consonant ("stopped" → "stop") except l, s and z ("called" → "call").
func stripVerbSuffix(w string, n int) string {
	base := w[:len(w)-n]
	if len(base) < 3 || !strings.ContainsAny(base, "aeiouy") {
		return w
	}
	if l := len(base); l > 3 && base[l-1] == base[l-2] && !strings.ContainsRune("aeioulsz", rune(base[l-1])) {
		base = base[:l-1]
	}
	return base
}

func isASCIILower(w string) bool {
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return false
		}
	}
	return true
}

// stopWords are dropped from documents and queries alike. The list is short
// on purpose: words such as "all", "new" or "open" carry meaning in tool
// descriptions.
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
		a an the and or but of to in on at by for with from into onto as via per
		is are was were be been being am it its it's this that these those there here
		i me my we our us you your he she they them their what which who whom whose
		how when where why do does did can could should would will shall may might must
		please let lets want need like just also some such then than so if else about
		any each every give tell want wants able way thing things`) {
		m[w] = true
	}
	return m
}()

// synonymGroups are words users and tool authors use interchangeably. A query
// term also looks up its group's other members at synonymWeight, so "show me
// what is in a folder" reaches "list_directory". Multi-meaning words
// ("open", "post", "query") stay out, since expanding them adds more noise
// than recall.
var synonymGroups = [][]string{
	{"directory", "folder", "dir"},
	{"list", "show", "enumerate", "display", "ls"},
	{"delete", "remove", "erase", "rm", "destroy", "purge"},
	{"create", "make", "add", "new"},
	{"get", "fetch", "retrieve", "obtain", "download"},
	{"find", "search", "lookup", "locate", "look"},
	{"update", "modify", "edit", "change", "alter"},
	{"run", "execute", "exec", "invoke", "launch"},
	{"stop", "halt", "kill", "terminate"},
	{"send", "deliver", "dispatch"},
	{"write", "save", "store"},
	{"read", "view"},
	{"copy", "duplicate", "clone"},
	{"move", "relocate"},
	{"message", "msg"},
	{"repository", "repo"},
	{"issue", "ticket", "bug"},
	{"email", "mail", "inbox"},
	{"database", "db"},
	{"image", "picture", "photo", "img"},
	{"url", "link", "uri"},
	{"user", "account", "member", "person", "people"},
	{"web", "internet", "online", "website"},
	{"calendar", "schedule"},
	{"meeting", "event", "appointment"},
	{"error", "exception", "failure"},
	{"note", "memo"},
	{"document", "doc"},
}

// synonymWeight scales a synonym's contribution below that of the word the
// user actually typed.
const synonymWeight = 0.5

// synonyms maps a stemmed term to the stemmed other members of its groups.
var synonyms = func() map[string][]string {
	m := map[string][]string{}
	for _, g := range synonymGroups {
		stems := make([]string, len(g))
		for i, w := range g {
			stems[i] = stem(w)
		}
		for i, s := range stems {
			for j, o := range stems {
				if i != j && o != s && !contains(m[s], o) {
					m[s] = append(m[s], o)
				}
			}
		}
	}
	return m
}()

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// queryTerm is one term of an analysed query with its weight.
type queryTerm struct {
	term   string
	weight float64
}

// analyzeQuery tokenizes a query and adds synonyms. A term typed by the user
// keeps weight 1 even when it is also another term's synonym.
func analyzeQuery(q string) []queryTerm {
	terms := tokenize(q, nil)
	out := make([]queryTerm, 0, len(terms)*2)
	index := map[string]int{}
	add := func(t string, w float64) {
		if i, ok := index[t]; ok {
			if w > out[i].weight {
				out[i].weight = w
			}
			return
		}
		index[t] = len(out)
		out = append(out, queryTerm{t, w})
	}
	for _, t := range terms {
		add(t, 1)
	}
	for _, t := range terms {
		for _, s := range synonyms[t] {
			add(s, synonymWeight)
		}
	}
	return out
}
