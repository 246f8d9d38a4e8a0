package gateway

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/store"
)

// maxBatch bounds one INSERT of tool calls.
const maxBatch = 1000

// recorder writes tool calls to the activity log in batches from its own
// goroutine, so a call never waits for the database. A full buffer drops
// records (counted and logged) rather than slowing calls down.
type recorder struct {
	store *store.Store
	log   *slog.Logger
	every time.Duration
	ch    chan store.ToolCall
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	dropped atomic.Int64
	written atomic.Int64
	batches atomic.Int64
	failed  atomic.Int64
}

func newRecorder(st *store.Store, log *slog.Logger, size int, every time.Duration) *recorder {
	r := &recorder{store: st, log: log, every: every, ch: make(chan store.ToolCall, size),
		stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r
}

func (r *recorder) add(c store.ToolCall) {
	select {
	case r.ch <- c:
	default:
		// Log the 1st, 2nd, 4th, 8th... drop: visible without flooding.
		if n := r.dropped.Add(1); n&(n-1) == 0 {
			r.log.Warn("activity buffer full; tool call records dropped", "dropped", n)
		}
	}
}

func (r *recorder) run() {
	defer close(r.done)
	t := time.NewTicker(r.every)
	defer t.Stop()
	batch := make([]store.ToolCall, 0, 64)
	for {
		select {
		case c := <-r.ch:
			batch = append(batch, c)
			if len(batch) >= maxBatch {
				batch = r.flush(batch)
			}
		case <-t.C:
			batch = r.flush(batch)
		case <-r.stop:
			for {
				select {
				case c := <-r.ch:
					batch = append(batch, c)
					if len(batch) >= maxBatch {
						batch = r.flush(batch)
					}
				default:
					r.flush(batch)
					return
				}
			}
		}
	}
}

func (r *recorder) flush(batch []store.ToolCall) []store.ToolCall {
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.store.RecordToolCalls(ctx, batch); err != nil {
		r.failed.Add(int64(len(batch)))
		r.log.Warn("recording tool calls", "calls", len(batch), "err", err)
	} else {
		r.written.Add(int64(len(batch)))
		r.batches.Add(1)
	}
	return batch[:0]
}

// close writes what is buffered and stops.
func (r *recorder) close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}
