package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notification is one NOTIFY received by Listen.
type Notification struct {
	Channel string
	Payload string
}

// ListenOptions are the callbacks of Listen.
type ListenOptions struct {
	// ReadyFunc runs each time LISTEN is in place, the first time and after
	// every reconnection: notifications sent while the connection was down
	// are lost, so the caller re-reads what it caches.
	ReadyFunc func()
	// NotifyFunc runs for each notification, in order, on Listen's goroutine.
	NotifyFunc func(Notification)
	// ErrorFunc hears of each lost or failed connection; nil ignores them.
	ErrorFunc func(error)
	// RetryMax caps the wait between reconnection attempts; default 5 s.
	RetryMax time.Duration
}

// Listen holds a connection of its own, taken out of the pool, LISTENing on
// channels until ctx ends; it reconnects with backoff when the connection is
// lost. It returns ctx's error.
func (s *Store) Listen(ctx context.Context, channels []string, opts ListenOptions) error {
	if opts.RetryMax <= 0 {
		opts.RetryMax = 5 * time.Second
	}
	wait := 50 * time.Millisecond
	for {
		err := s.listenOnce(ctx, channels, opts)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if opts.ErrorFunc != nil && err != nil {
			opts.ErrorFunc(err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, opts.RetryMax)
	}
}

func (s *Store) listenOnce(ctx context.Context, channels []string, opts ListenOptions) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connecting for LISTEN: %w", err)
	}
	// A LISTENing connection must never go back to the pool.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listening on %s: %w", ch, err)
		}
	}
	if opts.ReadyFunc != nil {
		opts.ReadyFunc()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("waiting for notifications: %w", err)
		}
		if opts.NotifyFunc != nil {
			opts.NotifyFunc(Notification{Channel: n.Channel, Payload: n.Payload})
		}
	}
}

// RestartChannel carries restart requests: the payload is a server name,
// and every replica restarts its running instance of it.
const RestartChannel = "mcpgate_restart"

// RequestRestart asks every replica to restart server name and records who
// asked, in one transaction.
func (s *Store) RequestRestart(ctx context.Context, a Actor, name string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, RestartChannel, name); err != nil {
			return err
		}
		return record(ctx, tx, a, "server.restart", "server/"+name, nil)
	})
}
