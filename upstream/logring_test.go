package upstream

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestLogRingTail(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		writes []string
		n      int
		want   []string
	}{
		{"empty", 64, nil, 5, nil},
		{"lines", 64, []string{"a\nb\n", "c\n"}, 5, []string{"a", "b", "c"}},
		{"last n", 64, []string{"a\nb\nc\n"}, 2, []string{"b", "c"}},
		{"trailing partial line kept", 64, []string{"a\nb"}, 5, []string{"a", "b"}},
		{"crlf", 64, []string{"a\r\nb\r\n"}, 5, []string{"a", "b"}},
		{"wrap drops the cut line", 8, []string{"aaaa\nbb\ncc\n"}, 5, []string{"bb", "cc"}},
		{"wrap over many writes", 8, []string{"111\n", "222\n", "333\n", "444\n"}, 5, []string{"333", "444"}},
		{"one write bigger than the ring", 4, []string{"abcdefgh\nxy\n"}, 5, []string{"xy"}},
		{"a line longer than the ring keeps its end", 4, []string{"abcdefgh"}, 5, []string{"efgh"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewLogRing(tt.size)
			for _, w := range tt.writes {
				if n, err := r.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := r.Tail(tt.n); !slices.Equal(got, tt.want) {
				t.Errorf("Tail(%d) = %q, want %q", tt.n, got, tt.want)
			}
			if r.Len() > tt.size {
				t.Errorf("Len = %d, over the size %d", r.Len(), tt.size)
			}
		})
	}
}

func TestLogRingConcurrentWritersStayBounded(t *testing.T) {
	r := NewLogRing(1024)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				fmt.Fprintf(r, "writer %d line %d %s\n", w, i, strings.Repeat("z", i%50))
			}
		})
	}
	wg.Wait()
	if r.Len() != 1024 || r.Size() != 1024 {
		t.Fatalf("Len = %d, Size = %d, want 1024", r.Len(), r.Size())
	}
	lines := r.Tail(1000)
	if len(lines) == 0 {
		t.Fatal("no lines")
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "writer ") {
			t.Errorf("torn line %q", l)
		}
	}
}

func BenchmarkLogRingWrite(b *testing.B) {
	r := NewLogRing(DefaultLogRingSize)
	line := []byte(strings.Repeat("x", 999) + "\n")
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		r.Write(line)
	}
}
