package upstream

import (
	"strings"
	"sync"
)

// DefaultLogRingSize is the stderr tail kept per instance.
const DefaultLogRingSize = 64 << 10

// LogRing keeps the last bytes written to it, for a child's stderr. Write
// never blocks beyond a short copy and never grows the buffer past its size,
// so a child that floods stderr costs neither memory nor stdout throughput.
// It is safe for concurrent use.
type LogRing struct {
	mu    sync.Mutex
	buf   []byte
	start int   // index of the oldest byte once the buffer is full
	total int64 // bytes ever written
}

// NewLogRing returns a ring that keeps the last size bytes (DefaultLogRingSize
// when size <= 0).
func NewLogRing(size int) *LogRing {
	if size <= 0 {
		size = DefaultLogRingSize
	}
	// One byte more than asked: once wrapped, the byte before the kept
	// region tells whether its first line is whole.
	return &LogRing{buf: make([]byte, 0, size+1)}
}

// Write keeps the tail of p; it always reports the whole of p written.
func (r *LogRing) Write(p []byte) (int, error) {
	n := len(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total += int64(n)
	size := cap(r.buf)
	if len(p) >= size {
		r.buf = append(r.buf[:0], p[len(p)-size:]...)
		r.start = 0
		return n, nil
	}
	if room := size - len(r.buf); room > 0 { // still filling up
		k := min(room, len(p))
		r.buf = append(r.buf, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 { // full: overwrite the oldest bytes
		k := copy(r.buf[r.start:], p)
		p = p[k:]
		r.start = (r.start + k) % size
	}
	return n, nil
}

// Len returns how many bytes of log the ring holds now (at most its size).
func (r *LogRing) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return min(len(r.buf), r.Size())
}

// Size returns the ring's capacity in bytes.
func (r *LogRing) Size() int { return cap(r.buf) - 1 }

// Written returns how many bytes were ever written, kept or not.
func (r *LogRing) Written() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// Tail returns up to the last n complete or trailing lines, oldest first,
// without their line endings. A line cut by the ring's wrap is dropped.
func (r *LogRing) Tail(n int) []string {
	if n <= 0 {
		return nil
	}
	r.mu.Lock()
	data := make([]byte, 0, len(r.buf))
	data = append(data, r.buf[r.start:]...)
	data = append(data, r.buf[:r.start]...)
	wrapped := r.total > int64(len(r.buf))
	r.mu.Unlock()

	s := string(data)
	if wrapped {
		// Drop the oldest line, cut by the wrap, or the extra byte when
		// that is the newline before a whole line.
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return []string{s[1:]} // one line longer than the ring: keep its end
		}
		s = s[i+1:]
	}
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}
